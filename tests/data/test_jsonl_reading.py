"""The one-step JSON Lines path takes and refuses exactly the lines the full record checks do."""
from __future__ import annotations

import json

import pytest

from gpu_neighbors.data import iter_candidates, readers
from gpu_neighbors.data.formats import records
from gpu_neighbors.data.readers import _text_field

LINES = [
    b'\xef\xbb\xbf{"text": "a BOM on line 1 is dropped"}\n',
    b'{"text": "plain"}\n',
    b"   \t \n",  # whitespace only: not a record
    b'{"text": "crlf ending"}\r\n',
    b'{"text": "duplicate", "text": "keys: the last wins"}\n',
    b'{"text": 3}\n',
    b'{"other": "missing field"}\n',
    b'["a", "list"]\n',
    b'"a string"\n',
    b"{not json}\n",
    b'{"text": "\\ud800 lone surrogate"}\n',
    b'{"text": "\\ud83d\\ude42 a pair is fine"}\n',
    b'{"text": "bad byte \xff"}\n',
    b'\xef\xbb\xbf{"text": "a BOM past line 1"}\n',
    b'{"text": "' + b"x" * 30 + b'"}\n',  # over the limit below
    b'{"text": null}\n',
    b'{"text": {"nested": "object"}}\n',
    b'{"text": NaN}\n',  # json.loads reads NaN, orjson refuses it: not a string either way
    b'{"text": 123456789012345678901234567890}\n',  # an int to json.loads, a float to orjson
    b'{"text": "a big number beside", "n": 1e400}\n',  # orjson refuses the line
    b'{"text": "no newline at the end"}',
]
MAX_CHARS = 29


@pytest.mark.parametrize("with_orjson", [True, False])
def test_fast_path_matches_the_record_checks(tmp_path, monkeypatch, with_orjson):
    """With orjson parsing the one-step path (where installed) and without it."""
    if with_orjson:
        pytest.importorskip("orjson")
    else:
        monkeypatch.setattr(readers, "orjson", None)
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(LINES))
    rejects = tmp_path / "rejects.jsonl"
    stream = iter_candidates(path, skip_bad=True, rejects=rejects, max_chars=MAX_CHARS)
    got = [(candidate.line, candidate.text) for candidate in stream]

    expected, refused = [], []
    with open(path, "rb") as handle:
        for record in records(handle, path, "jsonl", ("text",)):
            text = record.error or _text_field(record, "text", path, MAX_CHARS)
            if isinstance(text, str):
                expected.append((record.line, text))
            else:
                refused.append({"line": text.line, "reason": text.detail, "raw": record.raw})
    assert got == expected
    assert [text for _, text in got] == ["a BOM on line 1 is dropped", "plain", "crlf ending",
                                         "keys: the last wins", "\U0001f642 a pair is fine",
                                         "a big number beside", "no newline at the end"]
    assert stream.rejected == len(refused) == 13
    assert [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()] == refused
