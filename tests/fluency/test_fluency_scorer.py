"""Fluency as a part of a scorer (a tiny random Llama built here): in the estimate where it is
used, a column of the outlier test, saved by name and digest (other weights refused by name),
decided by leave-one-out with `auto`, the same numbers in any batch order, texts and token ids
alike in predictions and rewards with no host synchronisation on ids."""
from __future__ import annotations

import itertools
import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from census import Census
from conftest import REAL_FLUENCY_MODEL, SHARED
from fluency_model import tiny_model
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core.saved import SavedScorerError
from gpu_neighbors.fluency import FittedFluency, Fluency, model_files
from gpu_neighbors.fluency import part as part_module
from gpu_neighbors.fluency.model import MAX_TOKENS
from gpu_neighbors.fluency.outlier import FLUENCY_LOW_IS_ATYPICAL
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
from gpu_neighbors.training import reward_function

TRAIN = 150


@pytest.fixture(scope="module")
def folder(tmp_path_factory, huse_texts):
    return tiny_model(tmp_path_factory.mktemp("tiny"), huse_texts)


@pytest.fixture(scope="module")
def scorer(folder, huse_texts, huse_scores) -> NeighborsScorer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HUSE repeats two texts
        return NeighborsScorer(fluency=Fluency(folder, use="always", dtype="float32"), device="cpu").fit(
            huse_texts[:TRAIN], huse_scores[:TRAIN])


def test_fluency_joins_the_estimate_and_the_outlier_test(scorer, folder, huse_texts):
    """Both statistics, the mean log-probability and SLOR against the unigram table learned from
    the calibration texts, in the stacked estimate and as two columns of the outlier test."""
    files = model_files(folder)
    assert f"fluency:{files.name}@{files.sha256[:12]},float32,on(" in str(scorer.signature)
    assert scorer.stacking_ is not None and scorer.outside_.test.low_is_atypical == FLUENCY_LOW_IS_ATYPICAL
    assert len(scorer.stacking_.weights) == 3 and all(weight != 0 for weight in scorer.stacking_.weights)
    assert scorer.within_.center.shape == scorer.within_.scale.shape == (2, MAX_TOKENS + 1)
    assert scorer.fluency_.unigram is not None and scorer.fluency_.unigram.numel() == len(scorer.fluency_.model.vocabulary())
    plain = NeighborsScorer(fluency="none", device="cpu").fit(scorer.kernel_.train_texts, scorer.train_scores_)
    assert "fluency" not in str(plain.signature) and len(plain.outside_.test.columns) == 7
    with_fluency, without = scorer.predict(huse_texts[TRAIN:]), plain.predict(huse_texts[TRAIN:])
    assert not np.array_equal(with_fluency.scores, without.scores)


def test_batch_order_and_size_change_no_estimate_or_flag(scorer, folder, huse_texts):
    texts = huse_texts[TRAIN:] + ["", "a a a a a a", "naïve café 東京"]
    whole = scorer.predict(texts)
    order = np.random.default_rng(1).permutation(len(texts))
    scorer.fluency_.model.remembered.clear()  # computed again, in other batches
    shuffled = scorer.predict([texts[index] for index in order])
    scorer.fluency_.model.remembered.clear()
    halves = [scorer.predict(texts[:9]), scorer.predict(texts[9:])]
    for name in ("scores", "outside", "low", "high", "typicality"):
        np.testing.assert_array_equal(getattr(shuffled, name), getattr(whole, name)[order])
        np.testing.assert_array_equal(np.concatenate([getattr(half, name) for half in halves]), getattr(whole, name))


def test_saved_scorer_names_its_model_and_refuses_other_weights(scorer, folder, huse_texts, tmp_path):
    path = scorer.save(tmp_path / "scorer")
    fitted = json.loads((path / "scorer.json").read_text())["fitted"]["fluency"]
    assert fitted["name"] == folder.name and fitted["sha256"] == model_files(folder).sha256
    loaded = NeighborsScorer.load(path, device="cpu")
    np.testing.assert_array_equal(loaded.predict(huse_texts[TRAIN:]).scores, scorer.predict(huse_texts[TRAIN:]).scores)
    assert torch.equal(loaded.fluency_.unigram, scorer.fluency_.unigram)
    other = tiny_model(tmp_path / "other", huse_texts, seed=1)
    with pytest.raises(SavedScorerError, match=f"fitted with fluency model {folder.name} .*other weights"):
        NeighborsScorer.load(path, device="cpu", fluency=other)
    moved = tmp_path / "moved"
    folder.rename(moved)
    try:
        with pytest.raises(SavedScorerError, match=f"fitted with fluency model {folder.name}, which is not here"):
            NeighborsScorer.load(path, device="cpu")
        assert NeighborsScorer.load(path, device="cpu", fluency=moved).fluency_ is not None
    finally:
        moved.rename(folder)


