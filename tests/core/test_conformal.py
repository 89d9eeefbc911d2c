"""Conformal intervals (core/conformal.py): coverage on data with a known distribution, and the
leave-one-out they are calibrated on equal to the scorer's own leave-one-out.

Tolerances follow from the binomial spread: with N independent draws, each covered with
probability p, the empirical coverage has standard deviation sqrt(p (1 - p) / N); the checks
allow 4 of them (a seeded run fails by chance with probability below 1e-4)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpu_neighbors import Intervals, NeighborsScorer
from gpu_neighbors.estimators import Threshold, TopK
from gpu_neighbors.core.conformal import (
    MAX_CALIBRATION_TEXTS,
    MIN_SELECTION_TEXTS,
    Calibration,
    WithoutOwn,
    calibration_sample,
)
from gpu_neighbors.core.tiling import MatrixReduction, Tile


def draw(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Heteroscedastic data: truth = estimate + spread * noise, spread known per text."""
    estimate = rng.uniform(0, 1, shape)
    spread = rng.uniform(0.1, 0.5, size=shape)
    return estimate, spread, estimate + spread * rng.standard_t(5, size=shape)


def binomial_tolerance(p: float, n: int) -> float:
    return 4 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("m, level", [(19, 0.9), (9, 0.75), (199, 0.9), (301, 0.8)])
