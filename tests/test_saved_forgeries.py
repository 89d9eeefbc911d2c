"""Issue 50's probe of saved scorers, read side: folders forged so that the integrity check passes
(every recorded size and SHA-256 recomputed, `forged.py`), special files in place of a scorer's
files, and damaged entries. Each is refused in one line naming the file (SavedScorerError), before
anything is used: no hang, no MemoryError, no traceback, no download, no garbage estimate."""
from __future__ import annotations

import json
import os
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from forged import forge_tensors, record_file, rewrite_config
from gpu_neighbors import NeighborsScorer, Ridge, TopK, reward_function
from gpu_neighbors.core.saved import CONFIG, TENSORS, TRAINING, SavedScorerError
from gpu_neighbors.kernels import parts

SCORERS = {
    "topk": {"kernel": "tfidf", "estimator": TopK()},  # tuned: a tuning section, with top_k
    "ridge": {"kernel": "tfidf", "estimator": Ridge()},
}


@pytest.fixture(scope="module")
def originals(tmp_path_factory, huse_texts, huse_scores) -> dict[str, Path]:
    """Each scorer saved once (with a field kept beside its texts); tests forge copies."""
    root = tmp_path_factory.mktemp("originals")
    folders = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, settings in SCORERS.items():
            scorer = NeighborsScorer(device="cpu", **settings).fit(huse_texts[:90], huse_scores[:90])
            folders[name] = scorer.save(root / name, fields={"source": [f"s{index % 3}" for index in range(90)]})
    return folders


def copy_of(originals: dict[str, Path], name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(originals[name], tmp_path / name))


def refused(folder: Path, match: str, **load) -> str:
    with pytest.raises(SavedScorerError, match=match) as caught:
        NeighborsScorer.load(folder, device="cpu", **load)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_copies_load(originals, tmp_path):
    for name in SCORERS:
        NeighborsScorer.load(copy_of(originals, name, tmp_path), device="cpu")


@pytest.mark.parametrize("name", [CONFIG, TENSORS, TRAINING])
def test_a_link_in_a_scorer_folder_is_refused_unread(originals, tmp_path, name):
    """A link read another file: /dev/zero until MemoryError, /etc/passwd disclosing its size in
    the error. A link is refused before anything is read through it, whatever it points to."""
    folder = copy_of(originals, "topk", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"x" * 4321)
    (folder / name).unlink()
    (folder / name).symlink_to(elsewhere)
    message = refused(folder, rf"{name}: is a symbolic link")
    assert "4321" not in message


