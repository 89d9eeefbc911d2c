"""Issue 22, item 14: settings that crashed, aborted or never finished are one-line refusals,
and a damaged tokenizer folder is an error naming it, not a traceback."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_neighbors.cli import main


@pytest.fixture()
def data(tmp_path, huse_records) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"], "score": r["score"]}) + "\n" for r in huse_records[:30]))
    return path


@pytest.mark.parametrize("argv, message", [
    (["crossval", "--data", "{data}", "--folds", "0"], "2 or more"),
    (["crossval", "--data", "{data}", "--folds", "1"], "2 or more"),
    (["report", "--data", "{data}", "--out", "{tmp}/r", "--folds", "0"], "2 or more"),
    (["score", "--train", "{data}", "--candidates", "{data}", "--output", "{tmp}/o.jsonl", "--threads", "20000"],
     "threads: at most"),
    (["sweep", "--data", "{data}", "--parameter", "tau", "--values", "0:1:1e-9"], "at most 10,000"),
    (["score", "--train", "{data}", "--candidates", "{data}", "--output", "{tmp}/o.jsonl", "--memory-budget", "1"],
     "below the smallest budget"),
])
def test_settings_that_cannot_finish_are_refused(tmp_path, data, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        main([part.format(data=data, tmp=tmp_path) for part in argv])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error, error


def test_a_damaged_tokenizer_folder_is_one_error_line(tmp_path, data, capsys):
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizerFast"}')
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "WordPiece", "vocab": 5}}')
    assert main(["self-bleu", "--data", str(data), "--tokenizer", str(folder), "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"gpu-neighbors: error: cannot load a Hugging Face tokenizer from the folder '{folder}'")
    assert len(error.strip().splitlines()) == 1


@pytest.mark.parametrize("damage", ["random-safetensors", "pickle-payload", "non-utf8-vocab"])
def test_a_damaged_model_folder_is_one_error_line(tmp_path, data, capsys, damage):
    import os
    import shutil

    from minilm import MODEL_PATH

    folder = tmp_path / "model"
    shutil.copytree(MODEL_PATH, folder)
    if damage == "random-safetensors":
        (folder / "model.safetensors").write_bytes(os.urandom(4096))
    elif damage == "pickle-payload":
        (folder / "model.safetensors").unlink()
        (folder / "pytorch_model.bin").write_bytes(b"\x80\x04cos\nsystem\n(S'echo owned'\ntR.")
    else:
        (folder / "tokenizer.json").unlink()
        (folder / "vocab.txt").write_bytes(b"[PAD]\n\xff\xfe\x00bad\n")
    code = main(["score", "--train", str(data), "--candidates", str(data), "--output", str(tmp_path / "o.jsonl"),
                 "--kernel", "bertscore", "--model", str(folder), "--layer", "2", "--device", "cpu", "--quiet"])
    error = capsys.readouterr().err
    assert code == 2 and error.startswith(f"gpu-neighbors: error: cannot load BERTScore model '{folder}'"), error
    assert len(error.strip().splitlines()) == 1 and "owned" not in capsys.readouterr().out