def test_marginal_coverage_is_the_finite_sample_rank(m, level):
    """With m exchangeable calibration residuals and one new text (continuous residuals), the
    new one is covered with probability exactly ceil((m + 1) level) / (m + 1): checked over
    20,000 independent calibration sets. A plain quantile of the residuals would cover less
    (0.86 at m = 19); so would choosing the floor on the residuals that calibrate (0.87)."""
    rng = np.random.default_rng(m)
    trials = 20_000
    estimate, spread, truth = draw(rng, (trials, m + 1))
    covered = np.zeros(trials, dtype=bool)
    for trial in range(trials):
        calibration = Calibration.fit(estimate[trial, :m], spread[trial, :m], truth[trial, :m])
        low, high = calibration.interval(estimate[trial, m:], spread[trial, m:], level)
        covered[trial] = low[0] <= truth[trial, m] <= high[0]
    used = calibration.size  # all m, or the half that calibrates when the other chose the floor
    assert used == (m if m < MIN_SELECTION_TEXTS else m - m // 2)
    expected = math.ceil((used + 1) * level) / (used + 1)
    assert abs(covered.mean() - expected) <= binomial_tolerance(expected, trials)


def test_widths_adapt_to_the_spread_and_beat_a_constant_width():
    """Scaled by the spread, the intervals cover at the level overall (tolerance: the binomial
    spread of the test texts plus that of the 1,000 calibration residuals, whose quantile fixes
    the conditional coverage) and are narrower on average than one constant width calibrated on
    the same residuals, which covers easy texts almost always and hard ones too rarely: the
    scaled ones move coverage from the easy texts to the hard ones."""
    rng = np.random.default_rng(1)
    estimate, spread, truth = draw(rng, (2_000,))
    calibration = Calibration.fit(estimate, spread, truth)
    new_estimate, new_spread, new_truth = draw(rng, (20_000,))
    low, high = calibration.interval(new_estimate, new_spread, 0.9)
    covered = (low <= new_truth) & (new_truth <= high)
    assert abs(covered.mean() - 0.9) <= 4 * math.sqrt(0.09 / 20_000 + 0.09 / calibration.size)
    constant = Calibration.fit(estimate, np.zeros_like(spread), truth)
    low_c, high_c = constant.interval(new_estimate, np.zeros_like(new_spread), 0.9)
    covered_c = (low_c <= new_truth) & (new_truth <= high_c)
    hard, easy = new_spread > 0.45, new_spread < 0.15
    assert covered_c[hard].mean() < 0.8 and covered_c[easy].mean() > 0.97
    assert covered[hard].mean() > covered_c[hard].mean() + 0.05 and covered[easy].mean() < covered_c[easy].mean()
    assert abs(covered_c.mean() - covered.mean()) < 0.01 and np.mean(high - low) < np.mean(high_c - low_c)


def test_no_estimate_no_interval_and_clipping_keeps_the_truth():
    calibration = Calibration.fit(np.array([0.5, 0.5, np.nan]), np.array([0.1, 0.1, np.nan]), np.array([0.4, 0.7, 0.2]))
    assert calibration.size == 2
    low, high = calibration.interval(np.array([np.nan, 0.95]), np.array([np.nan, 0.1]), 0.5, bounds=(0.0, 1.0))
    assert np.isnan(low[0]) and np.isnan(high[0])
    assert high[1] == 1.0 and low[1] < 0.95
    # too few residuals for the level: the interval is the whole score range, not a false promise
    low, high = calibration.interval(np.array([0.5]), np.array([0.1]), 0.9, bounds=(0.0, 1.0))
    assert (low[0], high[0]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="level"):
        calibration.quantile(1.0)


def test_without_own_masks_each_rows_own_training_text():
    values = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    inner = MatrixReduction(3, 4)
    masked = WithoutOwn(inner, torch.tensor([2, 0, 3]))
    masked.add(Tile(values[:, :2], 0, 0))
    masked.add(Tile(values[:, 2:], 0, 2))
    expected = values.clone()
    expected[0, 2] = expected[1, 0] = expected[2, 3] = -torch.inf
    assert torch.equal(masked.result(), expected)


@pytest.mark.parametrize("settings", [
    {"kernel": "bleu", "estimator": Threshold.paper()},
    {"estimator": TopK(k=7)},
    {"kernel": "bleu", "estimator": Threshold(tau=0.05, weighting="similarity", power=2.0)},
])
def test_the_calibration_pass_is_the_scorers_leave_one_out(huse_texts, huse_scores, settings):
    """The sampled leave-one-out (each row masked by its own index, texts encoded as candidates)
    equals `leave_one_out` (the training set against itself, diagonal masked), bit for bit."""
    texts, scores = huse_texts[:80], huse_scores[:80]
    # negatives="none": leave_one_out judges its texts, and the negative evidence would move some
    scorer = NeighborsScorer(device="cpu", level=Intervals(negatives="none"), **settings).fit(texts, scores)
    own = torch.arange(len(texts))
    sampled = scorer._pass(lambda first, last: scorer.kernel_.encode(texts[first:last]), len(texts), own=own)[0].numpy()
    loo = scorer.leave_one_out()
    np.testing.assert_array_equal(sampled.scores, loo.scores)
    np.testing.assert_array_equal(sampled.std, loo.std)
    expected = Calibration.fit(loo.scores, loo.std, np.asarray(scores))
    np.testing.assert_array_equal(scorer.calibration_.residuals, expected.residuals)


def test_predict_gives_intervals_around_defined_estimates(huse_texts, huse_scores):
    scorer = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu").fit(huse_texts[:150],
                             huse_scores[:150])
    prediction = scorer.predict(huse_texts[150:] + ["zzz qqq"])
    defined = np.isfinite(prediction.scores)
    assert prediction.low.dtype == np.float64 and not defined[-1]
    assert np.array_equal(np.isnan(prediction.low), ~defined) and np.array_equal(np.isnan(prediction.high), ~defined)
    assert np.all(prediction.low[defined] <= prediction.scores[defined])
    assert np.all(prediction.scores[defined] <= prediction.high[defined])
    assert np.all((0 <= prediction.low[defined]) & (prediction.high[defined] <= 1))
    narrow = NeighborsScorer(kernel="bleu", estimator=Threshold.paper(), device="cpu",
                             level=0.5).fit(huse_texts[:150], huse_scores[:150])
    narrower = narrow.predict(huse_texts[150:])
    kept = defined[:-1]
    assert np.all((narrower.high - narrower.low)[kept] <= (prediction.high - prediction.low)[:-1][kept])
    assert np.array_equal(narrower.scores, prediction.scores[:-1], equal_nan=True)


def test_calibration_sample_is_all_texts_or_a_seeded_sample_of_the_same_texts_in_any_order():
    order = np.random.default_rng(3).permutation(10)
    assert np.array_equal(calibration_sample(order), np.arange(10))
    count = MAX_CALIBRATION_TEXTS * 3
    canonical = np.random.default_rng(4).permutation(count)  # the texts' places in the canonical order
    big = calibration_sample(canonical)
    assert big.size == MAX_CALIBRATION_TEXTS and np.all(np.diff(big) > 0)
    assert np.array_equal(big, calibration_sample(canonical))
    moved = np.random.default_rng(5).permutation(count)  # the same texts given in another order
    where = np.empty(count, dtype=np.int64)
    where[moved] = np.arange(count)  # text at old position p now sits at where[p]
    assert np.array_equal(np.sort(where[big]), calibration_sample(where[canonical]))
