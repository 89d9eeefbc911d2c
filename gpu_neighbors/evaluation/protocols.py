"""How well estimates agree with known quality: the paper's metrics and protocols.

Every protocol except cross-task works on one all-pairs similarity pass (`pairwise.py`):
leave-one-out and k-fold cross-validation (optionally with thresholds tuned inside each training
fold, never seeing the test items), learning curves over random subsets, and sweeps of tau, a
and b. Every Spearman's rho comes with its p-value and a bootstrap 95% interval.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np
from scipy import stats

from gpu_neighbors.core.correlation import RESAMPLES, spearman_interval, spearman_pvalue, spearman_rows
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.core.tuning import DEFAULT_MIN_COVERAGE, TuningGrid, TuningResult, tune

NAN = float("nan")
Parameter = Literal["tau", "a", "b"]
PARAMETERS: tuple[Parameter, ...] = ("tau", "a", "b")


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


def _agreement(
    estimated: np.ndarray, truth: np.ndarray, covered: np.ndarray, resamples: int, seed: int
) -> Agreement:
    estimated, known = estimated[covered], truth[covered]
    mse = float(np.mean((estimated - known) ** 2)) if covered.any() else NAN
    spearman = float(spearman_rows(estimated, known)[0])
    pearson = low = high = NAN
    if math.isfinite(spearman):  # both sides vary
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


def leave_one_out(
    scorer: NeighborsScorer, texts: Sequence[str], scores: Sequence[float] | np.ndarray
) -> tuple[Prediction, Agreement]:
    """The paper's protocol: every text scored by all the others (one similarity pass)."""
    prediction = scorer.fit(texts, scores).leave_one_out()
    return prediction, agreement(prediction, scores)


# -- human annotators --------------------------------------------------------------------


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
    for items in by_worker.values():
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
            spearman_p=float(stats.ttest_1samp(defined, 0.0).pvalue) if defined.size >= 2 else NAN,
            spearman_low=low,
            spearman_high=high,
        ),
    }


