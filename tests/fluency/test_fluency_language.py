"""The language check before the fluency model's pass (`fluency/language.py`): with use "auto",
training texts that are not English (MLQE's Estonian source sentences) never load or run the
model, and fit, the signature and the saved scorer say why; English training sets run it as
before; a model named by its path runs whatever the language."""
from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED, write_jsonl
from fluency_model import tiny_model
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.cli import main
from gpu_neighbors.core.saved import SavedScorerError
from gpu_neighbors.fluency import Fluency, model_files
from gpu_neighbors.fluency import files as files_module
from gpu_neighbors.fluency import part as part_module
from gpu_neighbors.fluency.language import MIN_ENGLISH_SHARE, english_share
from gpu_neighbors.fluency.model import LanguageModel

DATA = SHARED / "data"
TRAIN = 160


def read(name: str, field: str, count: int | None = None) -> list[str]:
    with (DATA / name).open(encoding="utf-8") as handle:
        return [json.loads(line)[field] for line in itertools.islice(handle, count)]


@pytest.fixture(scope="module")
def estonian() -> tuple[list[str], list[float]]:
    """MLQE's Estonian source sentences, scored by their English translations' quality."""
    return read("mlqe_et-en_dev.jsonl", "source", TRAIN), [float(s) for s in read("mlqe_et-en_dev.jsonl", "score", TRAIN)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, estonian, huse_texts) -> Path:
    return tiny_model(tmp_path_factory.mktemp("tiny_language"), [*estonian[0], *huse_texts])


@pytest.fixture
def no_model_runs(monkeypatch) -> list[object]:
    """Every load of a language model, recorded (none may happen)."""
    loads: list[object] = []

    def refuse(cls, *args):
        loads.append(args)
        raise AssertionError("the language model was loaded")

    monkeypatch.setattr(LanguageModel, "load", classmethod(refuse))
    return loads


@pytest.mark.parametrize(("name", "field"), [
    ("huse_summarization.jsonl", "text"), ("gug_train.jsonl", "text"), ("gug_dev.jsonl", "text"),
    ("mlqe_et-en_train.jsonl", "text"), ("mlqe_et-en_dev.jsonl", "text"),
])
def test_the_english_sets_are_english(name, field):
    """Learner sentences with their misspellings, digit-masked headlines, translations full of
    Estonian names: far above the threshold (0.956-0.963 measured; bench/fluency_language.py)."""
    assert english_share(read(name, field)) > MIN_ENGLISH_SHARE + 0.15


def test_estonian_and_german_are_not():
    assert english_share(read("mlqe_et-en_train.jsonl", "source")) < MIN_ENGLISH_SHARE - 0.5
    german = ["Der Hund läuft schnell über die Straße, weil er Hunger hat.",
              "Wir haben gestern Abend lange über die Zukunft gesprochen."]
    assert english_share(german) < MIN_ENGLISH_SHARE - 0.3
    assert english_share(["", "1 2 3 !", "#"]) is None  # no word: it cannot judge


def test_auto_never_loads_or_runs_the_model_on_text_that_is_not_english(folder, estonian, no_model_runs, tmp_path):
    texts, scores = estonian
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer = NeighborsScorer(fluency=Fluency(folder, dtype="float32"), device="cpu").fit(texts, scores)
        scorer.predict(texts[:20])
    share = english_share(texts)
    assert not no_model_runs and scorer.fluency_ is None and scorer.stacking_ is None
    assert scorer.fluency_english_ == pytest.approx(share) and share < MIN_ENGLISH_SHARE
    assert f"fluency:off(english={share:.3f}<{MIN_ENGLISH_SHARE:g})" in str(scorer.signature)
    told = [str(w.message) for w in caught if "fluency" in str(w.message)]
    assert len(told) == 1, told
    assert f"{share:.0%} of the training texts' words are English" in told[0]
    assert "--fluency PATH" in told[0] and "fluency=PATH" in told[0] and "reads English" in told[0]
    loaded = NeighborsScorer.load(scorer.save(tmp_path / "scorer"), device="cpu")
    assert str(loaded.signature) == str(scorer.signature) and loaded.fluency_ is None
    np.testing.assert_array_equal(loaded.predict(texts[:20]).scores, scorer.predict(texts[:20]).scores)


def test_the_decision_does_not_depend_on_the_order_of_the_texts(folder, estonian, no_model_runs):
    texts, scores = estonian
    order = np.random.default_rng(3).permutation(len(texts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = NeighborsScorer(fluency=Fluency(folder), device="cpu").fit(texts, scores)
        shuffled = NeighborsScorer(fluency=Fluency(folder), device="cpu").fit(
            [texts[index] for index in order], [scores[index] for index in order])
    assert first.fluency_english_ == shuffled.fluency_english_


def test_a_forged_share_is_refused_by_its_place(folder, estonian, tmp_path):
    from forged import rewrite_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = NeighborsScorer(fluency=Fluency(folder), device="cpu").fit(*estonian)
    path = scorer.save(tmp_path / "scorer")
    rewrite_config(path, lambda config: config["fitted"].__setitem__("fluency_english", 1.5))
    with pytest.raises(SavedScorerError, match="fitted.fluency_english must be"):
        NeighborsScorer.load(path, device="cpu")


def test_a_named_model_runs_whatever_the_language(folder, estonian):
    """`fluency=PATH` (use "always") is never overridden by the check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = NeighborsScorer(fluency=str(folder), device="cpu").fit(*estonian)
    assert scorer.fluency_ is not None and scorer.stacking_ is not None and scorer.fluency_english_ is None
    assert ",on(" in str(scorer.signature)


def test_english_texts_still_run_the_model(folder, huse_texts, huse_scores):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = NeighborsScorer(fluency=Fluency(folder, dtype="float32"), device="cpu").fit(
            huse_texts[:TRAIN], huse_scores[:TRAIN])
    assert scorer.fluency_ is not None and scorer.fluency_selection_ is not None  # leave-one-out decided
    assert scorer.fluency_english_ is not None and scorer.fluency_english_ > MIN_ENGLISH_SHARE


def test_fit_prints_why_once(folder, estonian, no_model_runs, monkeypatch, tmp_path, capsys):
    """The command line's auto, with the offline model found: the warning on stderr, once, and
    the reason in the signature fit prints."""
    monkeypatch.setattr(part_module, "offline_model", lambda: folder)
    monkeypatch.setattr(files_module, "OFFLINE_SHA256", model_files(folder).sha256)  # the stand-in, digest and all
    texts, scores = estonian
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": t, "score": s} for t, s in zip(texts, scores)])
    assert main(["fit", "--train", str(train), "--save", str(tmp_path / "s"), "--device", "cpu"]) == 0
    printed = capsys.readouterr()
    assert "fluency:off(english=" in printed.out and not no_model_runs
    assert printed.err.count("words are English") == 1
