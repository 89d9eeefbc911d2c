"""The paper's evaluation protocols, on one all-pairs similarity pass.

Every protocol except cross-task works on one all-pairs similarity pass (`pairwise.py`):
leave-one-out and k-fold cross-validation (optionally with thresholds tuned inside each training
fold, never seeing the test items), learning curves over random subsets, and sweeps of tau, a
and b. Every Spearman's rho comes with its p-value and a bootstrap 95% interval.

Where the fitted scorer's estimate takes fluency in (`SplitFluency`), each protocol stacks the
out-of-sample neighbour estimates of the items it scores with their fluency, as `fit` does on
its training set: the stacked model's exact leave-one-out, so no item's estimate saw its score.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.core.correlation import RESAMPLES
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.evaluation.agreement import NAN, Agreement, agreement
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.core.nested import Progress, nested_topk
from gpu_neighbors.core.tuning import DEFAULT_MIN_COVERAGE, TuningGrid, TuningResult, tune
from gpu_neighbors.estimators.stacking import stacked_leave_one_out

Parameter = Literal["tau", "a", "b"]
PARAMETERS: tuple[Parameter, ...] = ("tau", "a", "b")


def leave_one_out(
    scorer: NeighborsScorer, texts: Sequence[str], scores: Sequence[float] | np.ndarray
) -> tuple[Prediction, Agreement]:
    """The paper's protocol: every text scored by all the others (one similarity pass)."""
    prediction = scorer.fit(texts, scores).leave_one_out()
    return prediction, agreement(prediction, scores)


@dataclass(frozen=True)
class SplitFluency:
    """Fluency as a fitted scorer's estimate takes it in, for protocols on its one pass:
    every item's stacking features and the score range the stacked estimate is clipped to."""

    features: np.ndarray  # [items, k], `NeighborsScorer.training_fluency`
    bounds: tuple[float, float] | None

    @classmethod
    def of(cls, scorer: NeighborsScorer) -> SplitFluency | None:
        """The scorer's, where fluency joins its estimate; None elsewhere (protocols then score
        with the neighbour estimate alone, as the scorer does)."""
        features = scorer.training_fluency()
        return None if features is None else cls(features, scorer.score_range)

    def stacked(self, prediction: Prediction, items: np.ndarray, truth: np.ndarray) -> Prediction:
        """`prediction` of `items` (out-of-sample neighbour estimates, their true scores `truth`)
        stacked with their fluency: each item's estimate by the stacked model fitted without it.
        Too few covered items to fit it: the neighbour estimates as they are."""
        estimates = np.where(prediction.covered, prediction.scores, NAN)
        stacked = stacked_leave_one_out(estimates, self.features[items], truth, self.bounds)
        if stacked is None:
            return prediction
        return replace(prediction, scores=np.where(prediction.covered, stacked[1], prediction.scores))


def _stacked(prediction: Prediction, fluency: SplitFluency | None, items: np.ndarray,
             similarities: PairwiseSimilarities) -> Prediction:
    return prediction if fluency is None else fluency.stacked(prediction, items, similarities.scores[items])


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
    progress: Progress | None = None,
    fluency: SplitFluency | None = None,
) -> CrossValidation:
    """Score each fold's test items from the other folds. With `tune_thresholds`, tau/a/b are
    chosen by inner leave-one-out on each training fold alone (`thresholds.tau` joins the tau
    grid; `thresholds.estimator` says which estimator is tuned, `grid` its p and k); otherwise
    `thresholds` are used throughout. `folds=None` is leave-one-out. `progress` is told how
    many folds each step finished. `fluency`: the out-of-fold estimates stacked with it."""
    num_items = len(similarities)
    everything = np.arange(num_items)
    if folds is None and not tune_thresholds:
        # Identical to the scorer's own leave-one-out (diagonal masked), in one step.
        prediction = _stacked(similarities.leave_one_out(everything, thresholds), fluency, everything, similarities)
        fold_list = [Fold(everything, thresholds, None)]
        return CrossValidation(
            prediction, agreement(prediction, similarities.scores, resamples=resamples), fold_list, False
        )
    if (folds is None or folds == num_items) and tune_thresholds and thresholds.estimator == "topk":
        # Every fold's tuning from one ranking of the whole set (`core.nested`): the same choices.
        nested = nested_topk(similarities, thresholds, grid or TuningGrid(), min_coverage, progress)
        fold_list = [Fold(np.array([item]), tuning.thresholds, tuning) for item, tuning in enumerate(nested.tunings)]
        prediction = _stacked(nested.prediction, fluency, everything, similarities)
        return CrossValidation(prediction, agreement(prediction, similarities.scores, resamples=resamples),
                               fold_list, True)
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
            tuning = tune(similarities, train, grid=grid, min_coverage=min_coverage, default_tau=thresholds.tau,
                          estimator=thresholds.estimator, base=thresholds)
            used = tuning.thresholds
        part = similarities.predict(test, train, used)
        scores[test], neighbours[test], spread[test], covered[test] = (
            part.scores, part.num_neighbors, part.std, part.covered
        )
        fold_list.append(Fold(test, used, tuning))
        if progress is not None:
            progress(1)
    prediction = _stacked(Prediction(scores=scores, num_neighbors=neighbours, std=spread, covered=covered), fluency,
                          everything, similarities)
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


