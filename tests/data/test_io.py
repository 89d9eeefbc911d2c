"""Readers and the resumable writer of gpu_neighbors.data.

Files are written with independent tools (json, csv.writer, gzip, pyarrow) and read back; every
error path must name file, line and field; ResultWriter must survive torn writes and a real
kill -9 and still produce the bytes of an uninterrupted run.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED_DATA as HUSE
from conftest import needs
from gpu_neighbors.data import (
    Candidate,
    InputError,
    ResultWriter,
    ScoredData,
    count_records,
    detect_format,
    iter_candidates,
    read_scored,
)



def huse_records() -> list[dict]:
    return [json.loads(line) for line in HUSE.read_text(encoding="utf-8").splitlines()]


LONG_TOKENS = " ".join(f"token{i % 37}" for i in range(400))
ADVERSARIAL = [
    "",
    "   ",
    "one",
    "the the the the the",
    LONG_TOKENS,
    "Grüße aus 東京 — naïve café 🚀",
    'he said "hi", then left',
    '"quoted at the start" and after',
    "tab\tinside",
    "line separator\u2028and next\u0085too",
    "x" * 200_000,  # beyond the csv module's default field size limit (and --max-chars)
]
MULTILINE = ["first line\nsecond line", "carriage\r\nreturn", "trailing newline\n"]


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def csv_bytes(header: list[str], rows: list[list], delimiter: str) -> tuple[bytes, list[int]]:
    """The file as csv.writer writes it, and the physical line where each row starts."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerow(header)
    starts, line = [], buffer.getvalue().count("\n")
    for row in rows:
        before = buffer.tell()
        writer.writerow(row)
        starts.append(line + 1)
        line += buffer.getvalue()[before:].count("\n")
    return buffer.getvalue().encode("utf-8"), starts


LONG_TEXTS = {"max_chars": 200_000}  # the adversarial texts include one of 200,000 characters


def csv_quoting(fmt: str) -> dict[str, str]:
    """csv.writer quotes TSV fields as in CSV: reading those back is the `quoting="csv"` opt-in."""
    return {"quoting": "csv"} if fmt == "tsv" else {}


def write_table(path: Path, fmt: str, header: list[str], rows: list[list]) -> list[int]:
    """Writes rows in `fmt` with independent tools; returns each record's physical line."""
    if fmt == "jsonl":
        data = "".join(json.dumps(dict(zip(header, row)), ensure_ascii=False) + "\n"
                       for row in rows)
        write_bytes(path, data.encode("utf-8"))
        return list(range(1, len(rows) + 1))
    data, starts = csv_bytes(header, rows, "," if fmt == "csv" else "\t")
    write_bytes(path, data)
    return starts


# ---------------------------------------------------------------- read_scored

SCORED_NAMES = ["train.jsonl", "train.jsonl.gz", "train.csv", "train.csv.gz", "train.tsv",
                "train.tsv.gz"]


@pytest.mark.parametrize("name", SCORED_NAMES)
def test_read_scored_round_trip(tmp_path, name):
    records = huse_records()
    texts = [r["text"] for r in records] + ADVERSARIAL + MULTILINE
    scores = [r["score"] for r in records] + [0.25 * i - 1 for i in range(len(ADVERSARIAL))] \
        + [7, -3.5e-9, 1e300]
    fmt = detect_format(name)
    lines = write_table(tmp_path / name, fmt, ["text", "score", "source"],
                        [[t, s, "x"] for t, s in zip(texts, scores)])

    data = read_scored(tmp_path / name, keep_fields=("source",), **csv_quoting(fmt), **LONG_TEXTS)

    assert isinstance(data, ScoredData) and len(data) == len(texts)
    assert data.texts == texts
    assert data.scores.dtype == np.float64
    np.testing.assert_array_equal(data.scores, np.array(scores, dtype=np.float64))
    assert data.lines == lines
    assert data.extra == [{"source": "x"}] * len(texts)


