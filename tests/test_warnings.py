"""Warnings: the library's keep their category and point at the caller's line, whatever the
call path; the command line prints each as one line, `gpu-neighbors: warning: ...`."""
from __future__ import annotations

import json
import warnings

import pytest

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Auto
from gpu_neighbors.cli import main

TEXTS = ["the cat sat", "a dog ran", "the cat sat", "birds fly south", "rain fell", "the sun rose",
         "a cat ran", "dogs bark", "the moon set", "wind blew"]
SCORES = [0.1 * i for i in range(10)]


@pytest.mark.parametrize("make", [
    lambda: NeighborsScorer().fit(TEXTS, SCORES),  # called directly
    lambda: NeighborsScorer(kernel=Auto(("bleu", "rouge"))).fit(TEXTS, SCORES),  # fit inside fit
    lambda: NeighborsScorer().fit_pairwise(TEXTS, SCORES),  # fit inside fit_pairwise
])
def test_library_warnings_point_at_the_callers_line(make):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
    ours = [w for w in caught if "training texts" in str(w.message)]
    assert ours, [str(w.message) for w in caught]
    for warning in ours:
        assert warning.category is UserWarning
        assert (warning.filename, warning.lineno) == (__file__, make.__code__.co_firstlineno), (
            warning.filename, warning.lineno)


def test_command_line_prints_one_line_per_warning(tmp_path, capsys):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "score": s}) + "\n" for t, s in zip(TEXTS, SCORES)),
                     encoding="utf-8")
    candidates = tmp_path / "candidates.txt"
    candidates.write_text("the cat ran\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(["score", "--train", str(train), "--candidates", str(candidates), "--output", str(output),
                 "--quiet"]) == 0
    lines = capsys.readouterr().err.splitlines()
    warning_lines = [line for line in lines if "training texts" in line]
    assert warning_lines and all(line.startswith("gpu-neighbors: warning: ") for line in warning_lines), lines
    assert not any("UserWarning" in line or ".py:" in line or "fit(" in line for line in lines), lines
    assert warnings.showwarning.__module__ == "warnings"  # Python's own printer is back afterwards
