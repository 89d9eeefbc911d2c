"""The perturbation checklist: does a fitted scorer rate degenerate copies of good texts lower?

For held-out texts (good ones: `top_rated` picks them), each perturbation of
`text.perturbations` makes a copy of every text; the scorer estimates originals and copies in
one pass. Per perturbation the checklist gives the copies' mean estimate and coverage, the drop
from the originals' mean with a seeded 95% bootstrap interval (the inputs resampled together,
each mean over the texts it covers: `significance.paired_tests`), and whether the drop reaches
issue 35's target: half the gap between the originals' mean and the training set's
lowest-decile mean score, the score the worst real outputs get. A metric that cannot tell word
salad from a good text fails its row.

The texts are put in a canonical order (sorted) before resampling, so the result does not
depend on the order they came in.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.core.outside import lowest_decile_mean
from gpu_neighbors.evaluation.protocols import fold_indices
from gpu_neighbors.evaluation.significance import RESAMPLES, SEED, interval, paired_tests
from gpu_neighbors.evaluation.tables import fixed, markdown_table
from gpu_neighbors.text.perturbations import PERTURBATIONS, WordPool, perturb

HELD_OUT_FOLDS = 5  # `held_out_split` holds out a fifth of a data set
TOP_QUANTILE = 0.5  # held-out texts rated at or above the training scores' median


class Estimator(Protocol):
    """What the checklist needs of a scorer: estimates for texts and its training scores."""

    train_scores_: np.ndarray

    def predict(self, candidates: Sequence[str]) -> Prediction: ...


def top_rated(scores: Sequence[float] | np.ndarray, train_scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """Indices of the held-out `scores` at or above the median of `train_scores`: the better
    half, whose degenerate copies should score lower."""
    cut = float(np.quantile(np.asarray(train_scores, dtype=np.float64), TOP_QUANTILE))
    return np.flatnonzero(np.asarray(scores, dtype=np.float64) >= cut)


def held_out_split(num_items: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(training, held-out) indices: a seeded fifth held out (the first of `fold_indices`'
    five folds), the rest to fit on."""
    if num_items < HELD_OUT_FOLDS:
        raise ValueError(f"the checklist holds out a fifth of the data: it needs at least {HELD_OUT_FOLDS} "
                         f"scored texts, not {num_items}")
    held = fold_indices(num_items, HELD_OUT_FOLDS, seed)[0]
    return np.setdiff1d(np.arange(num_items), held), held


@dataclass(frozen=True)
class PerturbationRow:
    """One perturbation: the copies' mean estimate and coverage; drop = originals' mean - this
    mean, with its 95% bootstrap interval [drop_low, drop_high]; passed = drop >= needed."""

    perturbation: str
    mean: float
    coverage: float
    drop: float
    drop_low: float
    drop_high: float
    passed: bool


@dataclass(frozen=True)
class Checklist:
    """The checklist of one scorer on one set of held-out texts."""

    texts: int
    original_mean: float
    original_low: float
    original_high: float
    original_coverage: float
    rated_mean: float  # the held-out texts' own mean score; NaN where none was given
    decile_mean: float
    needed: float  # the target drop: (original_mean - decile_mean) / 2
    rows: tuple[PerturbationRow, ...]
    seed: int
    resamples: int

    @property
    def passed(self) -> bool:
        return all(row.passed for row in self.rows)

    def as_dict(self) -> dict[str, Any]:
        summary = {key: value for key, value in asdict(self).items() if key != "rows"}
        return {**summary, "passed": self.passed, "rows": [asdict(row) for row in self.rows]}

    def table_rows(self) -> list[dict[str, Any]]:
        """The originals, then one row per perturbation, as the table shows them."""
        rows = [{"copies": "original", "mean": self.original_mean, "coverage": self.original_coverage,
                 "drop": None, "drop 95% CI": f"(mean {fixed(self.original_low)} to {fixed(self.original_high)})",
                 "pass": None}]
        for row in self.rows:
            rows.append({"copies": row.perturbation, "mean": row.mean, "coverage": row.coverage, "drop": fixed(row.drop),
                         "drop 95% CI": f"{fixed(row.drop_low)} to {fixed(row.drop_high)}", "pass": row.passed})
        return rows

    def summary(self) -> str:
        rated = "" if math.isnan(self.rated_mean) else f" (rated {self.rated_mean:.3f} on average)"
        return (f"{self.texts} held-out texts{rated}; training lowest-decile mean {self.decile_mean:.3f}; "
                f"needed drop {self.needed:.3f} (half the gap from the originals' mean); "
                f"{sum(row.passed for row in self.rows)} of {len(self.rows)} perturbations pass; "
                f"copies seeded {self.seed}, {self.resamples} bootstrap resamples")

    def table(self) -> str:
        return f"{self.summary()}\n\n{markdown_table(self.table_rows(), digits=3)}"