def test_read_scored_keeps_json_fields_and_custom_names(tmp_path):
    records = huse_records()
    path = tmp_path / "huse.jsonl"
    path.write_text("".join(json.dumps({"summary": r["text"], "q": r["score"],
                                        "judgments": r["judgments"]}) + "\n" for r in records)
                    + '{"summary": "no judgments", "q": 0}\n', encoding="utf-8")

    data = read_scored(path, text_field="summary", score_field="q", keep_fields=["judgments"])

    assert data.extra[:-1] == [{"judgments": r["judgments"]} for r in records]
    assert data.extra[-1] == {}  # absent keep_fields are left out, not invented
    assert data.texts[0] == records[0]["text"]


def test_read_scored_real_file_as_shipped():
    data = read_scored(HUSE)
    assert len(data) == 200 and data.lines == list(range(1, 201))


def test_blank_jsonl_lines_are_not_records_but_count_as_lines(tmp_path):
    path = write_bytes(tmp_path / "t.jsonl", b'\n{"text": "a", "score": 1}\n  \n'
                                             b'{"text": "b", "score": 2}\n\n')
    data = read_scored(path)
    assert data.texts == ["a", "b"] and data.lines == [2, 4]


def test_utf8_bom_is_dropped(tmp_path):
    path = write_bytes(tmp_path / "t.csv", b"\xef\xbb\xbftext,score\nhello,1\n")
    assert read_scored(path).texts == ["hello"]


J = b'{"text": "fine", "score": 1}\n'
SCORED_ERRORS = [
    # name, content, line, field, fragment of the reason
    ("t.jsonl", J + b'{"text": "b", "score": \n', 2, None, "invalid JSON"),
    ("t.jsonl", J + b"[1, 2]\n", 2, None, "expected a JSON object"),
    ("t.jsonl", J + b'"just a string"\n', 2, None, "expected a JSON object"),
    ("t.jsonl", J + b'{"score": 1}\n', 2, "text", "missing"),
    ("t.jsonl", J + b'{"text": "b"}\n', 2, "score", "missing"),
    ("t.jsonl", J + b'{"text": 5, "score": 1}\n', 2, "text", "5 is not a string"),
    ("t.jsonl", J + b'{"text": null, "score": 1}\n', 2, "text", "null is not a string"),
    ("t.jsonl", J + b'{"text": ["a"], "score": 1}\n', 2, "text", "not a string"),
    ("t.jsonl", J + b'{"text": "b", "score": "abc"}\n', 2, "score", '"abc" is not a number'),
    ("t.jsonl", J + b'{"text": "b", "score": "0.5"}\n', 2, "score", '"0.5" is not a number'),
    ("t.jsonl", J + b'{"text": "b", "score": true}\n', 2, "score", "true is not a number"),
    ("t.jsonl", J + b'{"text": "b", "score": null}\n', 2, "score", "null is not a number"),
    ("t.jsonl", J + b'{"text": "b", "score": [1]}\n', 2, "score", "not a number"),
    ("t.jsonl", J + b'{"text": "b", "score": NaN}\n', 2, "score", "NaN is not a finite number"),
    ("t.jsonl", J + b'{"text": "b", "score": -Infinity}\n', 2, "score", "not a finite number"),
    ("t.jsonl", J + b'{"text": "b", "score": 1e999}\n', 2, "score", "not a finite number"),
    ("t.jsonl", J + b'{"text": "b", "score": 1' + b"0" * 400 + b"}\n", 2, "score",
     "not a finite number"),
    ("t.jsonl", J + J + b'{"text": "caf\xe9", "score": 1}\n', 3, None, "not valid UTF-8"),
    ("t.jsonl", J + b'{"text": "\\ud800", "score": 1}\n', 2, "text", "unpaired surrogate"),
    ("t.jsonl", b"\n" + J + b"\n" + b'{"text": "b"}\n', 4, "score", "missing"),
    ("t.jsonl.gz", J + b'{"text": "b", "score": "x"}\n', 2, "score", "not a number"),
    ("t.csv", b"text,score\na,1\nb,abc\n", 3, "score", '"abc" is not a number'),
    ("t.csv", b"text,score\na,1\nb,\n", 3, "score", '"" is not a number'),
    ("t.csv", b"text,score\na,nan\n", 2, "score", "not a finite number"),
    ("t.csv", b"text,score\na,-inf\n", 2, "score", "not a finite number"),
    ("t.csv", b"text,score\na,1\nb,2,extra\n", 3, None, "3 fields, but the header has 2"),
    ("t.csv", b"text,score\na,1\nb\n", 3, None, "1 fields, but the header has 2"),
    ("t.csv", b"text,score,text\na,1,b\n", 1, None, "duplicate column 'text'"),
    ("t.csv", b"text,quality\na,1\n", 1, "score", "no such column"),
    ("t.csv", b"\n\ntext\n", 3, "score", "no such column"),
    ("t.csv", b"text,score\n\"two\nlines\",x\n", 2, "score", "not a number"),
    ("t.csv", b"text,score\n\"two\nli\xffnes\",1\n", 3, None, "not valid UTF-8"),
    ("t.csv", b"te\xffxt,score\na,1\n", 1, None, "not valid UTF-8"),
    ("t.csv", b'text,score\n"abc"d,1\n', 2, None, "malformed CSV"),
    ("t.csv", b'text,score\na,1\n"never closed,2\n', 3, None, "malformed CSV"),
    ("t.tsv", b"text\tscore\na\t1\nb\tabc\n", 3, "score", "not a number"),
    ("t.tsv.gz", b"text\tscore\na\t1\t2\n", 2, None, "3 fields"),
]


