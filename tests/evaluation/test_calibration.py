"""The calibration plot's figures (evaluation/calibration.py) against an independent route:
scorers fitted on each fold's training side, whose `predict` gives the intervals (calibrated by
their own tile-loop leave-one-out)."""
from __future__ import annotations

import numpy as np

from gpu_neighbors import Intervals, NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.evaluation.calibration import calibration_curve
from gpu_neighbors.evaluation.protocols import fold_indices


def test_coverage_equals_refitted_scorers(huse_texts, huse_scores):
    texts, scores = huse_texts[:120], np.asarray(huse_scores[:120])
    settings = {"kernel": "bleu", "estimator": Threshold.paper(), "device": "cpu"}
    sims = NeighborsScorer(**settings).fit_pairwise(texts, scores)
    points = calibration_curve(sims, NeighborsScorer(**settings).fit(texts, scores).thresholds_, folds=3,
                               levels=(0.6, 0.9))
    for point in points:
        inside = checked = 0
        for test in fold_indices(len(texts), 3, 0):
            train = np.setdiff1d(np.arange(len(texts)), test)
            # the protocols measure the neighbour estimator alone: no text flagged outside
            scorer = NeighborsScorer(level=Intervals(point.level, outside_level=1e-9), **settings).fit(
                [texts[i] for i in train], scores[train])
            assert not scorer.predict([texts[i] for i in test]).outside.any()
            prediction = scorer.predict([texts[i] for i in test])
            defined = np.isfinite(prediction.low)
            truth = scores[test][defined]
            inside += int(np.sum((prediction.low[defined] <= truth) & (truth <= prediction.high[defined])))
            checked += int(defined.sum())
        assert (point.checked, point.coverage) == (checked, inside / checked)
    assert points[0].mean_width < points[1].mean_width


def test_the_ridge_estimators_intervals_are_checked_too(huse_texts, huse_scores):
    """The ridge estimator has no neighbour spread (std NaN): its intervals have one width, and
    the calibration curve checks every text it estimates (none, before it used `difficulty`)."""
    scorer = NeighborsScorer(estimator="ridge", device="cpu").fit(huse_texts[:120], huse_scores[:120])
    points = calibration_curve(scorer.training_pass(), scorer.thresholds_, folds=5)
    estimated = int(scorer.leave_one_out().covered.sum())
    assert all(point.checked >= estimated - 5 for point in points)
    assert 0.7 <= next(point for point in points if point.level == 0.9).coverage <= 1.0
    assert scorer.thresholds_.summary().startswith("ridge, penalty=")
