"""Label fields kept by the candidate stream (`keep_fields`): the same labels from JSON Lines,
CSV and Parquet, numbers by their JSON text, and a missing or bad label is a bad record (an
error naming file, line and field, or a rejected line with --skip-bad)."""
from __future__ import annotations

import csv
import json

import pytest

from gpu_neighbors.data import InputError, iter_candidates

ROWS = [{"text": "a b c", "system": "beam", "input": 3}, {"text": "d e", "system": "sample", "input": 3},
        {"text": "", "system": "beam", "input": "x"}, {"text": "f", "system": 7, "input": 2.5}]
EXPECTED = {"system": ["beam", "sample", "beam", "7"], "input": ["3", "3", "x", "2.5"]}


def _labels(path, **options):
    batches = list(iter_candidates(path, keep_fields=("system", "input"), **options).batches(3))
    assert [len(batch) for batch in batches] == [3, 1]
    return {name: sum((batch.labels[name] for batch in batches), []) for name in ("system", "input")}


def test_jsonl_csv_and_parquet_give_the_same_labels(tmp_path):
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    assert _labels(jsonl) == EXPECTED
    table = tmp_path / "c.csv"
    with open(table, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["text", "system", "input"])
        writer.writeheader()
        writer.writerows(ROWS)
    assert _labels(table) == EXPECTED
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet

    parquet = tmp_path / "c.parquet"
    pyarrow.parquet.write_table(pyarrow.table({"text": [r["text"] for r in ROWS],
                                               "system": [str(r["system"]) for r in ROWS],
                                               "input": [str(r["input"]) for r in ROWS]}), parquet)
    assert _labels(parquet) == EXPECTED
    batch = next(iter_candidates(jsonl, keep_fields=("system",)).batches(4)).without_first(2)
    assert batch.labels == {"system": ["beam", "7"]} and batch.texts == ["", "f"]


def test_a_missing_or_bad_label_is_a_bad_record(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [*ROWS[:2], {"text": "g"}, {"text": "h", "system": None}, {"text": "i", "system": ""}, ROWS[3]]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(InputError, match=r"c.jsonl:3: field 'system': missing"):
        list(iter_candidates(path, keep_fields=("system",)).batches(10))
    rejects = tmp_path / "rejects.jsonl"
    stream = iter_candidates(path, keep_fields=("system",), skip_bad=True, rejects=rejects)
    batches = list(stream.batches(10))
    assert batches[0].labels == {"system": ["beam", "sample", "7"]} and batches[0].lines == [1, 2, 6]
    reasons = [json.loads(line)["reason"] for line in rejects.read_text().splitlines()]
    assert reasons == ["field 'system': missing", "field 'system': null: every candidate needs a value here",
                       "field 'system': empty"]
    table = tmp_path / "c.csv"
    table.write_text("text,model\na,b\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"c.csv:1: field 'system': no such column"):
        list(iter_candidates(table, keep_fields=("system",)))
