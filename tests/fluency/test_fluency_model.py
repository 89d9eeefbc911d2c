"""The fluency statistics of a causal LM (a tiny random Llama built here; the real offline model
where it was fetched): the same numbers in any batch order and size, by text and by token ids,
NaN for a text without a token, SLOR against the model's own unigram table, the start token, the
model's files named by their digest."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from conftest import ADVERSARIAL_TEXTS, REAL_FLUENCY_MODEL
from fluency_model import tiny_model
from gpu_neighbors.fluency import FittedFluency, model_files
from gpu_neighbors.fluency import model as model_module
from gpu_neighbors.fluency.files import OFFLINE_SHA256, file_digest
from gpu_neighbors.fluency.model import LanguageModel, start_token
from gpu_neighbors.fluency.part import ROUNDING


@pytest.fixture(scope="module")
def folder(tmp_path_factory, huse_texts):
    return tiny_model(tmp_path_factory.mktemp("tiny"), huse_texts)


def fresh(folder, dtype=torch.float32, calibration: list[str] | None = None) -> FittedFluency:
    """The model with nothing remembered: each call computes again; its unigram table learned
    from `calibration` where given."""
    fluency = FittedFluency(model_files(folder), dtype, torch.device("cpu"))
    fluency.model.remembered.clear()
    fluency.model.masses.clear()
    if calibration is not None:
        fluency.calibrate(calibration)
        fluency.model.remembered.clear()
    return fluency


def test_batch_order_and_size_change_nothing(folder, huse_texts, monkeypatch):
    texts = huse_texts[:60] + ADVERSARIAL_TEXTS
    calibration = huse_texts[60:160]
    first = fresh(folder, calibration=calibration)
    reference, table = first.of_texts(texts).numpy(), first.unigram
    order = np.random.default_rng(0).permutation(len(texts))
    for rows in (1, 3, 32):
        monkeypatch.setattr(model_module, "BATCH_ROWS", rows)
        fluency = fresh(folder, calibration=[calibration[index] for index in np.random.default_rng(rows).permutation(100)])
        assert torch.equal(fluency.unigram, table)
        shuffled = fluency.of_texts([texts[index] for index in order]).numpy()
        np.testing.assert_array_equal(shuffled, reference[order])
        fluency.model.remembered.clear()
        pieces = np.vstack([fluency.of_texts(texts[first : first + 7]).numpy() for first in range(0, len(texts), 7)])
        np.testing.assert_array_equal(pieces, reference)


def test_statistics_are_the_rounded_mean_log_probability_and_slor(folder, huse_texts):
    """Against a plain forward pass of each text alone, in float64: the mean log-probability of
    its tokens, and SLOR against the table of the model's distributions averaged over the
    calibration texts' positions (with one uniform pseudo-position)."""
    calibration = huse_texts[100:140]
    fluency = fresh(folder, calibration=calibration)
    before = fresh(folder).of_texts(huse_texts[:3]).numpy()
    values = fluency.of_texts(huse_texts[:20] + ["", "   "]).numpy()
    assert np.isnan(values[-2:, :2]).all() and (values[-2:, 2] == 0).all()
    assert np.isnan(before[:, 1]).all() and np.array_equal(before[:, [0, 2]], values[:3, [0, 2]])  # no table yet: no SLOR
    assert np.array_equal(values[:-2] * ROUNDING, np.round(values[:-2] * ROUNDING))
    lm = fluency.model

    def distributions(row: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return lm.model(torch.tensor([row])).logits.double().log_softmax(-1)[0, :-1]

    calibration_rows = {tuple(row) for row in lm.tokenize(calibration)}
    mass = sum(distributions(list(row)).exp().sum(0) for row in calibration_rows)
    positions = sum(len(row) - 1 for row in calibration_rows)
    table = torch.log((mass + 1 / mass.numel()) / (positions + 1))
    assert (fluency.unigram - table).abs().max() <= 0.5 / ROUNDING + 1e-9
    for row, (mean, slor, count) in zip(lm.tokenize(huse_texts[:3]), values[:3]):
        logs = distributions(row)
        exact = logs.gather(-1, torch.tensor(row[1:])[:, None]).sum().item() / (len(row) - 1)
        assert count == len(row) - 1 and abs(mean - exact) <= 1 / ROUNDING
        assert abs(slor - (exact - table[row[1:]].mean().item())) <= 2 / ROUNDING


def test_the_same_calibration_texts_are_read_once(folder, huse_texts, monkeypatch):
    """A second scorer calibrated on the same texts, in any order (`compare` fits one a kernel),
    reuses their summed distributions: the same table, no model pass."""
    first = fresh(folder)
    first.calibrate(huse_texts[:50])
    monkeypatch.setattr(LanguageModel, "sequence_log_probs", lambda *args: pytest.fail("the model ran again"))
    second = FittedFluency(model_files(folder), torch.float32, torch.device("cpu"))  # the same model, loaded once
    statistics = second.calibrate(list(reversed(huse_texts[:50])))
    assert torch.equal(second.unigram, first.unigram) and torch.isfinite(statistics[:, 1]).all()


def test_token_ids_give_the_texts_statistics(folder, huse_texts):
    fluency = fresh(folder, calibration=huse_texts[100:140])
    texts = huse_texts[:40]
    tokenizer = fluency.model.tokenizer
    batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    by_ids = fluency.of_ids(batch["input_ids"], batch["attention_mask"]).numpy()
    assert np.isfinite(by_ids).all()
    fluency.model.remembered.clear()
    np.testing.assert_array_equal(by_ids, fluency.of_texts(texts).numpy())
    assert fluency.shares_tokenizer(tokenizer)


def test_texts_start_after_endoftext(folder):
    tokenizer = fresh(folder).model.tokenizer
    assert start_token(tokenizer) == tokenizer.get_vocab()["<|endoftext|>"]
    assert all(row[0] == start_token(tokenizer) for row in fresh(folder).model.tokenize(["a b", ""]))


def test_weights_are_named_by_their_digest(tmp_path, huse_texts):
    one, other = tiny_model(tmp_path / "one", huse_texts, seed=0), tiny_model(tmp_path / "two", huse_texts, seed=1)
    assert model_files(one).sha256 == model_files(one).sha256 != model_files(other).sha256
    with pytest.raises(ValueError, match="no such GGUF file"):
        model_files(tmp_path / "absent")


@pytest.mark.skipif(REAL_FLUENCY_MODEL is None, reason="the offline model is not fetched (gpu-neighbors fetch-model)")
def test_the_offline_model_judges_english():
    """The real GGUF file (converted once a machine into the models folder, then read back):
    a sentence is likelier than its words reversed or its letters swapped."""
    assert file_digest(REAL_FLUENCY_MODEL) == OFFLINE_SHA256
    fluency = FittedFluency(model_files(REAL_FLUENCY_MODEL), torch.float32, torch.device("cpu"))
    assert fluency.model.start_id == 0  # <|endoftext|>, not the chat token the file declares as BOS
    good = "The committee approved the new budget after a long debate."
    bad = [" ".join(reversed(good.split())), "Teh comimttee apporved teh new bugdet aftre a lnog debaet."]
    values = fluency.of_texts([good, *bad]).numpy()[:, 0]
    assert values[0] > max(values[1:]) + 1.0, values
    assert list(itertools.chain(values)) == list(fluency.of_texts([good, *bad]).numpy()[:, 0])
