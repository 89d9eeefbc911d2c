"""Nested leave-one-out of the top-k estimator from one ranking (`core/nested.py`): the same
choices and estimates, bit for bit, as tuning each left-out text's training set on its own."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_neighbors.core import nested
from gpu_neighbors.core.correlation import _ranks, _ranks_of_one, spearman_rows
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds
from gpu_neighbors.core.tuning import TuningGrid, tune
from gpu_neighbors.evaluation.protocols import cross_validate

BASE = Thresholds(0.1, 5, 0.66, 1.0, "topk", 5)


def fold_by_fold(similarities: PairwiseSimilarities, grid: TuningGrid, min_coverage: float):
    """What cross_validate did for every left-out text: tune on the others, then predict it."""
    everything = np.arange(len(similarities))
    tunings, predictions = [], []
    for fold in everything:
        train = np.delete(everything, fold)
        tuning = tune(similarities, train, grid=grid, min_coverage=min_coverage, default_tau=BASE.tau,
                      estimator="topk", base=BASE)
        tunings.append(tuning)
        predictions.append(similarities.predict(np.array([fold]), train, tuning.thresholds))
    return tunings, predictions


def data(seed: int, size: int, scores: np.ndarray | None = None) -> PairwiseSimilarities:
    """Similarities full of ties (eighths), some negative, and scores over several magnitude bands."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(size, 4))
    matrix = np.round(np.clip(points @ points.T / 4, -0.25, 1) * 8) / 8
    if scores is None:
        scores = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, 0.3, 0.01, 0.9, 1e-4, 3e-4], size=size)
    return PairwiseSimilarities(matrix, scores, rng.integers(0, 2**31, size=size))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_same_choices_and_estimates_as_tuning_each_fold(seed):
    similarities = data(seed, 26)
    grid = TuningGrid(powers=(0.0, 1.0, 2.5), top_ks=(1, 2, 3, 5, 10, 20, 1000))
    tunings, predictions = fold_by_fold(similarities, grid, 0.5)
    result = nested.nested_topk(similarities, BASE, grid, 0.5)
    assert result.tunings == tunings  # the choice, its inner rho and coverage: every bit
    for field in ("scores", "num_neighbors", "std", "covered"):
        expected = np.concatenate([getattr(prediction, field) for prediction in predictions])
        assert np.array_equal(getattr(result.prediction, field), expected, equal_nan=True), field


def test_folds_that_move_an_encoding_are_tuned_alone_and_still_agree():
    # 1e-4 alone in its magnitude band, and 0.9 the only largest score: leaving either out
    # encodes the others otherwise, so those folds take the slow path; the rest share the ranking.
    scores = np.array([0.5, 0.25, 0.75, 0.5, 0.9, 1e-4, 0.3, 0.25, 0.75, 0.5, 0.3, 0.6] * 2)
    scores[4], scores[5] = 0.95, 0.2  # one largest and one extreme below in the second copy
    similarities = data(7, scores.size, scores)
    alike = nested._encoded_alike(similarities.scores, similarities.quality(np.arange(scores.size)))
    assert 0 < (~alike).sum() < scores.size  # both paths are taken
    grid = TuningGrid(powers=(0.0, 1.0), top_ks=(1, 3, 10))
    tunings, _ = fold_by_fold(similarities, grid, 0.8)
    assert nested.nested_topk(similarities, BASE, grid, 0.8).tunings == tunings


def test_cross_validate_takes_it_for_tuned_leave_one_out():
    similarities = data(3, 30)
    grid = TuningGrid(powers=(1.0, 2.0), top_ks=(1, 5, 10))
    tunings, predictions = fold_by_fold(similarities, grid, 0.5)
    steps = []
    result = cross_validate(similarities, BASE, folds=None, tune_thresholds=True, min_coverage=0.5, grid=grid,
                            resamples=0, progress=steps.append)
    assert [fold.tuning for fold in result.folds] == tunings
    assert np.array_equal(result.prediction.scores, np.concatenate([p.scores for p in predictions]), equal_nan=True)
    assert sum(steps) == pytest.approx(30)  # every fold reported done


