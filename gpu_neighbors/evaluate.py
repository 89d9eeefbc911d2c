"""How well estimates agree with known quality: the paper's metrics and protocols."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from .neighbours import Prediction
from .scorer import NeighborsScorer


@dataclass(frozen=True)
class Agreement:
    """MSE and correlations over the covered items, and the coverage itself."""

    n: int
    mse: float
    spearman: float
    pearson: float
    coverage: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def agreement(prediction: Prediction, truth: Sequence[float] | np.ndarray) -> Agreement:
    """Compare estimates with the true scores on the items that have an estimate (as the paper
    reports MSE and Spearman's rho); NaN where fewer than two items are covered."""
    truth = np.asarray(truth, dtype=np.float64)
    if truth.shape != prediction.scores.shape:
        raise ValueError(f"{len(prediction)} predictions but {truth.size} true scores")
    covered = prediction.covered
    estimated, known = prediction.scores[covered], truth[covered]
    mse = float(np.mean((estimated - known) ** 2)) if covered.any() else float("nan")
    spearman = pearson = float("nan")
    if covered.sum() >= 2 and np.ptp(estimated) > 0 and np.ptp(known) > 0:
        spearman = float(stats.spearmanr(estimated, known).statistic)
        pearson = float(stats.pearsonr(estimated, known).statistic)
    return Agreement(
        n=int(truth.size), mse=mse, spearman=spearman, pearson=pearson, coverage=prediction.coverage
    )


def leave_one_out(
    scorer: NeighborsScorer, texts: Sequence[str], scores: Sequence[float] | np.ndarray
) -> tuple[Prediction, Agreement]:
    """The paper's protocol: every text scored by all the others (one similarity pass)."""
    prediction = scorer.fit(texts, scores).leave_one_out()
    return prediction, agreement(prediction, scores)
