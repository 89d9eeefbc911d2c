"""Kernel ridge regression on a similarity matrix, with exact leave-one-out in closed form.

The neighbour estimate is a kernel smoother on the similarities the scorer already computes;
kernel ridge fits weights instead: f(x) = b + sum_j k(x, s_j) alpha_j, with (alpha, b) the
solution of the bordered system (as the least-squares SVM, Suykens et al. 2002)

    [K + lambda I   1] [alpha]   [y]
    [1^T            0] [b    ] = [0]

where K[i, j] = k(s_i, s_j) (row: the text scored, column: the training text, so asymmetric
kernels such as BLEU* are used the way `predict` uses them) and the intercept b is not
penalised. For a linear kernel K = X X^T this is ridge regression with an intercept in dual form
(TF-IDF cosine kernel: the TF-IDF + ridge baseline).

Exact leave-one-out without n refits: write A for the bordered matrix. Replacing y_i by the
leave-one-out model's own estimate at s_i leaves every equation satisfied with alpha_i = 0, so
y_i - f_{-i}(s_i) = alpha_i / (A^-1)_ii, for any K, symmetric or not (Cawley and Talbot, 2004,
for the symmetric case). With G = K + lambda I, the Schur complement of the border gives
(A^-1)_ii = (G^-1)_ii - (G^-1 1)_i (1^T G^-1)_i / (1^T G^-1 1). One inverse of G per lambda
(cubic in n); a symmetric K is diagonalised once and every lambda costs O(n^2). Beyond a few
thousand training texts the cubic cost dominates: see docs/benchmarks.md, "Kernel ridge at scale".

The scorer's estimator "ridge" fits on similarities quantised to whole 2^-20 units (`quantised`,
the unit of the neighbour weights) and predicts through the tile loop (`RidgeReduction`): each
estimate sum_j k(x, s_j) alpha_j is a sum of integers (a similarity in units times a 13-bit limb
of alpha in fixed point), exact in float64 in any order, so the estimates are the same bits for
every chunk size, tile order and device, and equal the fitted model's own arithmetic.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.neighbours import (
    WEIGHT_BITS,
    WEIGHTED_COLUMNS,
    WEIGHTED_LIMB_BITS,
    FixedPoint,
    Prediction,
    TensorPrediction,
    TrainingSubset,
    decode_limbs,
    excluded_pairs,
)
from gpu_neighbors.core.tiling import Tile

# Penalties tried, in units of the mean diagonal of K (self-similarity), so one grid serves
# every kernel; chosen by exact leave-one-out squared error, as RidgeCV chooses its alpha.
RELATIVE_PENALTIES = tuple(np.logspace(-3, 3, 13))
# Training texts the model is fitted on at most: one cubic solve per penalty (13 on 2,000 texts:
# about 8 s on two cores; 8x that at 4,000). Above it, a seeded sample of this many.
MAX_RIDGE_TEXTS = 2000


@dataclass(frozen=True)
class KernelRidge:
    """A fitted model: dual weights alpha (one per training text), intercept b, the penalty,
    and the exact leave-one-out estimates of the training texts at that penalty."""

    alpha: np.ndarray
    intercept: float
    penalty: float
    loo: np.ndarray

    def predict(self, similarities: np.ndarray) -> np.ndarray:
        """Estimates for candidates from their similarities to the training texts [m, n]."""
        return np.asarray(similarities, dtype=np.float64) @ self.alpha + self.intercept


def fit(
    matrix: np.ndarray,
    scores: np.ndarray,
    penalties: Sequence[float] | None = None,
) -> KernelRidge:
    """Kernel ridge on the training similarities `matrix` [n, n] and scores [n], the penalty
    chosen from `penalties` (absolute; None: RELATIVE_PENALTIES x mean self-similarity) by exact
    leave-one-out squared error (ties: the larger penalty)."""
    matrix, scores, penalties = _problem(matrix, scores, penalties, 2, "kernel ridge")
    best: KernelRidge | None = None
    best_error = np.inf
    for penalty, inverse in _inverses(matrix, sorted(penalties, reverse=True)):
        model = _solve(inverse, scores, penalty)
        error = float(np.mean((scores - model.loo) ** 2))
        if error < best_error:
            best, best_error = model, error
    if best is None:
        raise ValueError("kernel ridge: no penalty gave a finite leave-one-out error")
    return best


def nested_leave_one_out(
    matrix: np.ndarray,
    scores: np.ndarray,
    penalties: Sequence[float] | None = None,
    block: int = 512,
) -> np.ndarray:
    """Each item's estimate by kernel ridge fitted on all the others, at the penalty of
    `penalties` that the others' own exact leave-one-out error chooses (as `fit` on them would:
    ties go to the larger penalty): leave-one-out with the penalty tuned inside each training
    set, as a RidgeCV refitted per left-out item does, from one inverse per penalty instead of
    n fits. Leaving item i out of the bordered system changes its inverse B (the block of
    A^-1 on the texts) by a rank-one term, under which item j's leave-one-out residual becomes
    (alpha_j - B_ji alpha_i / B_ii) / (B_jj - B_ji B_ij / B_ii); i's own estimate at each
    penalty is the closed form of `_solve`. None: RELATIVE_PENALTIES x the mean self-similarity
    of all items. Rows are taken `block` at a time (memory: a few [block, n] arrays)."""
    matrix, scores, penalties = _problem(matrix, scores, penalties, 3, "nested kernel ridge")
    n = scores.size
    best_error = np.full(n, np.inf)
    estimates = np.full(n, np.nan)
    for penalty, inverse in _inverses(matrix, sorted(penalties, reverse=True)):
        model = _solve(inverse, scores, penalty)
        right, left = inverse.sum(axis=1), inverse.sum(axis=0)
        bordered = inverse - np.outer(right, left) / float(right.sum())  # B: A^-1 on the texts
        diagonal = np.diag(bordered)
        errors = np.empty(n)
        for start in range(0, n, block):
            rows = np.arange(start, min(start + block, n))
            down = bordered[:, rows].T  # [rows, n]: B_ji for left-out i (row) and item j (column)
            ratio = down / diagonal[rows, None]
            with np.errstate(invalid="ignore", divide="ignore"):  # j = i is 0 / 0, set below
                residuals = (model.alpha[None, :] - ratio * model.alpha[rows, None]) / (
                    diagonal[None, :] - ratio * bordered[rows, :])
            residuals[np.arange(rows.size), rows] = 0.0  # i is not in its own training set
            errors[rows] = np.sum(residuals * residuals, axis=1) / (n - 1)
        better = errors < best_error
        best_error = np.where(better, errors, best_error)
        estimates = np.where(better, model.loo, estimates)
    return estimates


def _problem(matrix: np.ndarray, scores: np.ndarray, penalties: Sequence[float] | None, least: int,
             what: str) -> tuple[np.ndarray, np.ndarray, Sequence[float]]:
    """The matrix and scores as float64, checked ([n, n], n >= `least`), and the penalties:
    as given, or RELATIVE_PENALTIES x the mean self-similarity."""
    matrix = np.asarray(matrix, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    n = scores.size
    if matrix.shape != (n, n) or n < least:
        raise ValueError(f"{what} needs an [n, n] matrix for n >= {least} scores, got {matrix.shape} and {n}")
    if penalties is None:
        scale = float(np.mean(np.diag(matrix)))
        penalties = [value * (scale if scale > 0 else 1.0) for value in RELATIVE_PENALTIES]
    return matrix, scores, penalties


def _inverses(matrix: np.ndarray, penalties: Sequence[float]) -> Iterator[tuple[float, np.ndarray]]:
    """(penalty, (K + penalty I)^-1) for each penalty: one eigendecomposition for a symmetric
    K, else one inverse each."""
    n = matrix.shape[0]
    if np.array_equal(matrix, matrix.T):
        values, vectors = np.linalg.eigh(matrix)
        for penalty in penalties:
            yield penalty, (vectors / (values + penalty)) @ vectors.T
        return
    for penalty in penalties:
        yield penalty, np.linalg.inv(matrix + penalty * np.eye(n))


def _solve(inverse: np.ndarray, scores: np.ndarray, penalty: float) -> KernelRidge:
    """The bordered system's solution and exact leave-one-out estimates from G^-1."""
    right = inverse.sum(axis=1)  # G^-1 1
    left = inverse.sum(axis=0)  # 1^T G^-1
    total = float(right.sum())  # 1^T G^-1 1
    intercept = float(left @ scores) / total
    alpha = inverse @ scores - right * intercept
    diagonal = np.diag(inverse) - right * left / total
    return KernelRidge(alpha, intercept, float(penalty), scores - alpha / diagonal)