def test_fewer_than_four_texts_are_refused_as_tune_refuses_them():
    similarities = PairwiseSimilarities(np.eye(3), [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="at least 3 training items"):
        nested.nested_topk(similarities, BASE, TuningGrid(), 0.5)


def test_ranks_of_one_vector_against_many_masks_are_the_average_ranks():
    rng = np.random.default_rng(5)
    for trial in range(100):
        size, rows = int(rng.integers(1, 30)), int(rng.integers(1, 5))
        truth = rng.choice([0.0, 0.5, 1.0, 2.0, np.nan], size) if trial % 2 else rng.random(size)
        estimates = rng.choice([0.0, 1.0, 2.0, np.nan], (rows, size))
        valid = np.isfinite(estimates) & np.isfinite(truth)
        expected = _ranks(np.broadcast_to(truth, estimates.shape), valid)
        assert np.array_equal(np.where(valid, _ranks_of_one(truth, valid), 0), np.where(valid, expected, 0))
        assert spearman_rows(estimates, truth).shape == (rows,)


@pytest.mark.parametrize("block", [1, 7, 1 << 16])
def test_row_orders_is_lexsort_by_value_then_rank(block, monkeypatch):
    """`row_orders` (two unstable sorts, a block of rows at a time) orders every row as numpy's
    stable lexsort by descending value, then ascending rank: ties, signed zeros, infinities and
    NaN (equal to NaN) included, and ranks that are any distinct integers."""
    from gpu_neighbors.core import pairwise

    monkeypatch.setattr(pairwise, "ORDER_BLOCK", block)
    rng = np.random.default_rng(3)
    for trial in range(200):
        rows, columns = int(rng.integers(1, 25)), int(rng.integers(0, 25))
        if trial % 2:
            matrix = rng.choice([0.0, -0.0, 0.25, 1.0, -1.0, np.nan, np.inf, -np.inf], (rows, columns))
        else:
            matrix = rng.random((rows, columns))
        ranks = rng.permutation(columns) * 7 - 20
        expected = np.lexsort((np.broadcast_to(ranks, matrix.shape), -matrix), axis=1)
        assert np.array_equal(pairwise.row_orders(matrix, ranks), expected)


@pytest.mark.parametrize("seed", [0, 4])
def test_top_read_off_one_ordering_is_the_selection_of_each_subset(seed, monkeypatch):
    """`PairwiseSimilarities.top` reads subsets off one ordering of every row (and `subset`
    carries it over): each k's first k are the set `rank_segments` selects, so every estimate
    is the same bits."""
    from gpu_neighbors.core import pairwise

    similarities = data(seed, 40)
    rng = np.random.default_rng(seed)
    ks = [1, 2, 5, 13, 40]
    for rows, columns in [(np.arange(40), np.arange(40)), (np.sort(rng.choice(40, 15, replace=False)),
                                                          np.sort(rng.choice(40, 30, replace=False)))]:
        ordered = similarities.subset(np.arange(40)).top(rows, columns, ks)
        monkeypatch.setattr(pairwise, "MAX_ORDERED", 0)
        selected = similarities.top(rows, columns, ks)
        monkeypatch.undo()
        assert ordered.index.shape == selected.index.shape
        for k in ks:
            first = min(k, ordered.index.shape[1])
            for row in range(rows.size):
                assert set(ordered.index[row, :first].tolist()) == set(selected.index[row, :first].tolist())
        for power in (0.0, 1.5):
            ours = similarities.estimate_top(ordered, columns, ks, power)
            theirs = similarities.estimate_top(selected, columns, ks, power)
            for a, b in zip(ours, theirs):
                assert np.array_equal(a.scores, b.scores, equal_nan=True) and np.array_equal(a.std, b.std,
                                                                                              equal_nan=True)