def check_error(error: InputError, path: Path, line: int | None, field: str | None,
                fragment: str) -> None:
    message = str(error)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert message.startswith(where), message
    if field is not None:
        assert f"field '{field}': " in message, message
    assert fragment in message, message
    assert (error.line, error.field) == (line, field)


@pytest.mark.parametrize("name, content, line, field, fragment", SCORED_ERRORS)
def test_read_scored_errors_name_file_line_field(tmp_path, name, content, line, field, fragment):
    path = write_bytes(tmp_path / name, content)
    with pytest.raises(InputError) as caught:
        read_scored(path)
    check_error(caught.value, path, line, field, fragment)


def test_error_message_format(tmp_path):
    path = write_bytes(tmp_path / "train.jsonl", J * 16 + b'{"text": "b", "score": "abc"}\n')
    with pytest.raises(InputError) as caught:
        read_scored(path)
    assert str(caught.value) == f"{path}:17: field 'score': \"abc\" is not a number"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("name, content, fragment", [
    ("t.jsonl", b"", "empty training set"),
    ("t.jsonl", b"\n \n\t\n", "empty training set"),
    ("t.jsonl.gz", b"", "empty training set"),
    ("t.csv", b"", "empty training set"),
    ("t.csv", b"text,score\n", "empty training set"),
    ("t.tsv", b"text\tscore\n\n", "empty training set"),
    ("t.txt", b"a\n", "is not supported here"),
    ("t.parquet", b"PAR1", "is not supported here"),
])
def test_read_scored_file_level_errors(tmp_path, name, content, fragment):
    path = write_bytes(tmp_path / name, content)
    with pytest.raises(InputError) as caught:
        read_scored(path)
    check_error(caught.value, path, None, None, fragment)


def test_missing_file_and_directory(tmp_path):
    for path, fragment in [(tmp_path / "absent.jsonl", "no such file"),
                           (tmp_path, "is a directory")]:
        with pytest.raises(InputError) as caught:
            read_scored(path, file_format="jsonl")
        check_error(caught.value, path, None, None, fragment)
        with pytest.raises(InputError, match=fragment):
            iter_candidates(path)  # fails at once, not at the first read


def test_damaged_gzip_is_an_input_error(tmp_path):
    whole = gzip.compress(J * 5000)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="cannot read") as caught:
        read_scored(path)
    assert str(caught.value).startswith(f"{path}:")


# ---------------------------------------------------------------- candidates

CANDIDATE_NAMES = ["c.jsonl", "c.jsonl.gz", "c.csv", "c.csv.gz", "c.tsv", "c.tsv.gz", "c.txt",
                   "c.txt.gz", "candidates", pytest.param("c.parquet", marks=needs("pyarrow"))]


def write_candidates(path: Path, texts: list[str]) -> list[int]:
    fmt = detect_format(path)
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path,
                       row_group_size=100)
        return list(range(1, len(texts) + 1))
    if fmt == "text":
        write_bytes(path, "".join(t + "\n" for t in texts).encode("utf-8"))
        return list(range(1, len(texts) + 1))
    return write_table(path, fmt, ["id", "text"], [[i, t] for i, t in enumerate(texts)])


