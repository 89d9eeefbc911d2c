"""Bad input found by the input audit: each case once failed (a traceback, an input destroyed, a
bad value accepted) and is now a one-line refusal, exit status 2, with nothing lost."""
from __future__ import annotations

import pytest

from conftest import write_jsonl
from gpu_neighbors.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory, huse_records):
    folder = tmp_path_factory.mktemp("input_audit")
    train = write_jsonl(folder / "train.jsonl",
                        [{"text": r["text"], "score": r["score"], "source": r["source"]} for r in huse_records[:60]])
    candidates = write_jsonl(folder / "c.jsonl", [{"text": r["text"], "source": r["source"]} for r in huse_records[60:80]])
    scorer = folder / "scorer"
    assert main(["fit", "--train", str(train), "--save", str(scorer), "--kernel", "bleu", "--device", "cpu",
                 "--keep-fields", "source"]) == 0
    return {"train": train, "candidates": candidates, "scorer": scorer}


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-neighbors: error: "), lines
    return lines[0]


@pytest.mark.parametrize("name", ["tensors.safetensors", "training.jsonl"])
@pytest.mark.parametrize("command", ["score", "systems"])
def test_no_output_overwrites_a_file_of_the_saved_scorer_it_reads(files, capsys, name, command):
    """`score --scorer S --output S/training.jsonl --overwrite` replaced the scorer's training texts
    with the results (only S/scorer.json was counted as an input): the scorer no longer loaded."""
    target = files["scorer"] / name
    before = target.read_bytes()
    capsys.readouterr()
    if command == "score":
        argv = ["score", "--scorer", str(files["scorer"]), "--candidates", str(files["candidates"]),
                "--output", str(target), "--overwrite", "--quiet", "--device", "cpu"]
    else:
        argv = ["systems", "--scorer", str(files["scorer"]), "--candidates", str(files["candidates"]),
                "--system-field", "source", "--save", str(target), "--overwrite", "--resamples", "20",
                "--trials", "20", "--device", "cpu", "--quiet"]
    assert main(argv) == 2
    assert f"and --scorer's {name} are the same file" in one_error_line(capsys)
    assert target.read_bytes() == before