@pytest.mark.parametrize("name", [CONFIG, TENSORS, TRAINING])
def test_a_fifo_or_folder_in_a_scorer_folder_is_refused_at_once(originals, tmp_path, name):
    """A FIFO made the load wait forever for a writer. It is refused without waiting. (Should a
    load ever wait again, a writer opened after a deadline lets it end, and fail this test.)"""
    folder = copy_of(originals, "topk", tmp_path)
    (folder / name).unlink()
    os.mkfifo(folder / name)
    loaded = threading.Event()

    def unblock() -> None:
        if not loaded.wait(60):
            try:
                os.close(os.open(folder / name, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader waiting
                pass

    watchdog = threading.Thread(target=unblock)
    watchdog.start()
    try:
        refused(folder, rf"{name}: is not a regular file")
    finally:
        loaded.set()
        watchdog.join()
    (folder / name).unlink()
    (folder / name).mkdir()
    refused(folder, rf"{name}: is not a regular file")


def test_a_file_of_another_size_is_refused_before_it_is_read(originals, tmp_path):
    """The size on disk is compared with the recorded one first: a sparse file of a terabyte is
    refused, never read into memory (which raised MemoryError)."""
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
        pytest.skip("memory is overcommitted here: a read of the terabyte (the defect) would fill it")
    folder = copy_of(originals, "topk", tmp_path)
    try:
        os.truncate(folder / TRAINING, 1 << 40)
    except OSError as error:
        pytest.skip(f"no sparse terabyte file here ({error.strerror})")
    refused(folder, rf"{TRAINING}: {1 << 40} bytes, but scorer.json says \d+")


@pytest.mark.parametrize("value", [-1.0, 0.0, float("nan"), float("inf")])
def test_an_idf_weight_that_is_not_finite_and_positive_is_refused(originals, tmp_path, value):
    """A forged idf of -1 loaded, then predict looped forever in tfidf.quantise; NaN gave
    "nearest": -14624246784.0. idf = ln((1 + n) / (1 + df)) + 1 is at least 1."""
    folder = copy_of(originals, "topk", tmp_path)
    forge_tensors(folder, lambda tensors: tensors["kernel.idf"].__setitem__(3, value))
    refused(folder, r"the idf weights are not all finite positive numbers")


def test_loading_never_downloads_unless_the_caller_asks(originals, tmp_path, monkeypatch):
    """A saved allow_download: true made NeighborsScorer.load and reward_function(folder) reach
    the hub (19 DNS look-ups for a forged kernel entry). The caller decides, never the folder."""
    folder = copy_of(originals, "topk", tmp_path)

    def allowing(settings: dict) -> dict:
        return {**settings, "allow_download": True}

    rewrite_config(folder, lambda config: (config["parts"].__setitem__("kernel", allowing(config["parts"]["kernel"])),
                                           config["fitted"].__setitem__("kernel", allowing(config["fitted"]["kernel"]))))
    asked = []
    made = parts.make_tokenizer
    monkeypatch.setattr(parts, "make_tokenizer", lambda *args: asked.append(args[2]) or made(*args))
    for scorer in (NeighborsScorer.load(folder, device="cpu"), reward_function(folder).source):
        assert scorer.kernel.allow_download is False and scorer.kernel_part_.allow_download is False
    assert asked and not any(asked)
    asked.clear()
    scorer = NeighborsScorer.load(folder, device="cpu", allow_download=True)
    assert scorer.kernel_part_.allow_download is True and asked and all(asked)
    with pytest.raises(ValueError, match="allow_download must be True or False"):
        NeighborsScorer.load(folder, allow_download="no")


NAN = float("nan")
# (scorer, place in scorer.json, forged value, what the refusal says it must be)
FORGED_SETTINGS = [
    ("topk", "fitted.thresholds.top_k", 10**12, r"an integer in \[1, 1000\]"),  # tried to allocate 80 TB
    ("topk", "fitted.thresholds.top_k", 1.5, "an integer"),  # taken as 1
    ("topk", "fitted.thresholds.top_k", True, "an integer"),
    ("topk", "fitted.thresholds.min_neighbors", 10**30, r"an integer in \[1, 90\]"),  # OverflowError
    ("topk", "fitted.thresholds.tau", NAN, "a finite number"),  # every estimate null
    ("topk", "fitted.thresholds.max_fraction", NAN, r"a finite number in \(0, 1\]"),
    ("topk", "fitted.thresholds.power", 0.3, "a multiple of 0.5"),
    ("topk", "fitted.thresholds.estimator", "knn", "one of threshold, topk, ridge"),
    ("topk", "fitted.thresholds", [1], "an object"),
    ("topk", "fitted.tuning.thresholds.top_k", 2.5, "an integer"),
    ("topk", "fitted.tuning.coverage", 2.0, r"a finite number in \[0, 1\]"),
    ("topk", "fitted.tuning.feasible", "yes", "True or False"),
    ("topk", "fitted.tuning.settings_tried", 0, "an integer >= 1"),
    ("topk", "fitted.selection", [1], "an object of numbers or null"),
    ("topk", "fitted.calibration_floor", -1.0, "a finite number > 0"),
    ("topk", "fitted.calibration_floor", True, "a finite number > 0"),
    ("topk", "fitted.outside_texts", 1.5, "an integer >= 1"),
    ("topk", "run.score_range", [1.0, 0.0], r"\(low, high\) with finite low <= high or null"),
    ("topk", "run.chunk_size", 0, "an integer >= 1"),
    ("ridge", "fitted.ridge.penalty", -1.0, "a finite number > 0"),
    ("ridge", "fitted.ridge.intercept", NAN, "a finite number"),
]


@pytest.mark.parametrize(("scorer", "place", "value", "requirement"), FORGED_SETTINGS)
def test_a_fitted_setting_outside_what_fit_allows_is_refused_by_its_place(originals, tmp_path, scorer, place,
                                                                          value, requirement):
    """Issue 50: the fitted settings and calibration in scorer.json were used as they were; each
    is now checked as its constructor argument or flag is (`saving.saved_settings`)."""
    folder = copy_of(originals, scorer, tmp_path)
    *sections, name = place.split(".")

    def forge(config: dict) -> None:
        for section in sections:
            config = config[section]
        config[name] = value

    rewrite_config(folder, forge)
    refused(folder, rf"^scorer.json: {place} must be {requirement}")


@pytest.mark.parametrize(("scorer", "name", "change", "requirement"), [
    ("topk", "calibration_residuals", lambda tensor: tensor.fill_(-1.0), "ascending finite non-negative"),  # low 1, high 0
    ("topk", "calibration_residuals", lambda tensor: tensor.fill_(float("nan")), "ascending finite non-negative"),
    ("topk", "calibration_residuals", lambda tensor: tensor.flip(0), "ascending finite non-negative"),
    ("topk", "outside_1", lambda tensor: tensor.fill_(float("nan")), "ascending finite"),
    ("topk", "outside_products", lambda tensor: tensor.mul_(2.0), r"ascending float64 values in \(0, 1\]"),
    ("ridge", "ridge_alpha", lambda tensor: tensor.fill_(float("inf")), "finite float64 values"),
])
def test_a_calibration_tensor_outside_what_fit_makes_is_refused(originals, tmp_path, scorer, name, change,
                                                                requirement):
    folder = copy_of(originals, scorer, tmp_path)
    forge_tensors(folder, lambda tensors: tensors.__setitem__(name, change(tensors[name].clone()).contiguous()))
    refused(folder, rf"^{TENSORS}: tensor '{name}' must be {requirement}")


def test_a_training_score_outside_the_saved_range_is_refused(originals, tmp_path):
    """A training score of 5.0 beside the saved range [0, 1] was accepted: fit refuses it."""
    folder = copy_of(originals, "topk", tmp_path)
    forge_tensors(folder, lambda tensors: tensors["training.scores"].__setitem__(7, 5.0))
    lines = (folder / TRAINING).read_text(encoding="utf-8").splitlines(keepends=True)
    lines[7] = json.dumps({**json.loads(lines[7]), "score": 5.0}, ensure_ascii=False) + "\n"
    (folder / TRAINING).write_text("".join(lines), encoding="utf-8")
    record_file(folder, TRAINING)
    refused(folder, rf"^{TENSORS}: training score 7: 5 is outside the score range \[0, 1\]")


@pytest.mark.parametrize(("entry", "message"), [
    ("files", r"scorer.json: its 'files' entry must be an object, not \[1\]"),
    ("training", r"scorer.json: its 'training' entry must be an object, not \[1\]"),
    ("tensors", r"tensors.safetensors: holds tensors .* but scorer.json declares \[1\]"),
])
def test_a_damaged_entry_is_a_saved_scorer_error(originals, tmp_path, entry, message):
    """Issue 50: "files": [1] or "training": [1] raised AttributeError, from the API too."""
    folder = copy_of(originals, "topk", tmp_path)
    rewrite_config(folder, lambda config: config.__setitem__(entry, [1]))
    refused(folder, message)


def test_values_nested_past_the_recursion_limit_are_refused(originals, tmp_path):
    """A kept field nested 100,000 deep in training.jsonl (or scorer.json itself) raised
    RecursionError."""
    folder = copy_of(originals, "topk", tmp_path)
    lines = (folder / TRAINING).read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[4])
    lines[4] = json.dumps({**record, "source": "@"}).replace('"@"', "[" * 100_000 + "]" * 100_000) + "\n"
    (folder / TRAINING).write_text("".join(lines), encoding="utf-8")
    record_file(folder, TRAINING)
    refused(folder, rf"{TRAINING}:5: a value nested too deeply")
    (folder / CONFIG).write_text("[" * 100_000 + "]" * 100_000)
    refused(folder, rf"{CONFIG}: not a saved scorer's settings \(nested too deeply\)")


def test_every_forgery_left_the_saved_scorer_loadable(originals):
    """The forgeries above were made on copies: the originals still load and predict."""
    scorer = NeighborsScorer.load(originals["topk"], device="cpu")
    assert torch.isfinite(torch.as_tensor(scorer.predict(["a text about the news"]).low)).all()
    assert np.isfinite(scorer.train_scores_).all()