@pytest.mark.parametrize("name", CANDIDATE_NAMES)
def test_candidates_round_trip(tmp_path, name):
    texts = [r["text"] for r in huse_records()] + ADVERSARIAL
    if detect_format(name) != "text":
        texts += MULTILINE
    path = tmp_path / name
    lines = write_candidates(path, texts)

    stream = iter_candidates(path, **csv_quoting(detect_format(name)), **LONG_TEXTS)
    got = list(stream)

    assert [c.text for c in got] == texts
    assert [c.index for c in got] == list(range(len(texts)))
    assert [c.line for c in got] == lines
    assert all(isinstance(c, Candidate) for c in got)
    assert stream.rejected == 0
    expected_count = None if name.endswith(".gz") else len(texts)
    assert count_records(path, **csv_quoting(detect_format(name))) == expected_count


@pytest.mark.parametrize("content, texts", [
    (b"a\n\nb\r\n\n", ["a", "", "b", ""]),
    (b"no final newline", ["no final newline"]),
    (b"", []),
    (b"\n", [""]),
    (b"\n\n\n", ["", "", ""]),
    (b"\xef\xbb\xbfbom\n  spaced  \n", ["bom", "  spaced  "]),
    (b"cr\rinside\n", ["cr\rinside"]),
])
def test_plain_text_keeps_empty_lines_as_candidates(tmp_path, content, texts):
    path = write_bytes(tmp_path / "c.txt", content)
    got = list(iter_candidates(path))
    assert [c.text for c in got] == texts
    assert [c.line for c in got] == list(range(1, len(texts) + 1))
    assert count_records(path) == len(texts)


BAD_JSONL = (
    b'{"text": "good one"}\n'          # 1
    b'{"text": "bad \xff byte"}\n'     # 2
    b"not json\n"                      # 3
    b"[1]\n"                           # 4
    b'{"other": 1}\n'                  # 5
    b'{"text": 7}\n'                   # 6
    b"\n"                              # 7 blank: not a record
    b'{"text": "good two"}\n'          # 8
    b'{"text": "\\udc00 lone"}\n'      # 9
    b'{"text": ""}\n'                  # 10
)


def test_skip_bad_writes_rejects_and_numbers_accepted_candidates(tmp_path):
    path = write_bytes(tmp_path / "c.jsonl", BAD_JSONL)
    rejects = tmp_path / "rejects.jsonl"
    stream = iter_candidates(path, skip_bad=True, rejects=rejects)

    got = list(stream)

    assert got == [Candidate(0, 1, "good one"), Candidate(1, 8, "good two"), Candidate(2, 10, "")]
    assert stream.rejected == 6
    logged = [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert [entry["line"] for entry in logged] == [2, 3, 4, 5, 6, 9]
    reasons = [entry["reason"] for entry in logged]
    for reason, fragment in zip(reasons, ["not valid UTF-8", "invalid JSON", "JSON object",
                                          "field 'text': missing", "field 'text': 7 is not",
                                          "field 'text': contains an unpaired surrogate"]):
        assert reason.startswith(fragment) or fragment in reason, reason
    assert logged[0]["raw"] == '{"text": "bad \ufffd byte"}'
    assert logged[1]["raw"] == "not json"
    assert logged[5]["raw"] == '{"text": "\\udc00 lone"}'
    assert count_records(path) == 9  # every non-blank line, bad ones included

    assert list(stream) == got and stream.rejected == 6  # a second pass starts afresh
    assert len(rejects.read_text(encoding="utf-8").splitlines()) == 6


def test_bad_record_raises_lazily_without_skip_bad(tmp_path):
    path = write_bytes(tmp_path / "c.jsonl", BAD_JSONL)
    candidates = iter(iter_candidates(path))
    assert next(candidates) == Candidate(0, 1, "good one")  # streamed, not read up front
    with pytest.raises(InputError) as caught:
        next(candidates)
    check_error(caught.value, path, 2, None, "not valid UTF-8")


def test_skip_bad_csv_keeps_physical_lines(tmp_path):
    content = (b"id,text\n"
               b"1,good\n"                       # 2
               b"2,too,many\n"                   # 3 ragged
               b'3,"spans\nli\xffnes"\n'         # 4-5, bad byte on 5
               b'4,"abc"d\n'                     # 6 malformed
               b'5,"two\nlines ok"\n'            # 7-8
               b"6,last\n")                      # 9
    path = write_bytes(tmp_path / "c.csv", content)
    stream = iter_candidates(path, skip_bad=True, rejects=tmp_path / "r.jsonl")
    got = list(stream)
    assert got == [Candidate(0, 2, "good"), Candidate(1, 7, "two\nlines ok"),
                   Candidate(2, 9, "last")]
    assert stream.rejected == 3
    logged = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text("utf-8").splitlines()]
    assert [entry["line"] for entry in logged] == [3, 5, 6]
    assert logged[0]["raw"] == "2,too,many"
    assert logged[1]["raw"] == '3,"spans\nli\ufffdnes"'
    with pytest.raises(InputError) as caught:
        list(iter_candidates(path))
    check_error(caught.value, path, 3, None, "3 fields, but the header has 2")


