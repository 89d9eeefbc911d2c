"""Choose tau, a and b (and the weight power p, or k of the top-k estimator) on a training set
alone: inner leave-one-out over a grid.

The paper picked tau = 0.08, a = 5, b = 0.66 by maximising Spearman's rho subject to a floor
on coverage (40% there); this does the same search automatically for any data set and kernel.
Every grid point is scored from one similarity pass: per (tau, p) the neighbour statistics are
computed once, and all (a, b) pairs are ranked together (`correlation.spearman_rows`); the
top-k estimator ranks the training set once and reads every (k, p) from that ranking.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.correlation import spearman_rows
from gpu_neighbors.core.kernel_ridge import RELATIVE_PENALTIES
from gpu_neighbors.core.neighbours import Thresholds, is_covered
from gpu_neighbors.core.pairwise import DEFAULT_SIMILARITY_ERROR, PairwiseSimilarities
from gpu_neighbors.core.validation import DEFAULT_MIN_COVERAGE

# A coarse grid on purpose: every extra setting is another chance to fit the noise of a
# 200-item inner leave-one-out. In nested leave-one-out on the HUSE summarization data this grid
# beat a fine one (a in 1..40 by 1-5, b in 0.1..1 by 0.1) for every kernel: rho 0.29 against
# 0.19 (BLEU*, characters), 0.32 against 0.23 (ROUGE-L), 0.25 against 0.15 (METEOR), and tied
# (0.29) for BLEU* on words.
DEFAULT_MIN_NEIGHBORS = (1, 3, 5, 10, 20, 30)
DEFAULT_MAX_FRACTIONS = (1.0, 0.66, 0.4, 0.2)
# Neighbour shares (of all pairs) that the data-driven tau grid aims at: from a handful of
# neighbours per item to most of the set.
TAU_SHARES = tuple(np.geomspace(0.005, 0.8, 20))
# Weight powers p of similarity weighting (k^p); 0 is the plain mean.
SIMILARITY_POWERS = (1.0, 2.0, 4.0, 8.0)
UNIFORM_POWERS = (0.0,)
# k of the top-k estimator: from the nearest text to a thousand, capped at |S| - 1 in tuning.
MAX_TOP_K = 1000
MIN_TUNING_ITEMS = 3  # a rank correlation of fewer leave-one-out estimates judges nothing
DEFAULT_TOP_KS = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500, 1000)


@dataclass(frozen=True)
class TuningGrid:
    """Values to try. `taus=None` derives them from the training similarities: the quantiles
    that give each item on average 0.5% .. 80% of the set as neighbours, plus `default_tau`.
    Among settings with equal results the first in (tau up, a up, b down) order wins: the
    loosest a and b, which cover the most new items."""

    taus: Sequence[float] | None = None
    min_neighbors: Sequence[int] = DEFAULT_MIN_NEIGHBORS
    max_fractions: Sequence[float] = DEFAULT_MAX_FRACTIONS
    powers: Sequence[float] = UNIFORM_POWERS
    top_ks: Sequence[int] = DEFAULT_TOP_KS

    def k_values(self, num_train: int) -> list[int]:
        """The grid's k that a training set of `num_train` texts can fill (at least one)."""
        values = sorted({int(k) for k in self.top_ks if 1 <= k <= min(num_train, MAX_TOP_K)})
        return values or [max(1, min(num_train, MAX_TOP_K))]

    def tau_values(
        self, similarities: np.ndarray, default_tau: float | None, error: float = DEFAULT_SIMILARITY_ERROR
    ) -> np.ndarray:
        """The taus to try, each moved between two distinct training similarities, farther
        than `error` from both (`between_similarities`)."""
        if self.taus is not None:
            taus = np.asarray(self.taus, dtype=np.float64)
        else:
            levels = 1.0 - np.asarray(TAU_SHARES)
            taus = np.quantile(similarities, levels) if similarities.size else np.zeros(0)
            if default_tau is not None:
                taus = np.append(taus, default_tau)
        return np.unique(between_similarities(taus, similarities, error))

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (a, b) pair, a ascending then b descending."""
        a_values = np.sort(np.asarray(self.min_neighbors, dtype=np.int64))
        b_values = np.sort(np.asarray(self.max_fractions, dtype=np.float64))[::-1]
        if a_values.size == 0 or b_values.size == 0 or a_values[0] < 1 or not (
            0 < b_values.min() and b_values.max() <= 1
        ):
            raise ValueError("tuning grid: need a values >= 1 and b values in (0, 1]")
        a_grid, b_grid = np.meshgrid(a_values, b_values, indexing="ij")
        return a_grid.ravel(), b_grid.ravel()


def between_similarities(
    taus: np.ndarray, similarities: np.ndarray, error: float = DEFAULT_SIMILARITY_ERROR
) -> np.ndarray:
    """Each tau moved into a gap between two distinct similarities, at its midpoint, where it is
    farther than `error` (the kernel's bound on how far a similarity may move in another
    faithful evaluation) from both ends; every training pair then keeps its side of tau however
    its similarity is evaluated.

    A tau taken from the similarities (a quantile) sits exactly on a value that thousands of
    pairs may share, and the midpoint of a gap no wider than 2 `error` is no better: the
    midpoint of two adjacent floats rounds onto one of them. So a tau goes to the midpoint of
    its own gap where that gap is clear (wider than 2 `error`), else to the nearest clear gap's
    midpoint (the old midpoint when no gap is clear). A tau farther than `error` below every
    similarity, or above them all, stays (every pair a neighbour, or none); so does a tau of at
    most 0 where the smallest similarity is 0, which is exact everywhere (no overlap). A tau at
    or just below a smallest similarity other than 0 moves down by half the first gap (half the
    value itself when all are equal)."""
    values = np.unique(np.asarray(similarities, dtype=np.float64).reshape(-1))  # sorted, distinct
    taus = np.asarray(taus, dtype=np.float64)
    if values.size == 0:
        return taus
    moved = np.full_like(taus, values[0])  # one value: only the rules below the loop apply
    if values.size > 1:
        low, high = values[:-1], values[1:]
        middles = low + (high - low) / 2
        clear = (middles - low > error) & (high - middles > error)
        gap = np.clip(np.searchsorted(values, taus, side="left") - 1, 0, middles.size - 1)
        moved = middles[gap]
        if clear.any():
            moved = np.where(clear[gap], moved, _nearest(middles[clear], taus))
    first_gap = (values[1] - values[0]) if values.size > 1 else abs(values[0])
    below_smallest = values[0] - first_gap / 2
    keep = (taus < values[0] - error) | (taus > values[-1] + error) | ((values[0] == 0) & (taus <= 0))
    at_smallest = ~keep & ((taus <= values[0]) | (values.size == 1)) & (values[0] - below_smallest > error)
    return np.where(keep, taus, np.where(at_smallest, below_smallest, moved))


def _nearest(points: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The element of sorted `points` nearest to each target (the lower one on a tie)."""
    right = np.clip(np.searchsorted(points, targets), 0, points.size - 1)
    left = np.maximum(right - 1, 0)
    return np.where(np.abs(points[right] - targets) < np.abs(targets - points[left]), points[right], points[left])


