"""How well estimates agree with known quality: MSE, Spearman and Pearson over the covered
items, coverage, and each rho's p-value and bootstrap 95% interval; and the paper's human rows."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from gpu_neighbors.core.caller_warnings import beyond_float_is_inf
from gpu_neighbors.core.correlation import (
    RESAMPLES,
    canonical_pairs,
    spearman_interval,
    spearman_pvalue,
    spearman_rows,
)
from gpu_neighbors.core.neighbours import Prediction

NAN = float("nan")


@dataclass(frozen=True)
class Agreement:
    """MSE and correlations over the covered items, and the coverage itself; rho's two-sided
    p-value and bootstrap interval (NaN when not computed or undefined)."""

    n: int
    mse: float
    spearman: float
    pearson: float
    coverage: float
    spearman_p: float = NAN
    spearman_low: float = NAN
    spearman_high: float = NAN

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def agreement(
    prediction: Prediction,
    truth: Sequence[float] | np.ndarray,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Agreement:
    """Compare estimates with the true scores on the items that have an estimate (as the paper
    reports MSE and Spearman's rho); NaN where fewer than two items are covered. `resamples`
    bootstrap draws give rho's 95% interval (0 skips it)."""
    truth = np.asarray(truth, dtype=np.float64)
    if truth.shape != prediction.scores.shape:
        raise ValueError(f"{len(prediction)} predictions but {truth.size} true scores")
    return _agreement(prediction.scores, truth, prediction.covered, resamples, seed)


@beyond_float_is_inf
def _agreement(
    estimated: np.ndarray, truth: np.ndarray, covered: np.ndarray, resamples: int, seed: int
) -> Agreement:
    estimated, known = canonical_pairs(estimated[covered], truth[covered])  # the same bits in any order
    mse = float(np.mean((estimated - known) ** 2)) if covered.any() else NAN
    spearman = float(spearman_rows(estimated, known)[0])
    pearson = low = high = NAN
    if math.isfinite(spearman):  # both sides vary
        from scipy import stats  # imported on use: the CLI's start-up need not pay ~0.7 s

        pearson = float(stats.pearsonr(estimated, known).statistic)
        low, high = spearman_interval(estimated, known, resamples, seed=seed)
    return Agreement(
        n=int(truth.size),
        mse=mse,
        spearman=spearman,
        pearson=pearson,
        coverage=float(covered.mean()) if covered.size else NAN,
        spearman_p=spearman_pvalue(spearman, int(covered.sum())),
        spearman_low=low,
        spearman_high=high,
    )


def human_agreement(
    records: Sequence[Mapping[str, Any]],
    *,
    score_field: str = "score",
    judgments_field: str = "judgments",
    scale: float = 5.0,
    resamples: int = RESAMPLES,
) -> dict[str, Agreement]:
    """The paper's "Human (best)" and "Human (average)" rows: each annotator's judgments
    (divided by `scale`) against the mean score, on the items that annotator judged.

    records: one mapping per item with the mean score and a list of judgments, each
    {"worker": id, "score": value}. Average: mean MSE and mean rho over annotators (rho over
    those whose rho is defined), with a bootstrap interval over annotators and a one-sample t-test
    of their rhos. Best: the lowest MSE and, separately, the highest rho (that annotator's own
    p-value and interval). n counts items; coverage is 1."""
    by_worker: dict[str, list[tuple[int, float]]] = {}
    truth = np.empty(len(records))
    for index, record in enumerate(records):
        for field in (score_field, judgments_field):
            if field not in record:
                raise ValueError(f"record {index}: no {field!r} field (needed for human agreement)")
        truth[index] = float(record[score_field])
        for judgment in record[judgments_field]:
            try:
                worker, value = str(judgment["worker"]), float(judgment["score"]) / scale
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    f"record {index}: each judgment needs a 'worker' and a numeric 'score', got {judgment!r}"
                ) from None
            by_worker.setdefault(worker, []).append((index, value))
    if not by_worker:
        raise ValueError("no judgments in the records: human agreement needs per-annotator judgments")
    pairs = []
    for _, items in sorted(by_worker.items()):  # annotators by id: the same sums in any order of the records
        indices = np.array([index for index, _ in items])
        pairs.append((np.array([value for _, value in items]), truth[indices]))
    workers = [_agreement(judged, known, np.ones(judged.size, bool), 0, 0) for judged, known in pairs]
    mses = np.array([worker.mse for worker in workers])
    rhos = np.array([worker.spearman for worker in workers])
    pearsons = np.array([worker.pearson for worker in workers])
    defined = rhos[np.isfinite(rhos)]
    best = Agreement(len(records), NAN, NAN, NAN, 1.0)
    if defined.size:
        judged, known = pairs[int(np.nanargmax(rhos))]
        best = _agreement(judged, known, np.ones(judged.size, bool), resamples, 0)
    low, high = _mean_interval(defined, resamples)
    return {
        "Human (best)": replace(
            best, n=len(records), mse=float(mses.min()), pearson=float(np.nanmax(pearsons)), coverage=1.0
        ),
        "Human (average)": Agreement(
            n=len(records),
            mse=float(mses.mean()),
            spearman=float(defined.mean()) if defined.size else NAN,
            pearson=float(np.nanmean(pearsons)),
            coverage=1.0,
            spearman_p=_mean_pvalue(defined),
            spearman_low=low,
            spearman_high=high,
        ),
    }


def _mean_interval(values: np.ndarray, resamples: int, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of a mean, drawn from the values sorted (the same in
    any order of the records)."""
    if values.size < 2 or resamples < 1:
        return NAN, NAN
    values = np.sort(values)
    draws = np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))
    low, high = np.percentile(values[draws].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


def _mean_pvalue(values: np.ndarray) -> float:
    """Two-sided p-value of a one-sample t-test that the values' mean is 0."""
    if values.size < 2:
        return NAN
    from scipy import stats

    return float(stats.ttest_1samp(values, 0.0).pvalue)