def test_skip_bad_plain_text(tmp_path):
    path = write_bytes(tmp_path / "c.txt", b"ok\nbad \xc3\x28\n\nend")
    stream = iter_candidates(path, skip_bad=True)
    assert list(stream) == [Candidate(0, 1, "ok"), Candidate(1, 3, ""), Candidate(2, 4, "end")]
    assert stream.rejected == 1
    with pytest.raises(InputError) as caught:
        list(iter_candidates(path))
    check_error(caught.value, path, 2, None, "not valid UTF-8 (byte 0xc3 at column 5)")


@pytest.mark.parametrize("name, content, line, field, fragment", [
    ("c.jsonl", b'{"text": "a"}\n{"body": "b"}\n', 2, "text", "missing"),
    ("c.jsonl", b'{"text": "a"}\n{"text": 1.5}\n', 2, "text", "1.5 is not a string"),
    ("c.csv", b"id,body\n1,a\n", 1, "text", "no such column"),
    ("c.tsv", b"text\ttext\na\tb\n", 1, None, "duplicate column"),
])
def test_candidate_errors(tmp_path, name, content, line, field, fragment):
    path = write_bytes(tmp_path / name, content)
    with pytest.raises(InputError) as caught:
        list(iter_candidates(path, skip_bad=name.endswith("csv")))  # header errors never skip
    check_error(caught.value, path, line, field, fragment)


def test_rejects_needs_skip_bad(tmp_path):
    path = write_bytes(tmp_path / "c.txt", b"a\n")
    with pytest.raises(ValueError, match="skip_bad"):
        iter_candidates(path, rejects=tmp_path / "r.jsonl")


def test_explicit_format_overrides_extension(tmp_path):
    path = write_bytes(tmp_path / "c.data", b'{"text": "a"}\n')
    assert [c.text for c in iter_candidates(path)] == ['{"text": "a"}']
    assert [c.text for c in iter_candidates(path, file_format="jsonl")] == ["a"]
    with pytest.raises(InputError, match="'xml' is not supported"):
        iter_candidates(path, file_format="xml")


