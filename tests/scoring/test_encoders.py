"""Candidates encoded by several threads ahead of the scoring: the rows come out in input order
and byte for byte as with one, a run stopped by a bad record resumes to the same bytes, and the
ordered map behind it yields in input order whatever order its calls finish in."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.cli import main
from gpu_neighbors.scoring.streaming import _ordered_map, score_file

from test_streaming import _train_columns, candidates, score_args, train_file, write_candidates  # noqa: F401 (fixtures)


def test_ordered_map_yields_in_input_order_when_calls_finish_out_of_order():
    later_done = threading.Event()

    def slow_first(item: int) -> int:
        if item == 0:
            assert later_done.wait(timeout=60), "the second call never ran beside the first"
        if item == 1:
            later_done.set()
        return item * 10

    assert list(_ordered_map(slow_first, iter(range(7)), 2)) == [0, 10, 20, 30, 40, 50, 60]


def test_ordered_map_gives_the_results_before_an_error_of_its_items():
    def items():
        yield from range(5)
        raise ValueError("bad record")

    got = []
    with pytest.raises(ValueError, match="bad record"):
        for value in _ordered_map(lambda item: item + 1, items(), 3):
            got.append(value)
    assert got == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("workers, encoders", [(1, 2), (2, 2), (1, 5)])
def test_encoders_write_the_bytes_of_one(tmp_path, train_file, candidates, workers, encoders):
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    scorer = NeighborsScorer(device="cpu").fit(*_train_columns(train_file))
    one, many = tmp_path / "one.jsonl", tmp_path / "many.jsonl"
    score_file(scorer, source, one, batch_size=23)
    score_file(scorer, source, many, batch_size=23, workers=workers, encoders=encoders)
    assert many.read_bytes() == one.read_bytes()


def test_a_run_with_workers_stopped_by_a_bad_record_resumes_to_the_same_bytes(tmp_path, train_file, candidates):
    source = write_candidates(tmp_path / "c.jsonl", candidates)
    whole = tmp_path / "whole.jsonl"
    assert main(score_args(train_file, source, whole, "--batch-size", "16", "--quiet", "--workers", "1")) == 0
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    good, lines[101] = lines[101], "{broken\n"
    source.write_text("".join(lines), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(score_args(train_file, source, output, "--batch-size", "16", "--quiet", "--workers", "2")) == 2
    partial = Path(f"{output}.partial").read_bytes()
    assert partial == b"".join(whole.read_bytes().splitlines(keepends=True)[:101])
    lines[101] = good
    source.write_text("".join(lines), encoding="utf-8")
    assert main(score_args(train_file, source, output, "--batch-size", "16", "--quiet", "--resume",
                           "--workers", "3")) == 0
    assert output.read_bytes() == whole.read_bytes()