@dataclass(frozen=True)
class TuningResult:
    """The chosen thresholds and how they did in the inner leave-one-out.

    feasible is False when no grid point reached `min_coverage`; the choice is then the
    point with the highest coverage (and among those the highest rho)."""

    thresholds: Thresholds
    spearman: float
    coverage: float
    min_coverage: float
    feasible: bool
    settings_tried: int

    def as_dict(self) -> dict[str, float | int | bool | str]:
        return {
            **self.thresholds.as_dict(),
            "inner_spearman": self.spearman,
            "inner_coverage": self.coverage,
            "min_coverage": self.min_coverage,
            "feasible": self.feasible,
            "settings_tried": self.settings_tried,
        }


def tune(
    similarities: PairwiseSimilarities,
    items: np.ndarray | None = None,
    *,
    grid: TuningGrid | None = None,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    default_tau: float | None = None,
    estimator: str = "threshold",
    base: Thresholds | None = None,
) -> TuningResult:
    """Best grid point for the training items `items` (all when None), judged by leave-one-out
    among those items only: the highest rho with coverage >= min_coverage. `estimator="topk"`
    searches k and p instead of tau, a, b and p (its tau, a and b stay those of `base`);
    "ridge" chooses kernel ridge's penalty by exact leave-one-out squared error."""
    if not 0.0 <= min_coverage <= 1.0:
        raise ValueError(f"min_coverage must be in [0, 1], not {min_coverage!r}")
    grid = grid or TuningGrid()
    items = np.arange(len(similarities)) if items is None else np.asarray(items, dtype=np.int64)
    if items.size < MIN_TUNING_ITEMS:
        raise ValueError(f"tuning needs at least {MIN_TUNING_ITEMS} training items, got {items.size}")
    if items.size != len(similarities) or np.any(items != np.arange(items.size)):
        # one copy of the training block, so no grid point copies it again
        similarities = similarities.subset(items)
        items = np.arange(items.size)
    truth = similarities.scores[items]
    if estimator == "ridge":
        return _tune_ridge(similarities, items, truth, min_coverage, base)
    if estimator == "topk":
        return _tune_topk(similarities, items, truth, grid, min_coverage, base)
    a_values, b_values = grid.pairs()
    taus = grid.tau_values(similarities.off_diagonal(items), default_tau, similarities.error)
    rows: list[tuple[Thresholds, float, float]] = []  # (setting, rho, coverage), grid order
    for tau in taus:
        for power in grid.powers:
            stats = similarities.stats(items, items, float(tau), float(power))
            prediction = similarities.estimate(
                stats, items, items.size - 1, Thresholds(float(tau), 1, 1.0, float(power))
            )
            means = np.where(prediction.num_neighbors > 0, prediction.scores, np.nan)
            covered = is_covered(
                stats.count[None, :], items.size - 1,
                torch.as_tensor(a_values)[:, None], torch.as_tensor(b_values)[:, None],
            ).numpy()
            rho, coverage = _score_masks(covered, means, truth)
            rows.extend(
                (Thresholds(float(tau), int(a), float(b), float(power)), float(r), float(c))
                for a, b, r, c in zip(a_values, b_values, rho, coverage)
            )
    return choose(rows, min_coverage)


