"""The scorer's ridge estimator (kernel ridge on the tile pipeline, core/kernel_ridge.py): exact
sums that no tiling changes, leave-one-out equal to refitting the scorer without each text,
protocols equal to the scorer, the default's choice between topk and ridge, large training
sets fitted on a sample, and clear refusals."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_neighbors import Intervals, NeighborsScorer
from gpu_neighbors.estimators import Ridge
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.bertscore import BertScoreKernel
from gpu_neighbors.kernels.bleu import BleuKernel
from gpu_neighbors.core.correlation import spearman_rows

TRAIN = 120


def ridge(texts, scores, penalty=None, **run) -> NeighborsScorer:
    # the model's estimates alone: no text's estimate replaced by the negative evidence
    return NeighborsScorer(kernel="bleu", estimator=Ridge(penalty=penalty), device="cpu",
                           level=Intervals(negatives="none"), **run).fit(texts, scores)


@pytest.fixture(scope="module")
def split(huse_texts, huse_scores):
    texts, scores = list(huse_texts), np.asarray(huse_scores)
    return texts[:TRAIN], scores[:TRAIN], texts[TRAIN:]


def test_estimates_are_the_same_bits_for_every_tiling(split):
    train, scores, candidates = split
    reference = ridge(train, scores).predict(candidates)
    assert reference.estimator == "ridge" and reference.coverage > 0.9
    for chunk_size, budget in ((1, 5_000), (7, 40_000), (33, None)):
        other = ridge(train, scores, chunk_size=chunk_size, memory_budget=budget).predict(candidates)
        np.testing.assert_array_equal(other.scores, reference.scores)
        np.testing.assert_array_equal(other.low, reference.low)
    reordered = ridge(train, scores).predict(candidates[::-1])
    np.testing.assert_array_equal(reordered.scores[::-1], reference.scores)


def test_estimates_are_the_fitted_model_applied_to_the_similarities(split):
    """The exact limb sums equal the model's float arithmetic on the quantised similarities to
    rounding: the reduction computes the model, not something near it."""
    train, scores, candidates = split
    scorer = ridge(train, scores)
    similarities = np.clip(scorer.similarity(candidates).numpy(), -1, 1)
    units = np.round(similarities * 2.0**20) / 2.0**20
    expected = units @ scorer.ridge_.alpha + scorer.ridge_.intercept
    prediction = scorer.predict(candidates)
    defined = prediction.covered
    np.testing.assert_allclose(prediction.scores[defined], expected[defined], rtol=0, atol=1e-12)
    assert np.all(np.isnan(prediction.scores[~defined]))
    np.testing.assert_array_equal(defined, prediction.num_neighbors > 0)


def test_leave_one_out_equals_refitting_without_each_text(split):
    train, scores, _ = split
    texts, truth = train[:40], scores[:40]
    scorer = ridge(texts, truth)
    loo = scorer.leave_one_out()
    for left_out in (0, 7, 23, 39):
        keep = [index for index in range(len(texts)) if index != left_out]
        refit = ridge([texts[index] for index in keep], truth[keep], penalty=scorer.penalty_)
        again = refit.predict([texts[left_out]]).scores[0]
        assert abs(loo.scores[left_out] - again) < 1e-9, left_out


def test_protocols_cut_from_one_pass_equal_the_scorer(split):
    train, scores, candidates = split
    scorer = ridge(train, scores)
    everything = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit(train + candidates,
                                                                       np.zeros(len(train) + len(candidates)))
    pass_ = everything.training_pass()
    pass_.scores[: len(train)] = scores
    test, fitted = np.arange(len(train), len(train) + len(candidates)), np.arange(len(train))
    from_pass = pass_.predict(test, fitted, scorer.thresholds_)
    np.testing.assert_allclose(from_pass.scores, scorer.predict(candidates).scores, rtol=0, atol=1e-12)
    loo = pass_.leave_one_out(fitted, scorer.thresholds_)
    np.testing.assert_allclose(loo.scores, scorer.leave_one_out().scores, rtol=0, atol=1e-12)


def test_the_default_estimator_is_the_kernels(split, monkeypatch):
    """topk for the overlap kernels, ridge for BERTScore; the paper's settings keep the
    threshold rule; a tuned ridge's inner rho is that of its exact leave-one-out."""
    train, scores, _ = split
    assert BertScoreKernel.default_estimator == "ridge" and BleuKernel.default_estimator == "topk"
    assert NeighborsScorer(device="cpu").fit(train, scores).estimator_.name == "topk"
    monkeypatch.setattr(BleuKernel, "default_estimator", "ridge")
    scorer = NeighborsScorer(kernel="bleu", device="cpu", level=Intervals(negatives="none")).fit(train, scores)
    assert scorer.estimator_.name == "ridge"
    loo = scorer.leave_one_out()
    rho = spearman_rows(np.where(loo.covered, loo.scores, np.nan)[None, :], scores)[0]
    assert abs(rho - scorer.tuning_.spearman) < 1e-12
    assert NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit(train,
                           scores).estimator_.name == "threshold"


