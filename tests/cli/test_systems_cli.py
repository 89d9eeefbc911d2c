"""`gpu-neighbors systems` end to end: per-system means equal those of `score`'s own output,
the same numbers for reordered and CSV candidates, the training set's leave-one-out scale
comparison equals the Python function on `leave_one_out()`, and bad input is one error line
naming file, line and field."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED_DATA, needs
from gpu_neighbors.cli import main
from gpu_neighbors.evaluation import tables
from gpu_neighbors.evaluation.systems import Labelled, leave_one_out_scale
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.estimators import Threshold

DRAWS = ["--resamples", "200", "--trials", "300", "--device", "cpu", "--quiet"]
HUSE = SHARED_DATA  # ../shared, or the GPU check's carried copy


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory, huse_records):
    """A training set of 120 HUSE texts without systems, and candidates: the other 80 texts
    shared out among three systems over 30 inputs (some inputs missing for some systems)."""
    folder = tmp_path_factory.mktemp("systems")
    train = write_jsonl(folder / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:120]])
    rows, rest = [], huse_records[120:]
    for index, record in enumerate(rest):
        rows.append({"text": record["text"], "system": ["alpha", "beta", "gamma"][index % 3], "input": index // 3})
    return folder, train, rows


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_means_equal_score_output_and_reordering_changes_nothing(files, capsys):
    folder, train, rows = files
    candidates = write_jsonl(folder / "candidates.jsonl", rows)
    assert main(["systems", "--train", train, "--candidates", candidates, "--system-field", "system",
                 "--pair-field", "input", "--json", *DRAWS]) == 0
    result = _json(capsys)
    scored = folder / "scored.jsonl"
    assert main(["score", "--train", train, "--candidates", candidates, "--output", str(scored), "--device", "cpu",
                 "--quiet", "--overwrite"]) == 0
    estimates = [json.loads(line)["score"] for line in scored.read_text().splitlines()]
    for row in result["candidates"]["systems"]:
        mine = [e for e, r in zip(estimates, rows) if r["system"] == row["system"]]
        covered = [e for e in mine if e is not None]
        assert (row["texts"], row["covered"]) == (len(mine), len(covered))
        assert row["mean"] == pytest.approx(np.mean(covered), abs=1e-12)
    assert result["candidates"]["settings"]["paired"] is True
    assert result["training"] is None  # the training texts name no system
    reordered = write_jsonl(folder / "reordered.jsonl", rows[::-1])
    as_csv = folder / "candidates.csv"
    with open(as_csv, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["text", "system", "input"])
        writer.writeheader()
        writer.writerows(rows[5:] + rows[:5])
    for other in (reordered, str(as_csv)):
        assert main(["systems", "--train", train, "--candidates", other, "--system-field", "system",
                     "--pair-field", "input", "--json", "--batch-size", "7", *DRAWS]) == 0
        assert _json(capsys)["candidates"] == result["candidates"]


@needs('matplotlib')
def test_training_scale_equals_the_python_function(huse_records, tmp_path, capsys):
    assert main(["systems", "--train", str(HUSE), "--system-field", "source", "--json", "--paper-thresholds",
                 "--plot", str(tmp_path / "systems.png"), "--save", str(tmp_path / "systems.json"), *DRAWS]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed)
    assert json.loads((tmp_path / "systems.json").read_text()) == result
    assert (tmp_path / "systems.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(),
                             device="cpu").fit([r["text"] for r in huse_records],
                                                                  [r["score"] for r in huse_records])
    expected = leave_one_out_scale(scorer.leave_one_out().scores, np.array([r["score"] for r in huse_records]),
                                   Labelled.of([r["source"] for r in huse_records], system_field="source"),
                                   resamples=200, trials=300)
    assert result["training"] == tables.plain(expected.as_dict())
    assert result["training"]["human"]["systems"][0]["system"] == "human"  # people wrote the better summaries
    assert main(["systems", "--train", str(HUSE), "--system-field", "source", "--paper-thresholds", *DRAWS]) == 0
    table = capsys.readouterr().out
    pair = result["training"]["pairs"][0]
    assert f"| {pair['first']} - {pair['second']} | {pair['difference']:.4f} |" in table
    assert f"Shrinkage factor (least-squares slope of the systems' mean estimates on their mean human scores): " \
           f"**{result['training']['shrinkage']:.4f}**" in table
    assert main(["systems", "--train", str(HUSE), "--system-field", "source", "--plot",
                 str(tmp_path / "systems.png"), *DRAWS]) == 2
    assert "systems.png: exists already; pass --overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("case, message", [
    ("missing", "c.jsonl:3: field 'system': missing"),
    ("one", "c.jsonl:4: field 'system': system 'lonely' has only this one text"),
    ("single", "c.jsonl: field 'system': found one system (only 'alpha')"),
    ("twice", "c.jsonl:5: field 'input': system 'alpha' already has a text for input '0' (line 1)"),
    ("object", "c.jsonl:2: field 'system': {\"name\": \"x\"} is not a string or a number"),
])
def test_bad_candidates_are_one_error_line(files, tmp_path, capsys, case, message):
    _, train, rows = files
    rows = [dict(row) for row in rows[:9]]
    if case == "missing":
        del rows[2]["system"]
    elif case == "one":
        rows[3]["system"] = "lonely"
    elif case == "single":
        for row in rows:
            row["system"] = "alpha"
    elif case == "twice":
        rows[4].update(system="alpha", input=0)
    else:
        rows[1]["system"] = {"name": "x"}
    path = tmp_path / "c.jsonl"
    write_jsonl(path, rows)
    args = ["systems", "--train", train, "--candidates", str(path), "--system-field", "system", *DRAWS]
    if case == "twice":
        args += ["--pair-field", "input"]
    assert main(args) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("gpu-neighbors: warning: ")]
    assert lines[0].startswith("gpu-neighbors: error: ") and message in lines[0]  # after one-line warnings


def test_nothing_to_compare_and_plain_text_are_refused(files, tmp_path, capsys):
    _, train, _ = files
    assert main(["systems", "--train", train, "--system-field", "system", *DRAWS]) == 2
    assert "no field 'system' in the training data and no --candidates" in capsys.readouterr().err
    plain = tmp_path / "c.txt"
    plain.write_text("a text\nanother\n", encoding="utf-8")
    assert main(["systems", "--train", train, "--candidates", str(plain), "--system-field", "system", *DRAWS]) == 2
    assert "plain text has no fields, so no 'system'" in capsys.readouterr().err


def test_a_training_text_without_the_system_field_is_named(huse_records, tmp_path, capsys):
    rows = [{"text": r["text"], "score": r["score"], "source": r["source"]} for r in huse_records[:60]]
    del rows[6]["source"]
    train = write_jsonl(tmp_path / "t.jsonl", rows)
    assert main(["systems", "--train", train, "--system-field", "source", *DRAWS]) == 2
    assert "t.jsonl:7: field 'source': missing, though other training texts have it" in capsys.readouterr().err


def test_outputs_are_written_safely(tmp_path, capsys):
    """Through the one output mechanism: never onto an input, a held lock refuses a second run,
    and a run that fails leaves no partial file and the earlier output as it was."""
    import fcntl

    save = tmp_path / "systems.md"
    assert main(["systems", "--train", str(HUSE), "--system-field", "source", "--json", "--save", str(HUSE),
                 *DRAWS]) == 2  # with --json a .jsonl name is one --save may bear
    assert "--train" in capsys.readouterr().err
    with open(f"{save}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["systems", "--train", str(HUSE), "--system-field", "source", "--save", str(save), *DRAWS]) == 2
    assert not save.exists()
    save.write_text("earlier\n", encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "score": 0.5}\n{"text": "b"}\n', encoding="utf-8")
    assert main(["systems", "--train", str(bad), "--system-field", "source", "--save", str(save),
                 "--overwrite", *DRAWS]) == 2
    assert save.read_text(encoding="utf-8") == "earlier\n" and not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("name, extra, written", [
    ("systems.csv", [], "markdown tables, but this is a csv file's name: give a .md name"),
    ("systems.tsv.gz", [], "markdown tables, but this is a tsv file's name: give a .md name"),
    ("systems.jsonl", [], "markdown tables, but this is a jsonl file's name: give a .md name"),
    ("systems.parquet", ["--json"], "one JSON object, but this is a parquet file's name: give a .json name"),
])
def test_a_save_name_of_another_format_is_refused_before_the_work(tmp_path, capsys, name, extra, written):
    """--save under a data format's name that is not what it writes: `s.csv` held markdown
    (exit 0), which read back as CSV was misread. Refused with the training file never read."""
    never_read = tmp_path / "train.jsonl"  # does not exist: reading it would be another error
    assert main(["systems", "--train", str(never_read), "--system-field", "source", "--save",
                 str(tmp_path / name), *extra, *DRAWS]) == 2
    error = capsys.readouterr().err
    assert f"{name}: --save writes {written}" in error, error
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_a_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    import sys

    for name in [name for name in sys.modules if name == "matplotlib" or name.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "gpu_neighbors.evaluation.plots", raising=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["systems", "--train", str(HUSE), "--system-field", "source", "--paper-thresholds",
                 "--plot", str(tmp_path / "systems.png"), *DRAWS]) == 2
    assert "the figures need matplotlib: pip install 'gpu-neighbors[report]'" in capsys.readouterr().err
    assert not (tmp_path / "systems.png").exists()
