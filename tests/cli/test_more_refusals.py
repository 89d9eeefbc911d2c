"""Issue 32, the cases the last round left: lone-CR text files, systems --plot with another
name than .png, cross-task with the test set the training set."""
from __future__ import annotations

import pytest

from conftest import write_jsonl
from gpu_neighbors.cli import main


def test_a_plain_text_file_with_lone_carriage_returns_is_refused_naming_the_line(tmp_path, capsys):
    """Old Mac line ends (\\r alone, no \\n in the file) made three texts one; a \\r inside a line
    that \\n ends stays text (tests/data/test_io.py)."""
    data = tmp_path / "mac.txt"
    data.write_bytes(b"a cat sat on the mat\ra dog ran in the park\ra bird flew over the house\r")
    assert main(["self-bleu", "--data", str(data), "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert f"{data}:1: holds a carriage return that ends no line" in error, error
    windows = tmp_path / "windows.txt"  # \r\n line ends are read as ever
    windows.write_bytes(b"a cat sat on the mat\r\na dog ran in the park\r\na bird flew over the house\r\n")
    assert main(["self-bleu", "--data", str(windows), "--device", "cpu"]) == 0
    assert "over 3 texts" in capsys.readouterr().out


def test_systems_plot_needs_a_png_name(tmp_path, huse_records, capsys):
    train = write_jsonl(tmp_path / "train.jsonl",
                        [{"text": r["text"], "score": r["score"], "source": r["source"]} for r in huse_records[:60]])
    plot = tmp_path / "x.txt"
    assert main(["systems", "--train", str(train), "--system-field", "source", "--plot", str(plot),
                 "--resamples", "20", "--trials", "20", "--device", "cpu"]) == 2
    assert "--plot writes a PNG image: give a name ending in .png" in capsys.readouterr().err
    assert not plot.exists()


def test_cross_task_warns_when_the_test_texts_are_training_texts(tmp_path, huse_records, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:60]])
    test = write_jsonl(tmp_path / "test.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[50:80]])
    assert main(["cross-task", "--train", str(train), "--test", str(train), "--device", "cpu"]) == 0
    assert "60 of the 60 test texts are also training texts" in capsys.readouterr().err
    assert main(["cross-task", "--train", str(train), "--test", str(test), "--device", "cpu"]) == 0
    shared = sum(r["text"] in {t["text"] for t in huse_records[:60]} for r in huse_records[50:80])  # 10, and a repeat
    assert f"{shared} of the 30 test texts are also training texts" in capsys.readouterr().err


def test_the_library_warns_too(huse_texts, huse_scores):
    from gpu_neighbors import NeighborsScorer
    from gpu_neighbors.evaluation.protocols import cross_task

    with pytest.warns(UserWarning, match="5 of the 5 test texts are also training texts"):
        cross_task(NeighborsScorer(kernel="bleu"), huse_texts[:60], huse_scores[:60], huse_texts[:5], huse_scores[:5])


def test_held_out_texts_that_are_training_texts_are_warned_about(tmp_path, huse_records, capsys):
    """evaluate --checklist --heldout with the training file itself (or evaluate --scorer S --data
    with S's own training texts) measured texts that find themselves as their nearest neighbour,
    silently: the checklist's originals read 0.80 on average against 0.47 held out truly. Both
    now warn as cross-task does."""
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "score": r["score"]} for r in huse_records[:40]])
    common = ["--kernel", "bleu", "--device", "cpu", "--fluency", "none", "--json"]
    assert main(["evaluate", "--data", str(train), "--checklist", "--heldout", str(train), *common]) == 0
    assert "40 of the 40 held-out texts are also training texts" in capsys.readouterr().err
    scorer = tmp_path / "scorer"
    assert main(["fit", "--train", str(train), "--save", str(scorer), "--kernel", "bleu", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--scorer", str(scorer), "--data", str(train), "--device", "cpu", "--json"]) == 0
    assert "40 of the 40 held-out texts are also training texts" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(train), "--checklist", *common]) == 0  # a true split: no warning
    assert "also training texts" not in capsys.readouterr().err