def test_a_large_training_set_is_fitted_on_a_sample(split, monkeypatch):
    """Above MAX_TUNING_TEXTS the model is fitted on a seeded sample: the other texts' weights
    are zero, so their estimates are held out, and they calibrate the intervals."""
    monkeypatch.setattr("gpu_neighbors.scorer.MAX_TUNING_TEXTS", 60)
    train, scores, _ = split
    with pytest.warns(UserWarning, match="random sample of 60"):
        scorer = ridge(train, scores)
    sample = scorer._ridge.sample
    assert sample is not None and sample.size == 60
    outside = np.setdiff1d(np.arange(TRAIN), sample)
    assert np.all(scorer.ridge_.alpha[outside] == 0) and np.any(scorer.ridge_.alpha[sample] != 0)
    loo = scorer.leave_one_out()
    held_out = scorer.predict([train[index] for index in outside])
    np.testing.assert_array_equal(loo.scores[outside], held_out.scores)
    assert scorer.calibration_.size > 0


def test_above_max_ridge_texts_the_model_is_fitted_on_a_sample(split, monkeypatch):
    """The cubic solve runs on MAX_RIDGE_TEXTS texts: the others' weights are zero and their
    leave-one-out estimates are the model's own (it never saw them); protocols do the same."""
    monkeypatch.setattr("gpu_neighbors.core.kernel_ridge.MAX_RIDGE_TEXTS", 50)
    train, scores, candidates = split
    scorer = ridge(train, scores)
    fitted = np.flatnonzero(scorer.ridge_.alpha)
    assert fitted.size == 50
    outside = np.setdiff1d(np.arange(TRAIN), fitted)
    loo = scorer.leave_one_out()
    held_out = scorer.predict([train[index] for index in outside])
    np.testing.assert_allclose(loo.scores[outside], held_out.scores, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(scorer.training_pass().leave_one_out(np.arange(TRAIN), scorer.thresholds_).scores,
                                  loo.scores)


def test_a_subsample_sums_its_own_terms_scaled_up(split):
    """Subsampled rewards: only the drawn training texts' terms, times |S| / |subset| (unbiased
    over random subsets); the whole set gives predict's estimates."""
    train, scores, candidates = split
    scorer = ridge(train, scores)
    device = scorer.device_
    whole = scorer.predict_tensors(candidates, scorer.draw_subset(1.0, 0, device))
    np.testing.assert_array_equal(whole.scores.cpu().numpy(), scorer.predict(candidates).scores)
    subset = scorer.draw_subset(0.5, 3, device)
    part = scorer.predict_tensors(candidates, subset).numpy()
    units = np.round(np.clip(scorer.similarity(candidates).numpy(), -1, 1) * 2.0**20) / 2.0**20
    kept = subset.mask.cpu().numpy()
    expected = units[:, kept] @ scorer.ridge_.alpha[kept] * (TRAIN / subset.size) + scorer.ridge_.intercept
    defined = part.covered
    np.testing.assert_allclose(part.scores[defined], expected[defined], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(part.num_neighbors, (units[:, kept] > 0).sum(axis=1))


def test_refusals_name_the_problem(split):
    train, scores, _ = split
    scorer = ridge(train, scores)
    with pytest.raises(ValueError, match="penalty must be"):
        ridge(train, scores, penalty=0.0)
    with pytest.raises(ValueError, match=r"^estimator must be topk or threshold for 1 training text \(kernel ridge fits on at least 2\), not .ridge."):
        ridge(train[:1], scores[:1])
    assert "estimator:ridge|penalty:" in str(scorer.signature)
