"""The command line as a user meets it: output format, evaluation, and bad input."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import write_jsonl
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.cli import main
from gpu_neighbors.evaluation.agreement import agreement


@pytest.fixture()
def train_file(tmp_path, huse_records):
    return write_jsonl(tmp_path / "train.jsonl", huse_records[:120])


def test_score_writes_one_line_per_candidate_in_order(tmp_path, train_file, huse_texts, huse_scores):
    candidates = tmp_path / "cands.txt"
    texts = huse_texts[120:160] + ["", "zzz qqq"]
    candidates.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(["score", "--train", str(train_file), "--candidates", str(candidates), "--output", str(output), "--quiet"]) == 0
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [row["index"] for row in rows] == list(range(len(texts)))
    assert [row["text"] for row in rows] == texts
    assert set(rows[0]) == {"index", "text", "score", "num_neighbors", "std", "estimator", "low", "high",
                            "nearest", "outside"}
    expected = NeighborsScorer().fit(huse_texts[:120], huse_scores[:120]).predict(texts)
    for row, score, count, low, high, nearest, outside in zip(rows, expected.scores, expected.num_neighbors, expected.low,
                                                             expected.high, expected.nearest, expected.outside):
        assert row["num_neighbors"] == count
        assert (row["score"] is None) if math.isnan(score) else row["score"] == score
        assert (row["low"], row["high"]) == ((None, None) if math.isnan(score) else (low, high))
        assert (row["nearest"], row["outside"]) == (nearest, outside)
    assert rows[-2]["score"] is None and rows[-2]["num_neighbors"] == 0
    assert rows[-2]["outside"] and rows[-1]["outside"]  # nothing, and words no training text has


def test_evaluate_json_matches_the_library(tmp_path, train_file, huse_texts, huse_scores, capsys):
    assert main(["evaluate", "--data", str(train_file), "--json", "--smoothing", "add1", "--paper-thresholds"]) == 0
    printed = json.loads(capsys.readouterr().out)
    prediction = NeighborsScorer(kernel=Bleu(smoothing="add1"), estimator=Threshold.paper()).fit(huse_texts[:120],
                                 huse_scores[:120]).leave_one_out()
    expected = agreement(prediction, huse_scores[:120])
    assert printed["kernel"] == "bleu" and printed["n"] == 120
    for key in ("mse", "spearman", "pearson", "coverage"):
        assert printed[key] == pytest.approx(getattr(expected, key), abs=1e-12)
    covered = prediction.covered
    truth = np.asarray(huse_scores[:120])
    assert printed["mse"] == pytest.approx(np.mean((prediction.scores[covered] - truth[covered]) ** 2))


def test_evaluate_table_by_default(train_file, capsys):
    assert main(["evaluate", "--data", str(train_file)]) == 0
    out = capsys.readouterr().out
    assert "spearman" in out and "coverage" in out and "kernel:tfidf" in out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"text": "a b c", "score": 0.5}\n{"text": "d e f"}\n', ["train.jsonl:2", "score"]),
        (b'{"text": "a b c", "score": 0.5}\n{"score": 0.2}\n', ["train.jsonl:2", "text"]),
        (b'{"text": "a b c", "score": 0.5}\n{"text": "x", "score": NaN}\n', ["train.jsonl:2", "score"]),
        (b'{"text": "a b c", "score": "high"}\n', ["train.jsonl:1", "score"]),
        (b'{"text": "a b c", "score": 0.5}\n{"text": "caf\xe9", "score": 0.1}\n', ["train.jsonl:2", "UTF-8"]),
        (b"", ["train.jsonl", "empty"]),
    ],
)
def test_bad_training_file_names_file_line_and_field(tmp_path, capsys, content, expected):
    train = tmp_path / "train.jsonl"
    train.write_bytes(content)
    candidates = tmp_path / "cands.txt"
    candidates.write_text("a b c\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    code = main(["score", "--train", str(train), "--candidates", str(candidates), "--output", str(output), "--quiet"])
    message = capsys.readouterr().err
    assert code == 2
    assert message.startswith("gpu-neighbors: error:")
    for fragment in expected:
        assert fragment in message
    assert not output.exists(), "nothing may be written when the training set is bad"


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    assert main(["evaluate", "--data", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


def test_csv_and_renamed_fields(tmp_path, huse_texts, huse_scores, capsys):
    import csv

    data = tmp_path / "data.csv"
    with data.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["summary", "quality"])
        writer.writerows(zip(huse_texts[:60], huse_scores[:60]))
    assert main(["evaluate", "--data", str(data), "--text-field", "summary", "--score-field", "quality", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 60


def test_out_of_range_score_names_the_line(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": "a b c", "score": 0.5}, {"text": "d e", "score": 4}])
    assert main(["evaluate", "--data", str(train)]) == 2
    message = capsys.readouterr().err
    assert "train.jsonl:2" in message and "score" in message and "outside the score range [0, 1]" in message
    assert main(["evaluate", "--data", str(train), "--score-range", "0", "5", "--min-neighbors", "1", "--json"]) == 0


@pytest.mark.cpu_only
def test_score_takes_one_thread_on_the_cpu_unless_told():
    """torch's default (one thread per core) spins on a busy machine: `score` takes one on the
    CPU unless --threads raises it (bench/bench_threads.py)."""
    import torch

    from gpu_neighbors.cli.commands import default_threads

    assert default_threads("cpu") == 1
    if not torch.cuda.is_available():
        assert default_threads("auto") == 1


def test_score_counts_the_cores_it_may_run_on_once(monkeypatch):
    """Encoders and scoring workers both count the cores this process may run on (its affinity,
    as a container or `taskset` sets it), not the machine's: on one allowed core of eight, one
    scoring worker, not two threads of tiles on one core."""
    import os

    from gpu_neighbors.cli.commands import default_encoders, default_workers

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert default_encoders() == 1
    assert default_workers("cpu") == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert default_encoders() == 4 and default_workers("cpu") == 2


def test_score_leaves_the_host_allocator_alone(tmp_path, train_file, monkeypatch, unasked_allocator):
    """`score`'s tiles run in worker threads while the reader bounds it: glibc is never asked
    to keep freed memory there (core.host_memory), though its fit and tiles run the tile loop,
    which asks elsewhere."""
    from gpu_neighbors.core import host_memory

    asked = unasked_allocator
    candidates = tmp_path / "cands.txt"
    candidates.write_text("a short text\nanother one\n", encoding="utf-8")
    arguments = ["score", "--train", str(train_file), "--candidates", str(candidates), "--quiet"]
    assert main([*arguments, "--output", str(tmp_path / "out.jsonl")]) == 0
    assert not asked and not host_memory.keep_freed_memory()
    monkeypatch.setattr(host_memory, "_asked", False)
    assert main(["evaluate", "--data", str(train_file)]) == 0  # a tile loop elsewhere asks
    assert asked == [True]