def _tune_topk(
    similarities: PairwiseSimilarities,
    items: np.ndarray,
    truth: np.ndarray,
    grid: TuningGrid,
    min_coverage: float,
    base: Thresholds | None,
) -> TuningResult:
    """Every (p, k) of the grid from one ranking of the training set (leave-one-out)."""
    base = base or Thresholds(0.0, 1, 1.0)
    ks = grid.k_values(items.size - 1)
    top = similarities.top(items, items, ks)
    rows: list[tuple[Thresholds, float, float]] = []
    for power in grid.powers:
        predictions = similarities.estimate_top(top, items, ks, float(power), spread=False)
        rho = spearman_rows(np.stack([prediction.scores for prediction in predictions]), truth)
        for k, r, prediction in zip(ks, rho, predictions):
            setting = Thresholds(base.tau, base.min_neighbors, base.max_fraction, float(power), "topk", k)
            rows.append((setting, float(r), prediction.coverage))
    return choose(rows, min_coverage)


def _tune_ridge(
    similarities: PairwiseSimilarities,
    items: np.ndarray,
    truth: np.ndarray,
    min_coverage: float,
    base: Thresholds | None,
) -> TuningResult:
    """Kernel ridge's penalty by exact leave-one-out error; rho of those leave-one-out estimates."""
    base = base or Thresholds(0.0, 1, 1.0)
    model = similarities.ridge(items)
    setting = Thresholds(base.tau, base.min_neighbors, base.max_fraction, 0.0, "ridge", None, model.penalty)
    rho = float(spearman_rows(model.loo[None, :], truth)[0])
    return choose([(setting, rho, 1.0)], min_coverage, len(RELATIVE_PENALTIES))


def _score_masks(covered: np.ndarray, means: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rho and coverage of every coverage mask; identical masks are ranked once."""
    packed = np.ascontiguousarray(np.packbits(covered, axis=1))
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rho = spearman_rows(np.where(covered[first], means[None, :], np.nan), truth)
    return rho[inverse.ravel()], covered.mean(axis=1)


def choose(rows: list[tuple[Thresholds, float, float]], min_coverage: float, tried: int | None = None) -> TuningResult:
    """The best of `rows` (setting, inner rho, inner coverage), in grid order: the highest rho
    with coverage >= min_coverage (ties: the higher coverage, then the first); where none
    reaches it, the highest coverage (then rho)."""
    table = np.array([(rho, coverage) for _, rho, coverage in rows], dtype=np.float64)
    rho = np.where(np.isfinite(table[:, 0]), table[:, 0], -np.inf)
    feasible = (table[:, 1] >= min_coverage) & np.isfinite(table[:, 0])
    order = np.arange(len(rows))
    if feasible.any():
        # lexsort: last key first; ties keep grid order
        best = np.lexsort((order, -table[:, 1], -rho, ~feasible))[0]
    else:
        best = np.lexsort((order, -rho, -table[:, 1]))[0]
    thresholds, spearman, coverage = rows[best]
    return TuningResult(
        thresholds=thresholds,
        spearman=float(spearman),
        coverage=float(coverage),
        min_coverage=min_coverage,
        feasible=bool(feasible.any()),
        settings_tried=len(rows) if tried is None else tried,
    )
