"""The neighbour estimate and a text's fluency statistic combined: a linear model stacked on the
training texts' exact leave-one-out estimates.

Each calibration text's neighbour estimate made without it (the estimate a new text gets) and
its fluency features (`fluency.outlier.estimate_features`: the mean token log-probability) are
the features, its score the target: least squares for intercept + w_1 estimate + w_2 fluency.
Stacking (Wolpert, 1992) on leave-one-out estimates keeps the neighbour model from grading its
own homework, and it applies to every estimator. The statistic as a feature of the kernel ridge
(kernel K + gamma z z^T) did better on GUG and MLQE in bench/fluency.md (0.635 and 0.515 against
0.506 and 0.424 stacked on the default's top-k, worse on HUSE), but serves the ridge estimator
alone, while the default is top-k; the default scorer with stacking, outlier column and all
reached 0.517 and 0.499 (bench/quality.md). The model's own leave-one-out is exact (the hat
matrix: residual / (1 - leverage)), so whether it gains beyond the noise is judged on estimates
no text saw itself.

Fitted in Python floats with correctly rounded sums and a small elimination, and applied as
products and sums in a fixed order: the same coefficients on every machine and the same bits on
every device. A text the model cannot judge (no estimate, or no token: NaN) keeps its neighbour
estimate; the result is clipped to the score range, where the truth lies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.discriminant import solve

@dataclass(frozen=True)
class Stacking:
    """intercept + weights[0] * estimate + sum_j weights[j + 1] * feature_j, clipped to `bounds`."""

    intercept: float
    weights: tuple[float, ...]
    bounds: tuple[float, float] | None

    @classmethod
    def fit(cls, estimates: np.ndarray, features: np.ndarray, truth: np.ndarray,
            bounds: tuple[float, float] | None) -> tuple[Stacking, np.ndarray]:
        """The least-squares model on the rows where the estimate and every feature are finite
        (`features`: [texts, k]), and each row's exact leave-one-out estimate (the neighbour
        estimate where the model cannot judge it)."""
        columns = np.column_stack([estimates, features]).astype(np.float64)
        truth = np.asarray(truth, dtype=np.float64)
        used = np.isfinite(columns).all(axis=1) & np.isfinite(truth)
        design = np.column_stack([np.ones(int(used.sum())), columns[used]])
        size = design.shape[1]
        if used.sum() <= size:
            raise ValueError(f"stacking needs more than {size} texts with an estimate and fluency statistics")
        gram = [[math.fsum(design[:, i] * design[:, j]) for j in range(size)] for i in range(size)]
        moment = [math.fsum(design[:, i] * truth[used]) for i in range(size)]
        coefficients = solve(gram, moment)
        model = cls(coefficients[0], tuple(coefficients[1:]), bounds)
        inverse = np.array([solve(gram, [float(i == j) for i in range(size)]) for j in range(size)])
        leverage = np.einsum("ij,jk,ik->i", design, inverse, design)
        fitted = model._linear(columns[used])
        loo = np.array(estimates, dtype=np.float64)
        loo[used] = model._clip(truth[used] - (truth[used] - fitted) / (1.0 - leverage))
        return model, loo

    def _linear(self, columns: np.ndarray) -> np.ndarray:
        total = np.full(columns.shape[0], self.intercept)
        for column, weight in enumerate(self.weights):
            total = total + weight * columns[:, column]
        return total

    def _clip(self, values: np.ndarray) -> np.ndarray:
        return values if self.bounds is None else np.clip(values, *self.bounds)

    def apply(self, estimates: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """float64 estimates of texts with these neighbour `estimates` and `features` [rows, k]
        (one device, no host synchronisation), in the order `fit` summed them."""
        estimates = estimates.to(torch.float64)
        total = self.intercept + self.weights[0] * estimates
        for column, weight in enumerate(self.weights[1:]):
            total = total + weight * features[:, column].to(torch.float64)
        if self.bounds is not None:
            total = total.clamp(*self.bounds)
        return torch.where(torch.isfinite(total), total, estimates)

    def settings(self) -> dict[str, object]:
        return {"intercept": self.intercept, "weights": list(self.weights)}


def stacked_leave_one_out(estimates: np.ndarray, features: np.ndarray, truth: np.ndarray,
                          bounds: tuple[float, float] | None) -> tuple[Stacking, np.ndarray] | None:
    """`Stacking.fit` where enough texts have an estimate and every feature (more than the
    model's coefficients and one), else None: the model and each text's exact leave-one-out
    estimate, the neighbour estimate where it cannot judge the text."""
    if (np.isfinite(estimates) & np.isfinite(features).all(axis=1)).sum() <= features.shape[1] + 2:
        return None
    return Stacking.fit(estimates, features, truth, bounds)
