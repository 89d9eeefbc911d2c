"""Threshold tuning: the choice by hand, against an exhaustive search written out with scipy,
inside scorer.fit, and nested so that the test items never influence it."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from scipy import stats

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.evaluation.protocols import cross_validate
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds
from gpu_neighbors.core.tuning import TuningGrid, between_similarities, tune

# Clusters {0, 1, 2} and {3, 4, 5}: 0.5 within, 0.2 across. tau = 0.3 keeps the cluster mates
# (rho = 1 - 6 * 16 / 210 = 0.543: the order holds across clusters and flips within them);
# tau = 0.1 makes everything a neighbour (each estimate is the mean of the rest: rho = -1);
# tau = 0.6 leaves no neighbours (coverage 0).
Q = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])


def clusters() -> PairwiseSimilarities:
    matrix = np.full((6, 6), 0.2)
    matrix[:3, :3] = matrix[3:, 3:] = 0.5
    np.fill_diagonal(matrix, 1.0)
    return PairwiseSimilarities(matrix, Q)


HAND_GRID = TuningGrid(taus=(0.1, 0.3, 0.6), min_neighbors=(1, 2, 3), max_fractions=(0.2, 0.5, 1.0))


def test_choice_by_hand():
    result = tune(clusters(), grid=HAND_GRID, min_coverage=0.8)
    # tau 0.3 with a in {1, 2} and b in {0.5, 1} all give the same mask; the loosest wins. The
    # tuned tau is the midpoint of the similarities around 0.3 (0.2 and 0.5): the same pairs.
    assert result.thresholds == Thresholds(0.35, 1, 1.0)
    assert result.spearman == pytest.approx(1 - 6 * 16 / 210)
    assert result.coverage == 1.0 and result.feasible and result.settings_tried == 27


def test_no_feasible_setting_takes_the_widest_coverage():
    result = tune(clusters(), grid=TuningGrid(taus=(0.6, 0.3), min_neighbors=(3,), max_fractions=(1.0,)))
    assert not result.feasible  # a = 3 > two neighbours everywhere: coverage 0
    assert result.coverage == 0.0


def exhaustive(matrix, scores, grid_taus, a_values, b_values, min_coverage):
    """Every grid point scored by a plain leave-one-out loop and scipy; same rule and tie order."""
    n = len(scores)
    table = []
    for tau, a, b in itertools.product(sorted(grid_taus), sorted(a_values), sorted(b_values, reverse=True)):
        estimates = np.full(n, np.nan)
        for i in range(n):
            neighbours = [j for j in range(n) if j != i and matrix[i, j] >= tau]
            if a <= len(neighbours) <= b * (n - 1):
                estimates[i] = np.mean(scores[neighbours])
        covered = np.isfinite(estimates)
        rho = np.nan
        if covered.sum() >= 2 and np.ptp(estimates[covered]) > 0:
            rho = stats.spearmanr(estimates[covered], scores[covered]).statistic
        table.append(((tau, a, b), rho, covered.mean()))
    feasible = [row for row in table if row[2] >= min_coverage and np.isfinite(row[1])]
    best = max(feasible, key=lambda row: (row[1], row[2])) if feasible else None
    # max() keeps the first of equal keys: grid order breaks ties, as in tune()
    return best


def test_tune_equals_an_exhaustive_search_on_real_text(huse_texts, huse_scores):
    texts, scores = huse_texts[:30], np.asarray(huse_scores[:30])
    sims = NeighborsScorer(kernel="bleu", device="cpu").fit_pairwise(texts, scores)
    matrix = sims.matrix.numpy()
    grid = TuningGrid(taus=(0.02, 0.06, 0.1, 0.14), min_neighbors=(1, 2, 4), max_fractions=(0.3, 0.6, 1.0))
    choices = set()
    for min_coverage in (0.3, 0.6, 0.9):
        result = tune(sims, grid=grid, min_coverage=min_coverage)
        best = exhaustive(matrix, scores, grid.taus, grid.min_neighbors, grid.max_fractions, min_coverage)
        tau, a, b = best[0]
        off_diagonal = matrix[~np.eye(len(texts), dtype=bool)]
        moved = float(between_similarities(np.array([tau]), off_diagonal)[0])  # the same pairs
        assert (result.thresholds.tau, result.thresholds.min_neighbors, result.thresholds.max_fraction) == (moved, a, b)
        assert result.spearman == pytest.approx(best[1], abs=1e-12)
        assert result.coverage == best[2] >= min_coverage
        choices.add(result.thresholds)
    assert len(choices) == 3  # the coverage floor changed the choice each time


def test_data_driven_tau_grid_uses_only_the_training_items():
    sims = clusters()
    taus = TuningGrid().tau_values(sims.off_diagonal(np.arange(3)), default_tau=0.08)
    # items 0-2 are 0.5-similar among themselves (0.2 across clusters is not seen): every
    # quantile is 0.5, moved below it to 0.25 (every pair a neighbour), as 0.08 is
    assert set(taus) <= {0.25, 0.08}


def test_fit_with_tune_predicts_with_the_chosen_thresholds(huse_texts, huse_scores):
    texts, scores = huse_texts[:40], huse_scores[:40]
    tuned = NeighborsScorer(kernel="bleu", estimator="threshold", device="cpu").fit(texts, scores, tune=True,
                            min_coverage=0.5)
    chosen = tuned.tuning_.thresholds
    assert (tuned.tau_, tuned.min_neighbors_, tuned.max_fraction_) == (chosen.tau, chosen.min_neighbors, chosen.max_fraction)
    assert tuned.estimator == Threshold()  # the part as given: untouched
    assert tuned.tuning_.coverage >= 0.5
    fixed = NeighborsScorer(kernel="bleu",
                            estimator=Threshold(tau=chosen.tau, min_neighbors=chosen.min_neighbors,
                            max_fraction=chosen.max_fraction), device="cpu").fit(texts, scores)
    candidates = huse_texts[40:60]
    np.testing.assert_array_equal(tuned.predict(candidates).scores, fixed.predict(candidates).scores)
    np.testing.assert_array_equal(tuned.leave_one_out().scores, fixed.leave_one_out().scores)
    assert f"a:{chosen.min_neighbors}|" in str(tuned.signature)
    refit = tuned.fit(texts, scores, tune=False)  # without tune: back to the paper's thresholds
    assert (refit.tau_, refit.min_neighbors_, refit.max_fraction_, refit.tuning_) == (0.08, 5, 0.66, None)


def test_nested_tuning_never_sees_the_test_items(huse_texts, huse_scores):
    texts, scores = huse_texts[:24], np.asarray(huse_scores[:24])
    sims = NeighborsScorer(kernel="bleu", device="cpu").fit_pairwise(texts, scores)
    thresholds = Thresholds(0.08, 5, 0.66)
    result = cross_validate(sims, thresholds, folds=4, seed=3, tune_thresholds=True, min_coverage=0.5, resamples=0)
    for fold in result.folds:
        # Scramble everything known about the test items: their scores and their similarities.
        scrambled_scores = scores.copy()
        scrambled_scores[fold.test] = 1.0 - scrambled_scores[fold.test]
        matrix = sims.matrix.numpy().copy()
        matrix[fold.test, :] = matrix[:, fold.test] = 0.99
        scrambled = cross_validate(PairwiseSimilarities(matrix, scrambled_scores), thresholds, folds=4, seed=3,
                                   tune_thresholds=True, min_coverage=0.5, resamples=0)
        same = next(other for other in scrambled.folds if np.array_equal(other.test, fold.test))
        assert same.thresholds == fold.thresholds
        # and the fold equals a scorer tuned by fit() on the training fold alone
        train = np.setdiff1d(np.arange(24), fold.test)
        refit = NeighborsScorer(kernel="bleu", estimator="threshold", device="cpu").fit(
            [texts[i] for i in train], scores[train], tune=True, min_coverage=0.5)
        assert refit.thresholds_ == fold.thresholds
        direct = refit.predict([texts[i] for i in fold.test])
        np.testing.assert_array_equal(result.prediction.scores[fold.test], direct.scores)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="min_coverage"):
        tune(clusters(), min_coverage=1.5)
    with pytest.raises(ValueError, match="at least 3"):
        tune(clusters(), np.array([0, 1]))
    with pytest.raises(ValueError, match="grid"):
        tune(clusters(), grid=TuningGrid(min_neighbors=(0,)))


def test_tuning_that_finds_no_agreement_says_so(huse_texts, huse_scores):
    """Scores shuffled away from their texts (and constant ones): the best tuned setting's
    leave-one-out rho is not above 0 (-0.10; undefined), and fit warns that the estimates say
    nothing; the real scores (rho 0.26) do not warn."""
    texts, scores = huse_texts[:100], np.asarray(huse_scores[:100])
    for unrelated in (np.random.default_rng(0).permutation(scores), np.full(100, 0.5)):
        with pytest.warns(UserWarning, match=r"tuning found no setting .* \(best Spearman rho (-?\d\.\d\d|nan)\)"):
            fitted = NeighborsScorer(device="cpu").fit(texts, unrelated, tune=True)
        assert not fitted.tuning_.spearman > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        real = NeighborsScorer(device="cpu").fit(texts, scores, tune=True)
    assert real.tuning_.spearman > 0
    assert not [warning for warning in caught if "tuning found no setting" in str(warning.message)]
