"""Spearman's rho for many masked rows at once, with its p-value and a bootstrap interval.

Tuning and sweeps score thousands of (tau, a, b) settings, each of which leaves a different
subset of items with an estimate; ranking them all in one array keeps that cheap. A NaN marks
an item without an estimate: each row's rho is taken over its finite pairs only, exactly as
`scipy.stats.spearmanr` on those pairs (average ranks for ties).
"""
from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 1000


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """rho of each row of `x` [rows, n] with `y` ([n] or [rows, n]) over the positions where
    both are finite; NaN where fewer than two remain or one side is constant."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    y = np.asarray(y, dtype=np.float64)
    valid = np.isfinite(x) & np.isfinite(y)
    y_ranks = _ranks_of_one(y, valid) if y.ndim == 1 else _ranks(np.broadcast_to(y, x.shape), valid)
    return _pearson_rows(_ranks(x, valid), y_ranks, valid)


def _ranks(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Average ranks of each row's valid entries among themselves (invalid ones rank last as
    +inf, so they never shift a valid rank)."""
    from scipy import stats  # imported on use: ~0.7 s that `import gpu_neighbors` need not pay

    if values.shape[1] == 0:
        return np.zeros(values.shape)
    return stats.rankdata(np.where(valid, values, np.inf), axis=1)


def _ranks_of_one(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """`_ranks` of one vector [n] among each row's valid entries [rows, n], without a sort per
    row (tuning ranks one truth against thousands of masks): sorted once, each entry's average
    rank is the row's valid entries before its tie group plus half of those in it, plus a half
    (the same numbers: halves and whole numbers, exact). Invalid entries get a finite rank that
    `_pearson_rows` leaves out."""
    if values.size == 0:
        return np.zeros(valid.shape)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    group = np.cumsum(np.isin(np.arange(values.size), starts)) - 1
    inside = valid[:, order]
    seen = np.cumsum(inside, axis=1)
    before = seen[:, starts] - inside[:, starts]
    within = seen[:, np.r_[starts[1:], values.size] - 1] - before
    ranks = np.empty(valid.shape)
    ranks[:, order] = before[:, group] + (within[:, group] + 1) * 0.5
    return ranks


def _ranks_of_draws(values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """`_ranks` of each row of `values[draws]` (finite values, drawn with replacement) without a
    sort per row (the bootstrap ranks a thousand draws of every agreement): a drawn value's
    average rank is the draws of smaller values plus half of those of its own value, plus a
    half, counted by value group (the same halves and whole numbers, exact)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    group = np.empty(values.size, dtype=np.int64)
    group[order] = np.cumsum(starts) - 1
    groups = int(starts.sum())
    drawn = group[draws]
    counts = np.bincount((drawn + groups * np.arange(draws.shape[0])[:, None]).ravel(),
                         minlength=groups * draws.shape[0]).reshape(draws.shape[0], groups)
    ranks = (np.cumsum(counts, axis=1) - counts) + (counts + 1) * 0.5
    return np.take_along_axis(ranks, drawn, axis=1)


def _pearson_rows(a: np.ndarray, b: np.ndarray, valid: np.ndarray) -> np.ndarray:
    count = valid.sum(axis=1)
    safe = np.maximum(count, 1)
    da = np.where(valid, a - (a * valid).sum(axis=1, keepdims=True) / safe[:, None], 0.0)
    db = np.where(valid, b - (b * valid).sum(axis=1, keepdims=True) / safe[:, None], 0.0)
    spread = np.sqrt((da * da).sum(axis=1) * (db * db).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (da * db).sum(axis=1) / spread
    rho[(count < 2) | (spread == 0)] = np.nan
    return np.clip(rho, -1.0, 1.0)


def spearman_pvalue(rho: float, n: int) -> float:
    """Two-sided p-value of rho over n pairs against no correlation (the t approximation with
    n - 2 degrees of freedom that `scipy.stats.spearmanr` uses)."""
    if not np.isfinite(rho) or n < 3:
        return float("nan")
    if abs(rho) >= 1.0:
        return 0.0
    from scipy import stats

    t = rho * np.sqrt((n - 2) / ((1.0 - rho) * (1.0 + rho)))
    return float(2.0 * stats.t.sf(abs(t), n - 2))


def canonical_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (x, y) sorted by x, then y: equal pairs are interchangeable, so sums, draws and
    everything computed from the pairs in this order is the same in any order of the data."""
    order = np.lexsort((y, x))
    return x[order], y[order]


def spearman_interval(
    x: np.ndarray,
    y: np.ndarray,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of rho over the finite pairs of `x` and `y`: pairs are
    drawn with replacement `resamples` times; draws with an undefined rho are left out.
    (NaN, NaN) when fewer than three pairs exist or `resamples` is 0. The draws index the pairs
    sorted by x, then y: equal pairs are interchangeable, so the interval is the same in any
    order of the data (it was not, in file order)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = canonical_pairs(x[keep], y[keep])
    if resamples < 1 or x.size < 3:
        return float("nan"), float("nan")
    draws = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    rhos = _pearson_rows(_ranks_of_draws(x, draws), _ranks_of_draws(y, draws), np.ones(draws.shape, dtype=bool))
    rhos = rhos[np.isfinite(rhos)]
    if rhos.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(rhos, [tail, 100.0 - tail])
    return float(low), float(high)
