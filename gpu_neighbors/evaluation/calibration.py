"""Do the intervals hold? Nominal against empirical coverage of the conformal intervals
(`core/conformal.py`) by cross-validation on one similarity pass: in each fold the intervals are
calibrated on the training side's exact leave-one-out residuals alone and checked on the held-out
texts that have an estimate. The report plots it (a calibration plot)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu_neighbors.core.conformal import Calibration, difficulty
from gpu_neighbors.core.neighbours import Thresholds
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.evaluation.protocols import fold_indices

LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


@dataclass(frozen=True)
class CoveragePoint:
    """At one nominal level: the share of held-out texts (with an estimate) inside their
    interval, how many were checked, and the intervals' mean width."""

    level: float
    coverage: float
    checked: int
    mean_width: float


def calibration_curve(
    similarities: PairwiseSimilarities,
    thresholds: Thresholds,
    *,
    folds: int = 10,
    seed: int = 0,
    levels: Sequence[float] = LEVELS,
) -> list[CoveragePoint]:
    """Empirical coverage of the intervals at each of `levels`, over `folds` seeded folds."""
    n = len(similarities)
    items = np.arange(n)
    estimates, spreads = np.full(n, np.nan), np.full(n, np.nan)
    calibrations: list[tuple[np.ndarray, Calibration]] = []
    for test in fold_indices(n, min(folds, n), seed):
        train = np.setdiff1d(items, test)
        loo = similarities.leave_one_out(train, thresholds)
        calibrations.append((test, Calibration.fit(loo.scores, difficulty(loo.estimator, loo.std),
                                                   similarities.scores[train])))
        part = similarities.predict(test, train, thresholds)
        estimates[test], spreads[test] = part.scores, difficulty(part.estimator, part.std)
    points = []
    for level in levels:
        low, high = np.full(n, np.nan), np.full(n, np.nan)
        for test, calibration in calibrations:
            low[test], high[test] = calibration.interval(estimates[test], spreads[test], level)
        checked = np.isfinite(low) & np.isfinite(high)
        truth = similarities.scores[checked]
        inside = (low[checked] <= truth) & (truth <= high[checked])
        points.append(CoveragePoint(
            float(level), float(inside.mean()) if checked.any() else float("nan"), int(checked.sum()),
            float(np.mean(high[checked] - low[checked])) if checked.any() else float("nan"),
        ))
    return points
