"""`gpu-neighbors score` as a stream: every input format, bounded batches, bad records, and
resume after a real kill -9 of the command giving the bytes of an uninterrupted run.

The reference for every number is `NeighborsScorer.predict` on the whole candidate list in
memory (itself checked against NLTK in test_bleu.py); files are written with independent tools
(json, csv, gzip, pyarrow).
"""
from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import needs
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.scoring import streaming
from gpu_neighbors.cli import main

TRAIN_SIZE = 150


@pytest.fixture(scope="module")
def train_file(tmp_path_factory, huse_records) -> Path:
    path = tmp_path_factory.mktemp("train") / "train.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for record in huse_records[:TRAIN_SIZE]:
            handle.write(json.dumps({"text": record["text"], "score": record["score"]}) + "\n")
    return path


@pytest.fixture(scope="module")
def candidates(huse_texts) -> list[str]:
    """Held-out texts, recombinations of them (so they share n-grams with training but are
    new), and adversarial ones."""
    rng = random.Random(5)
    mixed = []
    for _ in range(400):
        first, second = rng.choice(huse_texts).split(), rng.choice(huse_texts).split()
        mixed.append(" ".join(first[: len(first) // 2] + second[len(second) // 2 :]))
    return huse_texts[TRAIN_SIZE:] + mixed + ["", "one", "the the the the", "naïve café 東京 🙂"]


@pytest.fixture(scope="module")
def expected(huse_records, candidates) -> list[tuple]:
    scorer = NeighborsScorer(device="cpu").fit(
        [r["text"] for r in huse_records[:TRAIN_SIZE]], [r["score"] for r in huse_records[:TRAIN_SIZE]]
    )
    return rows_of(scorer.predict(candidates), candidates)


def rows_of(prediction, texts) -> list[tuple]:
    def plain(value: float):
        return None if np.isnan(value) else pytest.approx(float(value), abs=1e-12)

    return [
        (index, text, plain(score), int(count), plain(spread))
        for index, (text, score, count, spread) in enumerate(
            zip(texts, prediction.scores, prediction.num_neighbors, prediction.std)
        )
    ]


def read_rows(path: Path) -> list[tuple]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [(r["index"], r["text"], r["score"], r["num_neighbors"], r["std"]) for r in rows]


def write_candidates(path: Path, texts: list[str]) -> Path:
    """`texts` in the format the name says, with the stdlib's own writers (or pyarrow)."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".parquet"):
        import pyarrow
        import pyarrow.parquet

        pyarrow.parquet.write_table(pyarrow.table({"text": texts}), path, row_group_size=97)
        return path
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", newline="") as handle:
        if name.endswith(".jsonl"):
            for text in texts:
                handle.write(json.dumps({"text": text, "id": len(text)}) + "\n")
        elif name.endswith((".csv", ".tsv")):
            writer = csv.writer(handle, delimiter="\t" if name.endswith(".tsv") else ",")
            writer.writerow(["id", "text"])
            writer.writerows([[i, text] for i, text in enumerate(texts)])
        else:
            handle.write("".join(text + "\n" for text in texts))
    return path


def score_args(train: Path, candidates: Path, output: Path, *extra: str) -> list[str]:
    return ["score", "--train", str(train), "--candidates", str(candidates),
            "--output", str(output), "--device", "cpu", *extra]


@pytest.mark.parametrize("name", [
    "c.jsonl", "c.jsonl.gz", "c.csv", "c.csv.gz", "c.tsv", "c.tsv.gz", "c.txt", "c.txt.gz",
    pytest.param("c.parquet", marks=needs("pyarrow")),
])
def test_every_format_streams_the_same_rows_as_predict(tmp_path, train_file, candidates, expected, name):
    source = write_candidates(tmp_path / name, candidates)
    output = tmp_path / "out.jsonl"
    assert main(score_args(train_file, source, output, "--batch-size", "64", "--quiet")) == 0
    assert read_rows(output) == expected


def _train_columns(path: Path) -> tuple[list[str], list[float]]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r["text"] for r in records], [r["score"] for r in records]


def test_reader_stays_one_batch_ahead_of_the_writer(tmp_path, train_file, candidates, expected, monkeypatch):
    """Bounded memory: the scorer sees one batch at a time, and the reader thread is at most
    READ_AHEAD batches (and the one it holds) ahead when a batch is scored (nothing is slurped
    up front)."""
    read = []
    original_reader = streaming.iter_candidates

    class CountingReader:
        def __init__(self, *args, **kwargs):
            self.stream = original_reader(*args, **kwargs)
            self.rejected = 0

        def batches(self, size):
            for batch in self.stream.batches(size):
                read.extend(candidate.index for candidate in batch)
                yield batch

    calls = []
    original_predict = NeighborsScorer.predict

    def recording_predict(self, candidates, return_neighbors=None):
        calls.append((len(candidates), len(read)))
        return original_predict(self, candidates, return_neighbors)

    monkeypatch.setattr(streaming, "iter_candidates", CountingReader)
    monkeypatch.setattr(NeighborsScorer, "predict", recording_predict)
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    output = tmp_path / "out.jsonl"
    # One worker: with more, that many batches are in flight too and predict's call order is the
    # threads' (the bound below would hold only on an idle machine).
    assert main(score_args(train_file, source, output, "--batch-size", "40", "--workers", "1", "--quiet")) == 0
    assert read_rows(output) == expected
    assert [size for size, _ in calls] == [40] * (len(candidates) // 40) + (
        [len(candidates) % 40] if len(candidates) % 40 else []
    )
    done, ahead = 0, (streaming.READ_AHEAD + 1) * 40
    for size, read_so_far in calls:
        done += size
        assert done <= read_so_far <= done + ahead, "the reader ran too far ahead"


def test_bad_record_stops_with_file_and_line_and_a_fixed_file_resumes(tmp_path, train_file, candidates, expected, capsys):
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    good = lines[36]
    lines[36] = '{"text": "unterminated\n'
    source.write_text("".join(lines), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(score_args(train_file, source, output, "--batch-size", "10", "--quiet")) == 2
    error = capsys.readouterr().err
    assert f"{source}:37: invalid JSON" in error
    assert not output.exists()  # a failed run never leaves a finished-looking output
    assert read_rows(Path(f"{output}.partial")) == expected[:36]  # every candidate before the bad one is kept
    lines[36] = good
    source.write_text("".join(lines), encoding="utf-8")
    # another batch size on resume changes no byte: every row depends on its candidate only
    assert main(score_args(train_file, source, output, "--batch-size", "200", "--quiet", "--resume")) == 0
    assert read_rows(output) == expected


def test_skip_bad_writes_rejects_and_counts_them(tmp_path, train_file, candidates, capsys):
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    bad = {4: "not json at all\n", 17: '{"text": 42}\n', 30: '{"other": "field"}\n', 31: "[1, 2]\n"}
    for index, line in bad.items():
        lines[index] = line
    source.write_text("".join(lines), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(score_args(train_file, source, output, "--batch-size", "64", "--skip-bad")) == 0
    summary = capsys.readouterr().err
    assert f"skipped 4 bad records -> {output}.rejects.jsonl" in summary
    rejects = [json.loads(line) for line in Path(f"{output}.rejects.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [index + 1 for index in sorted(bad)]
    assert [r["raw"] + "\n" for r in rejects] == [bad[index] for index in sorted(bad)]
    assert "invalid JSON" in rejects[0]["reason"] and "field 'text'" in rejects[1]["reason"]
    kept = [text for i, text in enumerate(candidates) if i not in bad]
    scorer = NeighborsScorer(device="cpu").fit(*_train_columns(train_file))
    assert read_rows(output) == rows_of(scorer.predict(kept), kept)


def test_resume_refuses_other_settings_and_a_finished_run_stays_put(tmp_path, train_file, candidates, capsys):
    source = write_candidates(tmp_path / "c.txt", candidates[:100])
    output = tmp_path / "out.jsonl"
    assert main(score_args(train_file, source, output, "--quiet")) == 0
    finished = output.read_bytes()
    assert main(score_args(train_file, source, output, "--quiet", "--resume")) == 0
    assert output.read_bytes() == finished
    assert main(score_args(train_file, source, output, "--quiet", "--resume", "--tau", "0.2")) == 2
    assert "cannot resume: the earlier run used other settings" in capsys.readouterr().err
    assert output.read_bytes() == finished


def test_progress_reports_rates_and_quiet_silences_it(tmp_path, train_file, candidates, capsys):
    source = write_candidates(tmp_path / "c.jsonl", candidates[:120])
    assert main(score_args(train_file, source, tmp_path / "a.jsonl", "--batch-size", "30")) == 0
    shown = capsys.readouterr().err
    assert "/120 texts" in shown and "texts/s" in shown and "pairs/s" in shown
    assert "scored 120 candidates" in shown
    assert main(score_args(train_file, source, tmp_path / "b.jsonl", "--quiet", "--threads", "1")) == 0
    # --quiet silences progress, not the training set's one-line warnings
    assert [line for line in capsys.readouterr().err.splitlines() if not line.startswith("gpu-neighbors: warning: ")] == []
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()


# ---------------------------------------------------------------- a real kill -9

def start_score(arguments: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "gpu_neighbors.cli", *arguments]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def rows_on_disk(output: Path) -> int:
    try:
        return json.loads(Path(f"{output}.meta.json").read_text())["rows"]
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or mid-replace
        return -1


def kill_after(process: subprocess.Popen, output: Path, rows: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while rows_on_disk(output) < rows:
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL


def test_kill_9_then_resume_gives_the_bytes_of_an_uninterrupted_run(tmp_path, train_file, candidates):
    texts = candidates * 4  # 1,816 candidates, 76 durable steps of 24
    source = write_candidates(tmp_path / "c.jsonl.gz", texts)
    clean = tmp_path / "clean.jsonl"
    assert main(score_args(train_file, source, clean, "--batch-size", "24", "--quiet")) == 0

    output = tmp_path / "killed.jsonl"
    arguments = score_args(train_file, source, output, "--batch-size", "24", "--quiet")
    kill_after(start_score(arguments), output, rows=0)  # as soon as the run has started writing
    first = rows_on_disk(output)
    kill_after(start_score([*arguments, "--resume"]), output, rows=first + 700)
    meta = json.loads(Path(f"{output}.meta.json").read_text())
    assert first + 700 <= meta["rows"] < len(texts) and not meta["complete"]
    assert main([*arguments, "--resume"]) == 0
    assert output.read_bytes() == clean.read_bytes()
    assert len(read_rows(output)) == len(texts)
    assert json.loads(Path(f"{output}.meta.json").read_text())["complete"]


def test_training_set_is_tiled_too_with_the_same_results(tmp_path, train_file, candidates, capsys):
    """A budget far below one tile of whole training rows: the scorer cuts the training set into
    blocks (with at least MIN_CHUNK_ROWS candidates a chunk when it can), and no byte changes."""
    from gpu_neighbors.core.tiling import MIN_CHUNK_ROWS, TilePlan

    plan = TilePlan.from_budget(1 << 30, 88, num_train=1_000_000, chunk_rows=None)
    assert plan.chunk_rows == MIN_CHUNK_ROWS and plan.chunk_rows * plan.block_columns <= (1 << 30) // 88
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    roomy, tight = tmp_path / "roomy.jsonl", tmp_path / "tight.jsonl"
    assert main(score_args(train_file, source, roomy, "--quiet")) == 0
    assert main(score_args(train_file, source, tight, "--quiet", "--memory-budget", "20K")) == 0
    assert tight.read_bytes() == roomy.read_bytes()


def test_default_budget_follows_the_hosts_available_memory(monkeypatch):
    import torch

    from gpu_neighbors.core import tiling

    cpu = torch.device("cpu")
    monkeypatch.setattr(tiling, "_available_host_memory", lambda: 400 << 20)
    assert tiling.default_memory_budget(cpu) == 100 << 20
    monkeypatch.setattr(tiling, "_available_host_memory", lambda: 64 << 30)
    assert tiling.default_memory_budget(cpu) == tiling.DEFAULT_CPU_BUDGET
    monkeypatch.setattr(tiling, "_available_host_memory", lambda: None)
    assert tiling.default_memory_budget(cpu) == tiling.DEFAULT_CPU_BUDGET


@pytest.mark.parametrize("explain", [0, 2])
def test_output_bytes_are_json_dumps_of_each_row(tmp_path, train_file, candidates, explain):
    """The column-wise writer writes what json.dumps writes for each row dict, byte for byte."""
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    output = tmp_path / "out.jsonl"
    extra = ["--explain", str(explain), "--explain-text"] if explain else []
    assert main(score_args(train_file, source, output, "--batch-size", "97", "--quiet", *extra)) == 0
    train_texts, train_scores = _train_columns(train_file)
    scorer = NeighborsScorer(device="cpu").fit(train_texts, train_scores)
    prediction = scorer.predict(candidates, return_neighbors=explain or None)
    rows = []
    for index, text in enumerate(candidates):
        score, spread = float(prediction.scores[index]), float(prediction.std[index])
        row = {"index": index, "text": text, "score": None if np.isnan(score) else score,
               "num_neighbors": int(prediction.num_neighbors[index]),
               "std": None if np.isnan(spread) else spread, "estimator": prediction.estimator,
               "low": None if np.isnan(score) else float(prediction.low[index]),
               "high": None if np.isnan(score) else float(prediction.high[index]),
               "nearest": None if np.isinf(prediction.nearest[index]) else float(prediction.nearest[index]),
               "outside": bool(prediction.outside[index])}
        if explain:
            row["neighbors"] = [{**neighbor, "text": train_texts[neighbor["index"]]}
                                for neighbor in prediction.neighbors.rows(index)]
        rows.append(json.dumps(row, ensure_ascii=False) + "\n")
    assert output.read_text(encoding="utf-8") == "".join(rows)


@needs("pyarrow")
def test_a_parquet_output_holds_the_rows_of_the_jsonl_output(tmp_path, train_file, candidates):
    import pyarrow.parquet as pq  # the test set-up installs the parquet extra
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    jsonl, parquet = tmp_path / "out.jsonl", tmp_path / "out.parquet"
    for output in (jsonl, parquet):
        assert main(score_args(train_file, source, output, "--batch-size", "64", "--quiet", "--explain", "1")) == 0
    table = pq.read_table(parquet)
    assert table.schema.field("score").type == "double" and table.num_rows == len(candidates)
    assert table.to_pylist() == [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert not Path(f"{parquet}.partial").exists()


@needs("pyarrow")
def test_a_parquet_output_cannot_be_resumed_or_silently_replaced(tmp_path, train_file, candidates, capsys):
    source = write_candidates(tmp_path / "c.jsonl", candidates[:50])
    output = tmp_path / "out.parquet"
    assert main(score_args(train_file, source, output, "--quiet")) == 0
    before = output.read_bytes()
    capsys.readouterr()
    assert main(score_args(train_file, source, output, "--quiet", "--resume")) != 0
    assert "cannot resume a Parquet output" in capsys.readouterr().err
    assert main(score_args(train_file, source, output, "--quiet")) != 0
    assert "exists already" in capsys.readouterr().err
    assert output.read_bytes() == before


@pytest.mark.parametrize("extra", [[], ["--explain", "2"]])
def test_workers_write_the_same_bytes_in_the_same_order(tmp_path, train_file, candidates, extra):
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    outputs = {}
    for workers in (1, 3):
        outputs[workers] = tmp_path / f"out{workers}.jsonl"
        args = score_args(train_file, source, outputs[workers], "--batch-size", "37", "--quiet",
                          "--workers", str(workers), *extra)
        assert main(args) == 0
    assert outputs[3].read_bytes() == outputs[1].read_bytes()


def test_with_workers_a_bad_record_still_keeps_every_row_before_it(tmp_path, train_file, candidates, expected, capsys):
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[200] = "{not json\n"
    source.write_text("".join(lines), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(score_args(train_file, source, output, "--batch-size", "30", "--quiet", "--workers", "3")) == 2
    assert f"{source}:201: invalid JSON" in capsys.readouterr().err
    assert read_rows(Path(f"{output}.partial")) == expected[:200]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray (the [ray] extra) is not installed: "
                    "--ray says so before it reads the other options")
def test_workers_are_refused_with_ray_which_has_its_own(tmp_path, train_file, candidates, capsys):
    source = write_candidates(tmp_path / "c.jsonl", candidates[:20])
    output = tmp_path / "out.jsonl"
    assert main(score_args(train_file, source, output, "--quiet", "--ray", "--workers", "2")) == 2
    assert "--workers is for the one-process scorer" in capsys.readouterr().err
    assert not output.exists()


def test_an_unbounded_interval_is_written_as_null(tmp_path):
    """Three training texts calibrate no 0.9 interval (the rank ceil(0.9 (m + 1)) exceeds m):
    with no score range to clip to, its ends are infinite, which JSON cannot hold: null, not a
    refused row."""
    scorer = NeighborsScorer(device="cpu", score_range=None).fit(["a b c", "a b d", "a c d"], [0.5, 3.0, 2.0])
    assert np.isinf(scorer.predict(["a b c"]).low).all()
    candidates = tmp_path / "c.txt"
    candidates.write_text("a b c\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    streaming.score_file(scorer, candidates, output)
    row = json.loads(output.read_text(encoding="utf-8"))
    assert row["score"] is not None and (row["low"], row["high"]) == (None, None)