@pytest.mark.parametrize("place, forged, message", [
    ("dtype", "load", "fitted.fluency.dtype must be bfloat16 or float32"),
    ("sha256", "../../etc", "fitted.fluency.sha256 must be 64 hexadecimal digits"),
    ("selection", {"without": 0.1, "with": 0.2, "used": "yes"}, "fitted.fluency.selection must be an object"),
    ("stacking", {"intercept": float("nan"), "weights": [1.0, 0.0]}, "fitted.fluency.stacking.intercept must be"),
    ("stacking", {"intercept": 0.0, "weights": []}, "fitted.fluency.stacking.weights must be a non-empty list"),
])
def test_forged_fluency_values_are_refused_by_their_place(scorer, tmp_path, place, forged, message):
    """Values a fit could not have made, with every digest recomputed: a dtype that names another
    torch attribute (torch.load), a digest that is no digest, a NaN coefficient."""
    from forged import rewrite_config

    path = scorer.save(tmp_path / "scorer")
    rewrite_config(path, lambda config: config["fitted"]["fluency"].__setitem__(place, forged))
    with pytest.raises(SavedScorerError, match=message):
        NeighborsScorer.load(path, device="cpu")


@pytest.mark.parametrize("change, message", [
    (lambda tensors: tensors.__setitem__("fluency_unigram", tensors["fluency_unigram"][:-1].clone()),
     "the fluency unigram table has .* entries, but .* has .* tokens"),
    (lambda tensors: tensors.__setitem__("fluency_unigram", -tensors["fluency_unigram"]),
     "tensor 'fluency_unigram' must be finite non-positive float64 values"),
    (lambda tensors: tensors.pop("fluency_scale_1"), "fluency is in use but fluency_scale_1 is missing"),
    (lambda tensors: tensors.__setitem__("fluency_center_0", tensors["fluency_center_0"][:-1].clone()),
     "tensor 'fluency_center_0' must be 257 float64 values"),
])
def test_forged_fluency_tables_are_refused_by_name(scorer, tmp_path, change, message):
    """The unigram table and the columns' tables as saved, every digest recomputed: one too
    short for the model's vocabulary or its token counts, positive log-probabilities, one
    missing."""
    from forged import forge_tensors

    path = scorer.save(tmp_path / "scorer")
    forge_tensors(path, change)
    with pytest.raises(SavedScorerError, match=message):
        NeighborsScorer.load(path, device="cpu")