def run_checklist(
    scorer: Estimator,
    texts: Sequence[str],
    *,
    vocabulary: WordPool | Iterable[str],
    scores: Sequence[float] | np.ndarray | None = None,
    perturbations: Sequence[str] | None = None,
    seed: int = 0,
    resamples: int = RESAMPLES,
    bootstrap_seed: int = SEED,
) -> Checklist:
    """The checklist of a fitted `scorer` on held-out `texts` (with their `scores`, optionally:
    only their mean is reported). `vocabulary`: the words random-word copies draw from, e.g.
    `WordPool.from_texts(training_texts)`; `perturbations`: names (default all of them)."""
    names = list(PERTURBATIONS) if perturbations is None else list(perturbations)
    if not texts:
        raise ValueError("the checklist needs at least one held-out text")
    if scores is not None and len(scores) != len(texts):
        raise ValueError(f"{len(scores)} scores for {len(texts)} held-out texts")
    ordered = sorted(texts)
    pool = vocabulary if isinstance(vocabulary, WordPool) else WordPool.of(vocabulary)
    batches = [ordered, *(perturb(ordered, name, seed=seed, vocabulary=pool) for name in names)]
    estimates = scorer.predict([text for batch in batches for text in batch]).scores
    values = estimates.reshape(len(batches), len(ordered)).T  # [texts, originals + copies]
    tests = paired_tests(values, [], resamples=resamples, trials=0, seed=bootstrap_seed)
    coverage = np.isfinite(values).mean(axis=0)
    decile = lowest_decile_mean(scorer.train_scores_)
    original = float(tests.means[0])
    needed = (original - decile) / 2
    rows = []
    for j, name in enumerate(names, start=1):
        drop = original - float(tests.means[j])
        low, high = interval(tests.resampled[:, 0] - tests.resampled[:, j])
        rows.append(PerturbationRow(name, float(tests.means[j]), float(coverage[j]), drop, low, high,
                                    bool(drop >= needed)))
    rated = float(np.mean(scores)) if scores is not None else float("nan")
    return Checklist(len(ordered), original, float(tests.lows[0]), float(tests.highs[0]), float(coverage[0]),
                     rated, decile, needed, tuple(rows), seed, resamples)


def held_out_checklist(
    scorer: Estimator,
    train_texts: Sequence[str],
    held_texts: Sequence[str],
    held_scores: Sequence[float] | np.ndarray,
    *,
    seed: int = 0,
    resamples: int = RESAMPLES,
) -> Checklist:
    """The checklist of a `scorer` fitted on `train_texts`, on the held-out texts rated at or
    above the training median (`top_rated`), random words drawn from the training texts."""
    chosen = top_rated(held_scores, scorer.train_scores_)
    if chosen.size == 0:
        raise ValueError(f"none of the {len(held_texts)} held-out texts is rated at or above the training "
                         "median: the checklist needs good texts to perturb")
    return run_checklist(scorer, [held_texts[i] for i in chosen], scores=np.asarray(held_scores)[chosen],
                         vocabulary=WordPool.from_texts(train_texts), seed=seed, resamples=resamples)
