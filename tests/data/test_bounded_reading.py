"""Issue 22, items 13 and 14 (input side): a line is read no further than --max-chars needs,
and JSON too deep or with too long an integer is a bad record naming file and line, set aside
by --skip-bad."""
from __future__ import annotations

import json
import tracemalloc

import pytest

from gpu_neighbors.data import InputError, iter_candidates
from gpu_neighbors.data.formats import MAX_JSON_NESTING, jsonl_record, nesting_depth

HUGE = 40 << 20  # one line of 40 MB


def test_one_huge_line_costs_no_more_memory_than_the_limit(tmp_path):
    path = tmp_path / "c.jsonl"
    with open(path, "w", encoding="utf-8") as file:
        file.write(json.dumps({"text": "first"}) + "\n")
        file.write('{"text": "' + "x" * HUGE + '"}\n')
        file.write(json.dumps({"text": "last"}) + "\n")
    rejects = tmp_path / "rejects.jsonl"
    stream = iter_candidates(path, skip_bad=True, rejects=rejects, max_chars=1000)
    tracemalloc.start()
    try:
        texts = [candidate.text for candidate in stream]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert texts == ["first", "last"]
    assert peak < 8 << 20, f"{peak / 2**20:.1f} MiB held while reading a {HUGE >> 20} MB line"
    rejected = json.loads(rejects.read_text(encoding="utf-8"))
    assert rejected["line"] == 2 and "longer than" in rejected["reason"]
    assert len(rejected["raw"]) <= 200  # the rejects file keeps where it was, not the line


@pytest.mark.parametrize("line, reason", [
    ('{"text": "t", "deep": ' + "[" * 5000 + "]" * 5000 + "}", "JSON nested too deeply"),
    ('{"text": "t", "big": ' + "9" * 5000 + "}", "unreadable JSON number"),
    ('{"text": ' + "[" * 5000 + "]" * 5000 + "}", "JSON nested too deeply"),
])
def test_deep_or_huge_json_is_a_bad_record(tmp_path, line, reason):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a"}\n' + line + '\n{"text": "b"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"c\.jsonl:2: .*{reason}"):
        list(iter_candidates(path))
    stream = iter_candidates(path, skip_bad=True)
    assert [candidate.text for candidate in stream] == ["a", "b"]
    assert stream.rejected == 1


@pytest.mark.parametrize("text, depth", [
    ('{"a": [1, [2, {"b": 3}]]}', 4),
    ('{"a": "[[[[{{{{", "b": ["\\"]]]"]}', 2),  # brackets inside strings, an escaped quote
    ("[" * 600 + "]" * 600, 600),
])
def test_nesting_depth_counts_only_structure(text, depth):
    """Python 3.12's parser reads 5,000 levels that 3.11's refuses (issue 31, on the GPU check's
    Python 3.12): the depth is measured, not left to the interpreter's recursion limit."""
    assert nesting_depth(text) == depth


def test_nesting_at_the_limit_is_read_and_beyond_it_refused(tmp_path):
    inside = "[" * (MAX_JSON_NESTING - 1) + "]" * (MAX_JSON_NESTING - 1)
    beyond = "[" * MAX_JSON_NESTING + "]" * MAX_JSON_NESTING
    path = tmp_path / "c.jsonl"
    path.write_text(f'{{"text": "t", "x": {inside}}}\n{{"text": "t", "x": {beyond}}}\n', encoding="utf-8")
    first, second = (jsonl_record(number, raw.encode(), path)
                     for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(keepends=True), 1))
    assert first is not None and first.error is None
    assert second is not None and "nested too deeply" in str(second.error)


def test_a_deep_record_is_refused_on_the_fast_path_too(tmp_path, monkeypatch):
    """The candidates' fast path took any line that parsed with a string text: on Python 3.12,
    whose parser reads 5,000 levels, a record with a deep extra field went through. Simulated here
    with a parser that never gives up."""
    import gpu_neighbors.data.readers as readers

    monkeypatch.setattr(readers, "orjson", None)
    monkeypatch.setattr(readers.json, "loads", lambda text, **_: {"text": "t", "deep": []})
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a"}\n{"text": "t", "deep": ' + "[" * 600 + "]" * 600 + "}\n", encoding="utf-8")
    with pytest.raises(InputError, match="nested too deeply"):
        list(iter_candidates(path))