def test_auto_without_the_offline_model_means_none_said_once(huse_texts, huse_scores, monkeypatch):
    monkeypatch.setattr(part_module, "_told_missing", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = NeighborsScorer(device="cpu").fit(huse_texts[:TRAIN], huse_scores[:TRAIN])
        NeighborsScorer(device="cpu").fit(huse_texts[:TRAIN], huse_scores[:TRAIN])
    told = [str(w.message) for w in caught if "offline language model is not fetched" in str(w.message)]
    assert len(told) == 1 and first.fluency_ is None and "fluency" not in str(first.signature)


def test_auto_decides_by_leave_one_out_beyond_noise(folder, huse_texts, huse_scores):
    """Scores the model's statistic predicts: fluency joins; HUSE's own scores, which a random
    model knows nothing of: it stays out, of the estimate and of the outlier test alike."""
    texts = huse_texts[:TRAIN]
    statistic = FittedFluency(model_files(folder), torch.float32, torch.device("cpu")).of_texts(texts)[:, 0].numpy()
    ranks = np.argsort(np.argsort(statistic)) / (len(texts) - 1)
    auto = Fluency(folder, dtype="float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        follows = NeighborsScorer(fluency=auto, device="cpu").fit(texts, ranks)
        on = [str(w.message) for w in caught if "fluency left out" in str(w.message)]
        unrelated = NeighborsScorer(fluency=auto, device="cpu").fit(texts, huse_scores[:TRAIN])
    off = [str(w.message) for w in caught if "fluency left out" in str(w.message)]
    assert not on and len(off) == 1 and "no gain beyond the noise" in off[0]  # said where it is left out
    assert follows.stacking_ is not None and ",on(" in str(follows.signature)
    assert unrelated.stacking_ is None and ",off(" in str(unrelated.signature)
    assert len(unrelated.outside_.test.columns) == 7 and unrelated.within_ is None
    unrelated.fluency_.model.remembered.clear()
    unrelated.predict(huse_texts[TRAIN:])
    assert not unrelated.fluency_.model.remembered  # no model runs where fluency is not in use


def test_token_ids_predictions_and_rewards_equal_the_texts(folder, huse_texts, huse_scores):
    tokenizer = HuggingFaceTokenizer(str(folder))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = NeighborsScorer(kernel=Bleu(tokenizer=tokenizer), fluency=Fluency(folder, use="always", dtype="float32"),
                                 device="cpu").fit(huse_texts[:TRAIN], huse_scores[:TRAIN])
    batch = tokenizer.hf(huse_texts[TRAIN:], add_special_tokens=False, padding=True, return_tensors="pt")
    texts = tokenizer.hf.batch_decode(batch["input_ids"], skip_special_tokens=True)
    by_ids = scorer.predict_tensors(batch["input_ids"], attention_mask=batch["attention_mask"])
    by_texts = scorer.predict_tensors(texts)
    np.testing.assert_array_equal(by_ids.scores.numpy(), by_texts.scores.numpy())
    np.testing.assert_array_equal(by_ids.outside.numpy(), by_texts.outside.numpy())
    rows = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
    by_id_reward = reward_function(scorer, token_ids=True)([""] * len(rows), texts, completion_ids=rows)
    assert by_id_reward == reward_function(scorer)([""] * len(rows), texts)
    # the census's list of syncing operations (tests/census.py); the language model's rotary
    # frequencies move to the device they are on at every call, which copies nothing
    audit = Census(scope="ids", same_device_moves=False)
    with audit, audit.host_copies():
        scorer.reward(batch["input_ids"], attention_mask=batch["attention_mask"])
    assert audit.syncs["ids"] == 0, audit.sync_ops
    text_path = Census(scope="texts", same_device_moves=False)
    with text_path, text_path.host_copies():  # the audit does see syncs where there are some
        scorer.reward(texts[:8])
    assert text_path.syncs["texts"] > 0


def test_a_few_texts_keep_the_neighbour_estimate(folder, huse_texts, huse_scores):
    """Fluency always on, but three training texts: too few to fit the stacked model on."""
    scorer = NeighborsScorer(fluency=Fluency(folder, use="always", dtype="float32"), device="cpu").fit(
        huse_texts[:3], huse_scores[:3])
    assert scorer.stacking_ is None and np.isfinite(scorer.predict(huse_texts[3:6]).scores).all()


def test_the_columns_add_up_and_never_flag_alone(scorer, folder):
    """Fluency's two columns (the mean log-probability and SLOR) join Fisher's product, not
    Bonferroni's test, whose five single tests keep their share of the level (saved and loaded
    alike)."""
    assert scorer.outside_.test.alone == (True, False, True, True, True, False, False, False, True)
    assert scorer.outside_.test.single_tests == 5
    assert NeighborsScorer.load(scorer.save(folder.parent / "saved_alone"), device="cpu").outside_.test.alone == \
        scorer.outside_.test.alone


def test_auto_runs_no_model_below_its_fewest_texts(huse_texts, huse_scores, monkeypatch):
    monkeypatch.setattr(part_module, "_told_missing", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer = NeighborsScorer(device="cpu").fit(huse_texts[:100], huse_scores[:100])
    assert scorer.fluency_ is None and not [w for w in caught if "language model" in str(w.message)]


def test_auto_leaves_the_english_model_out_of_another_language_unread(monkeypatch):
    """Text that is not English: MLQE's Estonian source sentences, scored by their translations'
    quality. The offline model reads English; `auto`'s language check leaves it out before it
    is loaded (`fluency/language.py`; tests/fluency/test_fluency_language.py with a tiny model),
    where leave-one-out used to find that out after the model had read every text (160 texts:
    rho 0.298 without, 0.249 with it), and fit says why."""
    from gpu_neighbors.fluency.model import LanguageModel

    assert REAL_FLUENCY_MODEL is not None, "the offline model is not fetched: bash scripts/setup.sh"
    with (SHARED / "data" / "mlqe_et-en_dev.jsonl").open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in itertools.islice(handle, 160)]
    monkeypatch.setattr(LanguageModel, "load", classmethod(lambda cls, *args: pytest.fail("the model was loaded")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer = NeighborsScorer(fluency=Fluency(REAL_FLUENCY_MODEL, use="auto"), device="cpu").fit(
            [row["source"] for row in rows], [row["score"] for row in rows])
    assert scorer.fluency_ is None and scorer.stacking_ is None and "fluency:off(english=0.1" in str(scorer.signature)
    told = [str(w.message) for w in caught if "fluency left out" in str(w.message)]
    assert len(told) == 1 and "reads English" in told[0] and "--fluency PATH" in told[0]


def test_none_at_load_says_the_scorer_needs_its_model(scorer, tmp_path):
    """fluency="none" (--fluency none) at load, where the saved estimate stacks on fluency: it
    said the model was "not here: fetch it", which it was."""
    path = scorer.save(tmp_path / "scorer")
    with pytest.raises(SavedScorerError, match=f"its estimate stacks on fluency model {scorer.fluency_.files.name}, "
                                               "so it cannot run without it"):
        NeighborsScorer.load(path, device="cpu", fluency="none")


def test_a_scorer_whose_fluency_is_off_loads_without_the_model(folder, huse_texts, huse_scores, tmp_path):
    """Where `auto` left fluency out, no model runs, yet loading asked for it: on a machine
    without it (or with --fluency none) the scorer could not be loaded at all. It loads, with
    the same signature, estimates and flags, and saves the same record again."""
    model = shutil.copytree(folder, tmp_path / "model")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HUSE repeats two texts; fluency left out
        off = NeighborsScorer(fluency=Fluency(model, dtype="float32"), device="cpu").fit(
            huse_texts[:TRAIN], huse_scores[:TRAIN])
    assert off.stacking_ is None and off.fluency_ is not None
    path = off.save(tmp_path / "scorer")
    shutil.rmtree(model)
    expected = off.predict(huse_texts[TRAIN:])
    for fluency in (None, "none"):
        loaded = NeighborsScorer.load(path, device="cpu", fluency=fluency)
        assert str(loaded.signature) == str(off.signature)
        predicted = loaded.predict(huse_texts[TRAIN:])
        np.testing.assert_array_equal(predicted.scores, expected.scores)
        np.testing.assert_array_equal(predicted.outside, expected.outside)
        again = loaded.save(tmp_path / f"again_{fluency}")
        assert json.loads((again / "scorer.json").read_text())["fitted"]["fluency"] == \
            json.loads((path / "scorer.json").read_text())["fitted"]["fluency"]


def test_a_dtype_of_another_type_is_refused_by_name():
    """A list where the dtype's name goes: 'unhashable type: list' (TypeError) named nothing."""
    with pytest.raises(ValueError, match="fluency dtype must be one of auto, bfloat16, float32, not \\['float32'\\]"):
        Fluency(dtype=["float32"])


def test_auto_refuses_a_damaged_offline_model_saying_what_to_do(huse_texts, huse_scores, tmp_path, monkeypatch):
    """The fetched file cut short or overwritten: every default fit failed on it with numpy's
    'cannot reshape array ...' (or another reader's note), and nothing said to fetch it again."""
    from gpu_neighbors.fluency.files import OFFLINE_FILE

    monkeypatch.setenv("GPU_NEIGHBORS_HOME", str(tmp_path))
    damaged = tmp_path / "models" / OFFLINE_FILE
    damaged.parent.mkdir()
    damaged.write_bytes(b"GGUF cut short")
    with pytest.raises(ValueError, match=f"^{damaged}: SHA-256 [0-9a-f]{{64}}, not the offline model's [0-9a-f]{{64}}: "
                                         "remove it and run gpu-neighbors fetch-model again$"):
        NeighborsScorer(device="cpu").fit(huse_texts[:TRAIN], huse_scores[:TRAIN])


def test_a_model_path_given_at_load_that_is_no_model_is_named(scorer, tmp_path):
    """fluency=PATH (--fluency PATH) at load with a typo, or a folder that is no model: it said
    the model was 'not here: ... give its path', which the user had just done, naming no path."""
    path = scorer.save(tmp_path / "scorer")
    (tmp_path / "empty").mkdir()
    for given, why in ((tmp_path / "typo.gguf", "no such GGUF file"), (tmp_path / "empty", "a folder needs config.json")):
        with pytest.raises(SavedScorerError, match=f"which is not here \\(fluency model {given}: {why}"):
            NeighborsScorer.load(path, device="cpu", fluency=given)


def test_a_model_given_at_load_that_will_not_run_is_said(folder, huse_texts, huse_scores, tmp_path):
    """fluency=PATH (--fluency PATH) at load of a scorer fitted without fluency did nothing, in
    silence: no model joins a fitted scorer's estimate. It is said, once, with the way to one."""
    path = NeighborsScorer(fluency="none", device="cpu").fit(huse_texts[:40], huse_scores[:40]).save(tmp_path / "plain")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = NeighborsScorer.load(path, device="cpu", fluency=folder)
        NeighborsScorer.load(path, device="cpu", fluency="auto")  # where it was fitted from: nothing to say
    told = [str(w.message) for w in caught if "fluency" in str(w.message)]
    assert loaded.fluency_ is None and len(told) == 1, told
    assert told[0].startswith(f"fluency={str(folder)!r}: this saved scorer was fitted without fluency, so no model "
                              "runs; fit it again with the model to use one")