def warn_training_texts(train_texts: Sequence[str], texts: Sequence[str], what: str, advice: str) -> None:
    """Measured texts (`what`: test texts, held-out texts) that are also training texts find
    themselves as their nearest neighbours, which flatters what is measured on them: warned
    about, with `advice`."""
    training = set(train_texts)
    shared = sum(text in training for text in texts)
    if shared:
        warn(f"{shared} of the {len(texts)} {what} are also training texts: each finds itself as its most "
             f"similar neighbour, which flatters coverage and agreement; {advice}")


def cross_task(
    scorer: NeighborsScorer,
    train_texts: Sequence[str],
    train_scores: Sequence[float] | np.ndarray,
    test_texts: Sequence[str],
    test_scores: Sequence[float] | np.ndarray,
    *,
    tune_thresholds: bool | None = None,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    resamples: int = RESAMPLES,
) -> CrossTask:
    """Fit on the training task only (tuning, as asked or as the scorer's `thresholds` say,
    sees only it), score the test task. Test texts that are also training texts find
    themselves as their nearest neighbours: warned about, since they flatter the agreement."""
    warn_training_texts(train_texts, test_texts, "test texts",
                        "to measure one data set use evaluate (leave-one-out) or crossval")
    scorer.fit(train_texts, train_scores, tune=tune_thresholds, min_coverage=min_coverage)
    prediction = scorer.predict(test_texts)
    return CrossTask(
        prediction,
        agreement(prediction, test_scores, resamples=resamples),
        scorer.thresholds_,
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
    fluency: SplitFluency | None = None,
) -> list[CurvePoint]:
    """The paper's Figure 4: for each size n, draw `runs` random subsets of n items and score
    each item of a subset from the other n - 1 (a sub-matrix of the one pass; `fluency`: the
    estimates stacked with it inside the subset)."""
    num_items = len(similarities)
    sizes = default_sizes(num_items) if sizes is None else list(sizes)
    if runs < 1:
        raise ValueError(f"runs must be at least 1, not {runs}")
    for size in sizes:
        if not 2 <= size <= num_items:
            raise ValueError(f"subset size {size} must be between 2 and the number of items ({num_items})")
    rng = np.random.default_rng(seed)
    points = []
    done: dict[bytes, Agreement] = {}  # a subset drawn again (every one of the whole set) is not run again
    for size in sizes:
        results = []
        for _ in range(runs):
            subset = np.sort(rng.choice(num_items, size=size, replace=False))
            if subset.tobytes() not in done:
                prediction = _stacked(similarities.leave_one_out(subset, thresholds), fluency, subset, similarities)
                done[subset.tobytes()] = agreement(prediction, similarities.scores[subset], resamples=0)
            results.append(done[subset.tobytes()])
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
    fluency: SplitFluency | None = None,
) -> list[SweepPoint]:
    """The paper's Figures 2 and 3: leave-one-out rho and coverage as `parameter` (tau, a or b)
    varies and the other two stay at `thresholds`. a and b reuse one set of neighbour
    statistics; each tau needs its own thresholding of the same similarity pass. `fluency`:
    each setting's estimates stacked with it."""
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
            assert shared is not None  # computed above for every a and b sweep
            prediction = similarities.estimate(shared, items, items.size - 1, setting)
        prediction = _stacked(prediction, fluency, items, similarities)
        result = agreement(prediction, similarities.scores, resamples=resamples)
        points.append(SweepPoint(parameter, float(value), setting, result))
    return points