def quantised(similarities: torch.Tensor) -> torch.Tensor:
    """Similarities clamped to [-1, 1] in whole 2^-20 units (float64 integers): what the ridge
    estimator fits on and sums, so every product with a 13-bit limb stays below 2^33."""
    return torch.round(similarities.to(torch.float64).clamp(-1.0, 1.0) * 2.0**WEIGHT_BITS)


def fit_quantised(matrix: torch.Tensor, scores: np.ndarray, penalties: Sequence[float] | None = None) -> KernelRidge:
    """`fit` on the training similarities as the estimator sees them (`quantised`)."""
    return fit((quantised(matrix) * 2.0**-WEIGHT_BITS).cpu().numpy(), scores, penalties)


@dataclass(frozen=True)
class RidgeWeights:
    """A fitted model's dual weights as fixed-point 13-bit limbs [n, 4] (most significant first)
    on a device, with their shift and the intercept: what `RidgeReduction` multiplies tiles by."""

    limbs: torch.Tensor
    shift: int
    intercept: float

    @classmethod
    def of(cls, model: KernelRidge, device: torch.device) -> RidgeWeights:
        fixed = FixedPoint.encode(torch.as_tensor(model.alpha, dtype=torch.float64))
        return cls(fixed.fine_limbs().to(device), fixed.shift, model.intercept)


