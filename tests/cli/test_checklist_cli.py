"""`--checklist` on evaluate and report: the split, the held-out file and the seed reach the
library's checklist (whose figures tests/evaluation/test_checklist.py recomputes)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import needs, write_jsonl
from gpu_neighbors import NeighborsScorer, Threshold
from gpu_neighbors.cli import main
from gpu_neighbors.evaluation import tables
from gpu_neighbors.evaluation.checklist import held_out_checklist, held_out_split
from gpu_neighbors.text.perturbations import PERTURBATIONS

FAST = ["--kernel", "bleu", "--paper-thresholds", "--device", "cpu"]


@pytest.fixture()
def data_file(tmp_path, huse_records):
    return write_jsonl(tmp_path / "data.jsonl", huse_records[:120])


def expected(train: list[dict], held: list[dict], seed: int) -> dict:
    texts = [r["text"] for r in train]
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold.paper()).fit(texts, [r["score"] for r in train])
    result = held_out_checklist(scorer, texts, [r["text"] for r in held], np.array([r["score"] for r in held]),
                                seed=seed)
    return json.loads(tables.to_json(result.as_dict()))


def test_evaluate_checklist_holds_out_a_seeded_fifth(data_file, huse_records, capsys):
    assert main(["evaluate", "--data", str(data_file), "--json", "--checklist", "--seed", "4", *FAST]) == 0
    printed = json.loads(capsys.readouterr().out)
    train, held = held_out_split(120, 4)
    records = huse_records[:120]
    assert printed["checklist"] == expected([records[i] for i in train], [records[i] for i in held], 4)
    assert printed["n"] == 120  # leave-one-out still runs on the whole file
    assert [row["perturbation"] for row in printed["checklist"]["rows"]] == list(PERTURBATIONS)


def test_evaluate_checklist_on_a_held_out_file(tmp_path, data_file, huse_records, capsys):
    held = write_jsonl(tmp_path / "held.jsonl", huse_records[120:])
    assert main(["evaluate", "--data", str(data_file), "--checklist", "--heldout", str(held), *FAST]) == 0
    out = capsys.readouterr().out
    assert f"perturbation checklist on {held}" in out and "| salad |" in out and "needed drop" in out
    assert main(["evaluate", "--data", str(data_file), "--json", "--checklist", "--heldout", str(held), *FAST]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["checklist"] == expected(huse_records[:120], huse_records[120:], 0)


def test_evaluate_refuses_checklist_options_alone(tmp_path, data_file, capsys):
    assert main(["evaluate", "--data", str(data_file), "--seed", "1", *FAST]) == 2
    assert "--seed goes with --checklist" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(data_file), "--heldout", str(data_file), *FAST]) == 2
    assert "--heldout goes with --checklist" in capsys.readouterr().err
    tiny = write_jsonl(tmp_path / "tiny.jsonl", [{"text": "a b", "score": 0.1}, {"text": "b c", "score": 0.2}])
    assert main(["evaluate", "--data", str(tiny), "--checklist", *FAST]) == 2
    assert "needs at least 5 scored texts" in capsys.readouterr().err


@needs('matplotlib')
def test_report_checklist_section(tmp_path, huse_records, capsys):
    data = write_jsonl(tmp_path / "small.jsonl", huse_records[:60])
    argv = ["report", "--data", str(data), "--out", str(tmp_path / "out"), "--kernels", "bleu,rouge",
            "--folds", "3", "--runs", "2", "--sizes", "30,60", "--resamples", "10", "--device", "cpu", "--checklist"]
    assert main(argv) == 0
    page = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    section = page[page.index("## Perturbation checklist"):]
    assert "### `bleu`" in section and "### `rouge`" in section
    assert section.count("| shuffled |") == 2 and "10 bootstrap resamples" in section
    assert main(argv[:-1] + ["--overwrite"]) == 0
    assert "Perturbation checklist" not in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