def _mean_interval(values: np.ndarray, resamples: int, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of a mean."""
    if values.size < 2 or resamples < 1:
        return NAN, NAN
    draws = np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))
    low, high = np.percentile(values[draws].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


# -- cross-validation (leave-one-out is k = n), optionally nested tuning ----------------


@dataclass(frozen=True)
class Fold:
    """One split: its test items and the thresholds they were scored with."""

    test: np.ndarray
    thresholds: Thresholds
    tuning: TuningResult | None


@dataclass(frozen=True)
class CrossValidation:
    """Out-of-fold estimates of every item (input order) and their agreement with the truth."""

    prediction: Prediction
    agreement: Agreement
    folds: list[Fold]
    tuned: bool

    def chosen_thresholds(self) -> list[tuple[Thresholds, int]]:
        """Distinct thresholds used across folds with how many folds used each, most used first."""
        return Counter(fold.thresholds for fold in self.folds).most_common()

    def as_dict(self) -> dict[str, Any]:
        return {
            "folds": len(self.folds),
            "tuned": self.tuned,
            **self.agreement.as_dict(),
            "thresholds": [
                {**thresholds.as_dict(), "folds": count} for thresholds, count in self.chosen_thresholds()
            ],
        }


def fold_indices(num_items: int, folds: int | None, seed: int = 0) -> list[np.ndarray]:
    """Test items of each fold: a seeded shuffle cut into `folds` near-equal parts; None (or
    num_items) means leave-one-out, one item per fold in order."""
    if folds is None or folds == num_items:
        return [np.array([item]) for item in range(num_items)]
    if not 2 <= folds <= num_items:
        raise ValueError(f"folds must be between 2 and the number of items ({num_items}), not {folds}")
    order = np.random.default_rng(seed).permutation(num_items)
    return [np.sort(part) for part in np.array_split(order, folds)]


def cross_validate(
    similarities: PairwiseSimilarities,
    thresholds: Thresholds,
    *,
    folds: int | None = 10,
    seed: int = 0,
    tune_thresholds: bool = False,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    grid: TuningGrid | None = None,
    resamples: int = RESAMPLES,
) -> CrossValidation:
    """Score each fold's test items from the other folds. With `tune_thresholds`, tau/a/b are
    chosen by inner leave-one-out on each training fold alone (`thresholds.tau` joins the tau
    grid); otherwise `thresholds` are used throughout. `folds=None` is leave-one-out."""
    num_items = len(similarities)
    everything = np.arange(num_items)
    if folds is None and not tune_thresholds:
        # Identical to the scorer's own leave-one-out (diagonal masked), in one step.
        prediction = similarities.leave_one_out(everything, thresholds)
        fold_list = [Fold(everything, thresholds, None)]
        return CrossValidation(
            prediction, agreement(prediction, similarities.scores, resamples=resamples), fold_list, False
        )
    scores = np.full(num_items, NAN)
    neighbours = np.zeros(num_items, dtype=np.int64)
    spread = np.full(num_items, NAN)
    covered = np.zeros(num_items, dtype=bool)
    fold_list = []
    for test in fold_indices(num_items, folds, seed):
        train = np.setdiff1d(everything, test)
        tuning = None
        used = thresholds
        if tune_thresholds:
            tuning = tune(similarities, train, grid=grid, min_coverage=min_coverage, default_tau=thresholds.tau)
            used = tuning.thresholds
        part = similarities.predict(test, train, used)
        scores[test], neighbours[test], spread[test], covered[test] = (
            part.scores, part.num_neighbors, part.std, part.covered
        )
        fold_list.append(Fold(test, used, tuning))
    prediction = Prediction(scores=scores, num_neighbors=neighbours, std=spread, covered=covered)
    return CrossValidation(
        prediction, agreement(prediction, similarities.scores, resamples=resamples), fold_list, tune_thresholds
    )


# -- cross-task ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossTask:
    """A scorer fitted (and maybe tuned) on one data set, scored on another (paper Table 2)."""

    prediction: Prediction
    agreement: Agreement
    thresholds: Thresholds
    tuning: TuningResult | None

    def as_dict(self) -> dict[str, Any]:
        tuning = self.tuning.as_dict() if self.tuning else None
        return {**self.agreement.as_dict(), **self.thresholds.as_dict(), "tuning": tuning}


def cross_task(
    scorer: NeighborsScorer,
    train_texts: Sequence[str],
    train_scores: Sequence[float] | np.ndarray,
    test_texts: Sequence[str],
    test_scores: Sequence[float] | np.ndarray,
    *,
    tune_thresholds: bool = False,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    resamples: int = RESAMPLES,
) -> CrossTask:
    """Fit on the training task only (tuning, if asked, sees only it), score the test task."""
    scorer.fit(train_texts, train_scores, tune=tune_thresholds, min_coverage=min_coverage)
    prediction = scorer.predict(test_texts)
    return CrossTask(
        prediction,
        agreement(prediction, test_scores, resamples=resamples),
        Thresholds.of(scorer),
        scorer.tuning_,
    )


# -- training-size curve ---------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """Leave-one-out inside `runs` random subsets of `size` items: mean and sample standard
    deviation over the runs whose rho is defined (`defined` of them) and over all runs for
    coverage."""

    size: int
    runs: int
    defined: int
    spearman_mean: float
    spearman_std: float
    coverage_mean: float
    coverage_std: float
    mse_mean: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def default_sizes(num_items: int, points: int = 8, smallest: int = 10) -> list[int]:
    """Evenly spaced subset sizes from `smallest` up to all items."""
    smallest = min(smallest, num_items)
    return sorted({int(round(size)) for size in np.linspace(smallest, num_items, points)})


def learning_curve(
    similarities: PairwiseSimilarities,
    thresholds: Thresholds,
    *,
    sizes: Sequence[int] | None = None,
    runs: int = 20,
    seed: int = 0,
) -> list[CurvePoint]:
    """The paper's Figure 4: for each size n, draw `runs` random subsets of n items and score
    each item of a subset from the other n - 1 (a sub-matrix of the one pass)."""
    num_items = len(similarities)
    sizes = default_sizes(num_items) if sizes is None else list(sizes)
    if runs < 1:
        raise ValueError(f"runs must be at least 1, not {runs}")
    for size in sizes:
        if not 2 <= size <= num_items:
            raise ValueError(f"subset size {size} must be between 2 and the number of items ({num_items})")
    rng = np.random.default_rng(seed)
    points = []
    for size in sizes:
        results = []
        for _ in range(runs):
            subset = np.sort(rng.choice(num_items, size=size, replace=False))
            prediction = similarities.leave_one_out(subset, thresholds)
            results.append(agreement(prediction, similarities.scores[subset], resamples=0))
        rhos = np.array([result.spearman for result in results])
        rhos = rhos[np.isfinite(rhos)]
        coverage = np.array([result.coverage for result in results])
        mses = np.array([result.mse for result in results])
        points.append(
            CurvePoint(
                size=size,
                runs=runs,
                defined=int(rhos.size),
                spearman_mean=float(rhos.mean()) if rhos.size else NAN,
                spearman_std=_sample_std(rhos),
                coverage_mean=float(coverage.mean()),
                coverage_std=_sample_std(coverage),
                mse_mean=float(np.nanmean(mses)) if np.isfinite(mses).any() else NAN,
            )
        )
    return points


def _sample_std(values: np.ndarray) -> float:
    """Sample standard deviation; exactly 0 for equal values (shifting by the first value keeps
    the mean's rounding out of it)."""
    return float(np.std(values - values[0], ddof=1)) if values.size > 1 else NAN


# -- threshold sweeps -------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """Leave-one-out agreement with one threshold set to `value`, the others as given."""

    parameter: Parameter
    value: float
    thresholds: Thresholds
    agreement: Agreement

    def as_dict(self) -> dict[str, Any]:
        return {
            "parameter": self.parameter, "value": self.value, **self.thresholds.as_dict(), **self.agreement.as_dict()
        }


def default_sweep_values(
    similarities: PairwiseSimilarities, thresholds: Thresholds, parameter: Parameter
) -> list[float]:
    """a: 1..40; b: 0.02..1 by 0.02; tau: 41 even steps from the median to the 99.9th
    percentile of the similarities between distinct items, plus the given tau."""
    if parameter == "a":
        return [float(a) for a in range(1, 41)]
    if parameter == "b":
        return [round(0.02 * step, 2) for step in range(1, 51)]
    values = similarities.off_diagonal(np.arange(len(similarities)))
    low, high = np.quantile(values, [0.5, 0.999]) if values.size else (0.0, 1.0)
    return sorted({*np.linspace(low, high, 41).tolist(), thresholds.tau})


def sweep(
    similarities: PairwiseSimilarities,
    thresholds: Thresholds,
    parameter: Parameter,
    values: Sequence[float] | None = None,
    *,
    resamples: int = RESAMPLES,
) -> list[SweepPoint]:
    """The paper's Figures 2 and 3: leave-one-out rho and coverage as `parameter` (tau, a or b)
    varies and the other two stay at `thresholds`. a and b reuse one set of neighbour
    statistics; each tau needs its own thresholding of the same similarity pass."""
    if parameter not in PARAMETERS:
        raise ValueError(f"parameter must be one of {', '.join(PARAMETERS)}, not {parameter!r}")
    values = default_sweep_values(similarities, thresholds, parameter) if values is None else list(values)
    items = np.arange(len(similarities))
    shared = None if parameter == "tau" else similarities.stats(items, items, thresholds.tau)
    points = []
    for value in values:
        if parameter == "tau":
            setting = replace(thresholds, tau=float(value))
            prediction = similarities.leave_one_out(items, setting)
        else:
            if parameter == "a":
                if value != int(value) or value < 1:
                    raise ValueError(f"a must be a whole number >= 1, not {value}")
                setting = replace(thresholds, min_neighbors=int(value))
            else:
                if not 0 < value <= 1:
                    raise ValueError(f"b must be in (0, 1], not {value}")
                setting = replace(thresholds, max_fraction=float(value))
            prediction = similarities.estimate(shared, items, items.size - 1, setting)
        result = agreement(prediction, similarities.scores, resamples=resamples)
        points.append(SweepPoint(parameter, float(value), setting, result))
    return points