def test_gzip_found_by_magic_bytes(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(gzip.compress("a\nb\n".encode()))
    assert [c.text for c in iter_candidates(path)] == ["a", "b"]
    assert count_records(path) is None


def test_parquet_nulls_types_and_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["a", None, "c"], "n": [1, 2, 3]}), path)
    with pytest.raises(InputError) as caught:
        list(iter_candidates(path))
    check_error(caught.value, path, 2, "text", "missing (null)")
    stream = iter_candidates(path, skip_bad=True)
    assert list(stream) == [Candidate(0, 1, "a"), Candidate(1, 3, "c")]
    assert stream.rejected == 1

    with pytest.raises(InputError) as caught:
        list(iter_candidates(path, text_field="n"))
    check_error(caught.value, path, None, "n", "not a string type")
    with pytest.raises(InputError) as caught:
        list(iter_candidates(path, text_field="body"))
    check_error(caught.value, path, None, "body", "no such column")

    dictionary = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": pa.array(["x", "y", "x"]).dictionary_encode()}), dictionary)
    assert [c.text for c in iter_candidates(dictionary)] == ["x", "y", "x"]

    damaged = write_bytes(tmp_path / "bad.parquet", b"not parquet at all")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        list(iter_candidates(damaged))


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    path = write_bytes(tmp_path / "c.parquet", b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(InputError, match=r"pip install 'gpu-neighbors\[parquet\]'"):
        list(iter_candidates(path))
    assert count_records(path) is None


def test_count_records_counts_csv_records_not_lines(tmp_path):
    data, _ = csv_bytes(["text"], [["a\nb"], ["c"], ["d\n\ne"]], ",")
    path = write_bytes(tmp_path / "c.csv", data + b"\n")
    assert count_records(path) == 3 == len(list(iter_candidates(path)))


# ---------------------------------------------------------------- ResultWriter

TEXTS = [r["text"] for r in huse_records()] + ADVERSARIAL[:-1] + MULTILINE
HEADER = {"kernel": "bleu", "tau": 0.08, "ngram_orders": (2, 3, 4)}


def result_row(index: int) -> dict:
    return {"index": index, "text": TEXTS[index % len(TEXTS)],
            "score": None if index % 7 == 0 else index / 3, "neighbors": index % 11}


def reference_bytes(total: int) -> bytes:
    """What an uninterrupted run must produce, serialised independently of ResultWriter."""
    return "".join(json.dumps(result_row(i), ensure_ascii=False) + "\n"
                   for i in range(total)).encode("utf-8")


def write_rows(writer: ResultWriter, stop: int, chunk: int) -> None:
    for start in range(writer.done, stop, chunk):
        writer.write_many([result_row(i) for i in range(start, min(stop, start + chunk))])


def partial(path: Path) -> Path:
    """Where a run keeps its rows until it completes."""
    return Path(f"{path}.partial")


def read_meta(path: Path) -> dict:
    return json.loads(Path(f"{path}.meta.json").read_text(encoding="utf-8"))


def interrupted_run(path: Path, stop: int, chunk: int) -> None:
    """A run that dies with an exception after `stop` rows: the sidecar says not complete."""
    with pytest.raises(KeyboardInterrupt):
        with ResultWriter(path, resume=False, header=HEADER) as writer:
            write_rows(writer, stop, chunk)
            raise KeyboardInterrupt


def test_uninterrupted_run_matches_independent_serialisation(tmp_path):
    path = tmp_path / "out" / "scores.jsonl"  # the folder is created
    with ResultWriter(path, header=HEADER) as writer:
        write_rows(writer, 50, 7)
        writer.write_many([])
        assert writer.done == 50
    assert path.read_bytes() == reference_bytes(50)
    meta = read_meta(path)
    assert meta == {"header": json.loads(json.dumps(HEADER)), "rows": 50,
                    "bytes": len(reference_bytes(50)), "complete": True, "checkpoint": {}}
    assert not partial(path).exists() and not Path(f"{path}.lock").exists()


def test_a_fresh_run_replaces_a_finished_output_only_with_overwrite(tmp_path):
    path = tmp_path / "scores.jsonl"
    old = b"old content that is longer than the new one\n" * 100
    path.write_bytes(old)
    with pytest.raises(InputError, match="exists already; pass --overwrite"):
        ResultWriter(path, header={"other": 1})
    assert path.read_bytes() == old
    with ResultWriter(path, header={"other": 1}, overwrite=True) as writer:
        write_rows(writer, 3, 2)
    with ResultWriter(path, header=HEADER, overwrite=True) as writer:
        write_rows(writer, 5, 2)
        assert path.read_bytes() == reference_bytes(3)  # the finished output stays until the end
    assert path.read_bytes() == reference_bytes(5)


def test_a_failed_run_leaves_the_finished_output_as_it_was(tmp_path):
    path = tmp_path / "scores.jsonl"
    with ResultWriter(path, header=HEADER) as writer:
        write_rows(writer, 7, 3)
    finished = path.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        with ResultWriter(path, header={"other": 1}, overwrite=True) as writer:
            write_rows(writer, 2, 2)
            raise KeyboardInterrupt
    assert path.read_bytes() == finished
    assert read_meta(path)["complete"] is False and partial(path).exists()


def test_resume_cuts_a_torn_tail_beyond_the_progress_record(tmp_path):
    path = tmp_path / "scores.jsonl"
    interrupted_run(path, 20, 4)
    assert read_meta(path)["complete"] is False
    unrecorded = reference_bytes(23)[len(reference_bytes(20)):]
    with open(partial(path), "ab") as file:  # a chunk written but not yet recorded, torn mid-line
        file.write(unrecorded[: len(unrecorded) - 5])

    with ResultWriter(path, resume=True, header=HEADER) as writer:
        assert writer.done == 20 and not writer.previously_complete
        write_rows(writer, 60, 6)
    assert path.read_bytes() == reference_bytes(60)
    assert read_meta(path)["complete"] is True


@pytest.mark.parametrize("change", [100, -5])
def test_resume_counts_the_rows_on_disk_not_the_records_figure(tmp_path, change):
    """Issue 50: a progress record with no checkpoint (nothing to check the rows against) whose
    "rows" said 100 more than the file held resumed 100 rows on: 199,900 rows for 200,000
    candidates, every index after shifted. The rows are the complete lines the record vouches
    for."""
    path = tmp_path / "scores.jsonl"
    interrupted_run(path, 20, 4)
    meta = read_meta(path)
    assert meta["checkpoint"] == {}
    Path(f"{path}.meta.json").write_text(json.dumps({**meta, "rows": meta["rows"] + change}), encoding="utf-8")
    with ResultWriter(path, resume=True, header=HEADER) as writer:
        assert writer.done == 20
        write_rows(writer, 60, 6)
    assert path.read_bytes() == reference_bytes(60)


@pytest.mark.parametrize("cut", [1, 10, "all_but_last_line", "everything"])
def test_resume_after_data_lost_below_the_record(tmp_path, cut):
    path = tmp_path / "scores.jsonl"
    interrupted_run(path, 30, 5)
    full = reference_bytes(30)
    keep = {"all_but_last_line": len(reference_bytes(29)), "everything": 0}.get(cut)
    keep = len(full) - cut if keep is None else keep
    os.truncate(partial(path), keep)
    complete_lines = full[:keep].count(b"\n")

    with ResultWriter(path, resume=True, header=HEADER) as writer:
        assert writer.done == complete_lines
        write_rows(writer, 45, 4)
    assert path.read_bytes() == reference_bytes(45)


def test_resume_with_the_output_deleted_starts_over(tmp_path):
    path = tmp_path / "scores.jsonl"
    interrupted_run(path, 10, 3)
    partial(path).unlink()
    with ResultWriter(path, resume=True, header=HEADER) as writer:
        assert writer.done == 0
        write_rows(writer, 12, 3)
    assert path.read_bytes() == reference_bytes(12)


def test_resume_without_anything_is_a_fresh_run(tmp_path):
    path = tmp_path / "scores.jsonl"
    with ResultWriter(path, resume=True, header=HEADER) as writer:
        assert writer.done == 0
        write_rows(writer, 8, 3)
    assert path.read_bytes() == reference_bytes(8)


def test_resume_of_a_complete_run_changes_nothing(tmp_path):
    path = tmp_path / "scores.jsonl"
    with ResultWriter(path, header=HEADER) as writer:
        write_rows(writer, 9, 4)
    with ResultWriter(path, resume=True, header=HEADER) as writer:
        assert writer.previously_complete and writer.done == 9
        write_rows(writer, 9, 4)
    assert path.read_bytes() == reference_bytes(9)


@pytest.mark.parametrize("changed, fragment", [
    ({**HEADER, "tau": 0.1}, "tau: 0.08 before, 0.1 now"),
    ({**HEADER, "smoothing": "add1"}, 'smoothing: (absent) before, "add1" now'),
    ({"kernel": "bleu"}, "tau: 0.08 before, (absent) now"),
    (None, "stored"),
])
def test_resume_refuses_other_settings(tmp_path, changed, fragment):
    path = tmp_path / "scores.jsonl"
    interrupted_run(path, 6, 3)
    before = partial(path).read_bytes()
    with pytest.raises(InputError) as caught:
        ResultWriter(path, resume=True, header=changed)
    message = str(caught.value)
    assert message.startswith(f"{path}: cannot resume") and fragment in message, message
    assert partial(path).read_bytes() == before and read_meta(path)["rows"] == 6  # left untouched


def test_resume_refuses_output_without_progress_record(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_bytes(reference_bytes(3))
    with pytest.raises(InputError, match="scores.jsonl.meta.json is missing"):
        ResultWriter(path, resume=True, header=HEADER)
    Path(f"{path}.meta.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="cannot read the progress record"):
        ResultWriter(path, resume=True, header=HEADER)
    Path(f"{path}.meta.json").write_text('{"rows": -1}', encoding="utf-8")
    with pytest.raises(InputError, match="not a progress record"):
        ResultWriter(path, resume=True, header=HEADER)


@pytest.mark.parametrize("field, value", [("checkpoint", None), ("checkpoint", [1]), ("complete", "yes"),
                                          ("complete", 0)])
def test_a_progress_record_with_a_damaged_field_is_refused(tmp_path, field, value):
    """A record whose checkpoint was null ended --resume in an AttributeError traceback."""
    path = tmp_path / "scores.jsonl"
    interrupted_run(path, 6, 3)
    meta = read_meta(path)
    meta[field] = value
    Path(f"{path}.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    before = partial(path).read_bytes()
    with pytest.raises(InputError, match="not a progress record"):
        ResultWriter(path, resume=True, header=HEADER)
    assert partial(path).read_bytes() == before


def test_unwritable_rows_fail_before_writing(tmp_path):
    path = tmp_path / "scores.jsonl"
    with ResultWriter(path, header=HEADER) as writer:
        write_rows(writer, 2, 2)
        with pytest.raises(ValueError, match="result row 3 cannot be written"):
            writer.write_many([{"score": 1.0}, {"score": float("nan")}])
        with pytest.raises(ValueError, match="result row 2 cannot be written"):
            writer.write_many([{"score": object()}])
        with pytest.raises(ValueError, match="result row 2"):
            writer.write_many([{"text": "\ud800"}])
        assert writer.done == 2
        writer.write_many([{"a": np.float64(0.5), "b": np.int64(3), "c": np.array([1, 2]),
                            "d": np.float32(0.25), "e": "ü"}])
    assert path.read_bytes() == reference_bytes(2) + \
        '{"a": 0.5, "b": 3, "c": [1, 2], "d": 0.25, "e": "ü"}\n'.encode("utf-8")
    with pytest.raises(ValueError, match="closed"):
        writer.write_many([{"a": 1}])
    with pytest.raises(ValueError, match="without NaN"):
        ResultWriter(tmp_path / "x.jsonl", header={"tau": float("nan")})


WRITER_SCRIPT = """
import sys, time
from gpu_neighbors.data.writer import ResultWriter
path, total, mode, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])

def row(i):
    return {"index": i, "text": "word " * (i % 60) + "ü 東京 🚀\\n", "score": None if i % 7 == 0 else i / 3}

with ResultWriter(path, resume=mode == "resume", header={"kernel": "bleu", "n": total}) as w:
    for start in range(w.done, total, 3):
        w.write_many([row(i) for i in range(start, min(total, start + 3))])
        time.sleep(pause)
"""


def start_writer(path: Path, total: int, mode: str, pause: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(path),
                             str(total), mode, str(pause)])


def kill_when(process: subprocess.Popen, path: Path, rows: int) -> None:
    """SIGKILL once the run has recorded `rows` rows (polls; a deadline only for safety)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if read_meta(path)["rows"] >= rows:
                break
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL


def test_kill_9_and_resume_give_the_bytes_of_an_uninterrupted_run(tmp_path):
    total = 600
    reference = tmp_path / "reference.jsonl"
    assert start_writer(reference, total, "fresh", 0).wait() == 0

    path = tmp_path / "killed.jsonl"
    kill_when(start_writer(path, total, "fresh", 0.003), path, 30)
    first = read_meta(path)
    assert not first["complete"] and 30 <= first["rows"] < total
    kill_when(start_writer(path, total, "resume", 0.003), path, first["rows"] + 60)
    second = read_meta(path)
    assert not second["complete"] and first["rows"] < second["rows"] < total
    assert start_writer(path, total, "resume", 0).wait() == 0

    assert path.read_bytes() == reference.read_bytes()
    assert read_meta(path)["complete"] and read_meta(path)["rows"] == total
