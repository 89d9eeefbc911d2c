"""A linear score that tells degenerate copies of texts from real texts: the outlier test's learned
statistic.

Each typicality statistic sees one way a text goes wrong, and how far each moves for a
degenerate text depends on the training set (a shuffled copy loses only the bigrams that other
training texts hold, and 160 headlines share few). So the scorer learns the
combination from negative evidence: real training texts (label 0) beside degenerate copies of
the same texts (label 1, `text.perturbations`), each copy measured without its original, as a
copy of an unseen text would be. The model is a logistic regression, balanced (the real texts
weigh as much as all the copies together) and with a small ridge penalty, so that a perturbation
the statistics separate perfectly (repetition) keeps the coefficients finite.

Only the order of the scores is read: the outlier test ranks a text's score among the calibration
texts' own (`core.outside`), so a real text's p-value stays valid however well or badly the model
separates (conformal p-values that learn from labelled outliers: Liang, Sesia and Sun, 2024,
"Integrative conformal p-values for out-of-distribution testing with labelled outliers"). One
shortcut: the calibration texts include those it was fitted on (six coefficients from ten rows
a text), not a split of their own; the share of held-out texts flagged stays below the level
(bench/outside.md).

Fitted on the host by Newton's method with correctly rounded sums (`math.fsum`), the portable exp
and a 6 x 6 elimination in Python floats: the same coefficients on every machine. A score is
products and sums in a fixed order: the same bits on every device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core import portable

PENALTY = 1.0  # ridge penalty on the coefficients (not the intercept), in units of one real text's weight
CLAMP = (-1.0, 1.0)  # each statistic's range in the score: real and copied texts' (support dips below it
# only for characters no training text holds, which its own column judges)
MAX_STEPS = 100
TOLERANCE = 1e-12  # Newton stops when no coefficient moves by more than this


@dataclass(frozen=True)
class LinearScore:
    """intercept + sum_j weights[j] * clamp(statistic_j): high for texts like the copies."""

    intercept: float
    weights: tuple[float, ...]

    @classmethod
    def fit(cls, real: np.ndarray, copies: np.ndarray) -> LinearScore:
        """The balanced, penalised logistic regression of copy (1) against real (0) on float64
        statistics [rows, columns]; rows with a NaN (no token) are left out. The weights take
        the signs the data give them: word salad of common training words holds more of its
        tokens than a real text of rare ones, and is told apart by that with its order."""
        real, copies = _finite_rows(real), _finite_rows(copies)
        if real.shape[1] != copies.shape[1]:
            raise ValueError(f"real texts have {real.shape[1]} statistics, copies {copies.shape[1]}")
        if not len(real) or not len(copies):
            return cls(0.0, (0.0,) * real.shape[1])
        intercept, weights = _logistic_fit(np.clip(np.vstack([real, copies]), *CLAMP), len(real))
        return cls(intercept, tuple(weights))

    def score(self, statistics: torch.Tensor) -> torch.Tensor:
        """float64 [rows] of float64 `statistics` [rows, >= len(weights)] (its first columns),
        on their device; NaN where a statistic is NaN."""
        total = torch.full(statistics.shape[:1], self.intercept, dtype=torch.float64, device=statistics.device)
        for column, weight in enumerate(self.weights):
            total = total + weight * statistics[:, column].clamp(*CLAMP)
        return total


def _logistic_fit(features: np.ndarray, real: int) -> tuple[float, list[float]]:
    """(intercept, weights) of the balanced, penalised logistic regression of the last rows
    (copies, 1) against the first `real` rows (0), by Newton's method."""
    copies = len(features) - real
    design = np.column_stack([np.ones(len(features)), features])
    labels = np.concatenate([np.zeros(real), np.ones(copies)])
    weights = np.concatenate([np.full(real, copies / real), np.ones(copies)])
    penalty = PENALTY * copies / real
    coefficients = [0.0] * design.shape[1]
    for _ in range(MAX_STEPS):
        linear = _linear(design, coefficients)
        chance = _logistic(linear)
        residual = weights * (labels - chance)
        curvature = weights * chance * (1.0 - chance)
        gradient = [math.fsum(residual * design[:, j]) - (penalty * coefficients[j] if j else 0.0)
                    for j in range(design.shape[1])]
        hessian = [[math.fsum(curvature * design[:, i] * design[:, j]) + (penalty if i == j and i else 0.0)
                    for j in range(design.shape[1])] for i in range(design.shape[1])]
        step = solve(hessian, gradient)
        coefficients = [value + change for value, change in zip(coefficients, step)]
        if max(abs(change) for change in step) <= TOLERANCE:
            break
    return coefficients[0], coefficients[1:]


def _finite_rows(statistics: np.ndarray) -> np.ndarray:
    statistics = np.asarray(statistics, dtype=np.float64)
    return statistics[np.isfinite(statistics).all(axis=1)]


def _linear(design: np.ndarray, coefficients: list[float]) -> np.ndarray:
    """design @ coefficients, one column at a time in a fixed order (no library dot product)."""
    total = np.zeros(len(design))
    for j, value in enumerate(coefficients):
        total = total + value * design[:, j]
    return total


def _logistic(linear: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x), with the portable exp of a non-positive argument only."""
    small = portable.exp(-np.abs(linear))
    return np.where(linear >= 0, 1.0 / (1.0 + small), small / (1.0 + small))


def solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """The solution of a small positive definite system, by Gaussian elimination with partial
    pivoting in Python floats (the same operations on every machine)."""
    size = len(vector)
    rows = [list(row) + [value] for row, value in zip(matrix, vector)]
    for column in range(size):
        pivot = max(range(column, size), key=lambda row: abs(rows[row][column]))
        rows[column], rows[pivot] = rows[pivot], rows[column]
        for row in range(column + 1, size):
            factor = rows[row][column] / rows[column][column]
            rows[row] = [a - factor * b for a, b in zip(rows[row], rows[column])]
    solution = [0.0] * size
    for row in reversed(range(size)):
        known = math.fsum(rows[row][j] * solution[j] for j in range(row + 1, size))
        solution[row] = (rows[row][size] - known) / rows[row][row]
    return solution