class RidgeReduction:
    """sum_j k(x, s_j) alpha_j for candidate rows 0..rows-1, tile by tile, as exact limb sums;
    also how many training texts have a positive similarity with each row (leave_one_out: the
    rows are the training texts, each not counted as similar to itself; the sum keeps every
    column, since the ridge model's leave-one-out is its closed form).

    subset (subsampled rewards, `NeighborsScorer.draw_subset`): only those training texts'
    terms are summed, and the sum is scaled by |S| / |subset|, so that over random subsets it is
    the full model's on average (Horvitz-Thompson); the dual weights are not refitted."""

    def __init__(self, rows: int, weights: RidgeWeights, leave_one_out: bool = False,
                 subset: TrainingSubset | None = None) -> None:
        device = weights.limbs.device
        self.weights = weights
        self.leave_one_out = leave_one_out
        self.subset = subset
        self.total = torch.zeros((rows, weights.limbs.shape[1]), dtype=torch.int64, device=device)
        self.count = torch.zeros(rows, dtype=torch.int64, device=device)

    def add(self, tile: Tile) -> None:
        rows = slice(tile.row, tile.row + tile.values.shape[0])
        units = quantised(tile.values)
        similar = tile.values > 0
        outside = excluded_pairs(tile, False, self.subset)
        if outside is not None:
            units, similar = units.masked_fill(outside, 0.0), similar & ~outside
        excluded = excluded_pairs(tile, self.leave_one_out, None)
        self.count[rows] += (similar if excluded is None else similar & ~excluded).sum(dim=1)
        for start in range(0, units.shape[1], WEIGHTED_COLUMNS):
            stop = min(start + WEIGHTED_COLUMNS, units.shape[1])
            limbs = self.weights.limbs[tile.column + start : tile.column + stop]
            self.total[rows] += (units[:, start:stop] @ limbs).to(torch.int64)

    def result(self) -> TensorPrediction:
        """An estimate for every row with a similar training text (as topk: where none is, the
        model would only say its intercept); no spread (NaN)."""
        shift = self.weights.shift + WEIGHT_BITS
        sums = decode_limbs(self.total, WEIGHTED_LIMB_BITS, shift)
        if self.subset is not None:
            sums = sums * (self.weights.limbs.shape[0] / self.subset.size)
        scores = sums + self.weights.intercept
        covered = self.count > 0
        nan = torch.full_like(scores, float("nan"))
        return TensorPrediction(scores=torch.where(covered, scores, nan), num_neighbors=self.count, std=nan,
                                covered=covered, estimator="ridge")


def leave_one_out_prediction(loo: np.ndarray, similar: np.ndarray) -> Prediction:
    """The exact leave-one-out estimates as a `Prediction`, undefined (as `RidgeReduction`'s)
    where no other training text is similar; `similar` counts those."""
    covered = similar > 0
    return Prediction(np.where(covered, loo, np.nan), similar.astype(np.int64), np.full(loo.size, np.nan),
                      covered, "ridge")
