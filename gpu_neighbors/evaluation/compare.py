"""Kernel comparison: leave-one-out for several kernels on one data set (the paper's Table 1)."""
from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_neighbors.evaluation.agreement import Agreement, agreement, human_agreement
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.parts import kernel_part
from gpu_neighbors.evaluation.tables import markdown_table


@dataclass(frozen=True)
class ComparisonRow:
    """One line of the table: a kernel at its tau, or a human reference row (tau and seconds NaN)."""

    name: str
    tau: float
    agreement: Agreement
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.name, "tau": self.tau, "seconds": self.seconds, **self.agreement.as_dict()}


def compare_kernels(
    texts: Sequence[str],
    scores: Sequence[float] | np.ndarray,
    kernels: Sequence[str],
    *,
    taus: Mapping[str, float] | None = None,
    kernel_options: Mapping[str, Mapping[str, Any]] | None = None,
    judgments: Sequence[Mapping[str, Any]] | None = None,
    min_neighbors: int | None = None,
    max_fraction: float | None = None,
    tokenizer: str = "whitespace",
    lowercase: bool = False,
    **run: Any,
) -> list[ComparisonRow]:
    """Leave-one-out agreement of each kernel at its default tau (or `taus[kernel]`), timed from
    fit to estimates; with per-annotator `judgments` (records holding `score` and `judgments`),
    the paper's "Human (best)" and "Human (average)" rows come first."""
    taus = dict(taus or {})
    unknown = set(taus) - set(kernels)
    if unknown:
        raise ValueError(f"--tau given for kernels not compared: {', '.join(sorted(unknown))}")
    rows = []
    if judgments is not None:
        rows += [ComparisonRow(name, math.nan, result, math.nan) for name, result in human_agreement(judgments).items()]
    for kernel in kernels:
        scorer = NeighborsScorer(
            kernel=kernel_part(kernel, tokenizer=tokenizer, lowercase=lowercase,
                               **(kernel_options or {}).get(kernel, {})),
            # the paper's Table 1: its settings, never tuned on all items
            estimator=Threshold(tau=taus.get(kernel), min_neighbors=min_neighbors, max_fraction=max_fraction,
                                tuning="never"),
            **run,
        )
        start = time.perf_counter()
        prediction = scorer.fit(texts, scores).leave_one_out()
        seconds = time.perf_counter() - start
        rows.append(ComparisonRow(kernel, scorer.tau_, agreement(prediction, scores), seconds))
    return rows


COLUMNS = ("model", "tau", "mse", "spearman", "spearman_low", "spearman_high", "spearman_p", "coverage", "n", "seconds")


def comparison_table(rows: Sequence[ComparisonRow], extra: Sequence[Mapping[str, Any]] = ()) -> str:
    """The rows (and `extra` rows as dicts: baselines) as a markdown table (rho with its
    bootstrap 95% interval and p-value)."""
    return markdown_table([row.as_dict() for row in rows] + [dict(row) for row in extra], COLUMNS)
