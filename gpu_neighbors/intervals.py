"""Intervals as a part of a scorer: conformal prediction on the training set's exact
leave-one-out residuals (`core/conformal.py` states the guarantee), each interval scaled by
the estimate's difficulty. The scorer runs the leave-one-out passes; this part says which texts
calibrate, how their residuals become a `Calibration`, and how a calibration bounds estimates.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gpu_neighbors.core import conformal
from gpu_neighbors.core.validation import DEFAULT_LEVEL, interval

LEVEL = interval(0, 1, closed="neither")


class Intervals:
    """level: nominal coverage of the interval [low, high] given with each estimate."""

    def __init__(self, level: float = DEFAULT_LEVEL) -> None:
        if not LEVEL.accepts(level):
            raise ValueError(f"level must be {LEVEL.description}, not {level!r}")
        self.level = float(level)

    def settings(self) -> dict[str, Any]:
        return {"level": self.level}

    @staticmethod
    def sample(canonical: np.ndarray) -> np.ndarray:
        """The training texts (positions) that calibrate, of those in `canonical` order."""
        return conformal.calibration_sample(canonical)

    @staticmethod
    def calibrate(texts: np.ndarray, estimates: np.ndarray, spreads: np.ndarray, truth: np.ndarray,
                  canonical: np.ndarray) -> conformal.Calibration:
        """`Calibration.fit` on the leave-one-out results of training texts `texts` (positions),
        handed over in the canonical order, where its seeded split cuts the same halves whatever
        order the training set came in."""
        ranks = np.empty(canonical.size, dtype=np.int64)
        ranks[canonical] = np.arange(canonical.size)
        arranged = np.argsort(ranks[texts])
        return conformal.Calibration.fit(estimates[arranged], spreads[arranged], truth[texts][arranged])

    def bounds(self, calibration: conformal.Calibration, scores: torch.Tensor, std: torch.Tensor, estimator: str,
               score_range: tuple[float, float] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) of each estimate at `level`, clipped to `score_range` (where the truth lies)."""
        bounds = None if score_range is None else (float(score_range[0]), float(score_range[1]))
        return calibration.interval_tensors(scores, conformal.difficulty(estimator, std), self.level, bounds)

    def __repr__(self) -> str:
        return f"Intervals(level={self.level!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Intervals) and other.level == self.level

    def __hash__(self) -> int:
        return hash(self.level)
