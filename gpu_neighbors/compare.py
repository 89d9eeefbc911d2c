"""Kernel comparison: leave-one-out for several kernels on one data set (the paper's Table 1)."""
from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .evaluate import Agreement, agreement, human_agreement
from .scorer import NeighborsScorer


@dataclass(frozen=True)
class ComparisonRow:
    """One line of the table: a kernel at its tau, or a human reference row (tau and seconds NaN)."""

    name: str
    tau: float
    agreement: Agreement
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.name, "tau": _none_if_nan(self.tau), "seconds": _none_if_nan(self.seconds),
                **{key: _none_if_nan(value) for key, value in self.agreement.as_dict().items()}}


def compare_kernels(
    texts: Sequence[str],
    scores: Sequence[float] | np.ndarray,
    kernels: Sequence[str],
    *,
    taus: Mapping[str, float] | None = None,
    kernel_options: Mapping[str, Mapping[str, Any]] | None = None,
    judgments: Sequence[Mapping[str, Any]] | None = None,
    **scorer_options: Any,
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
            kernel=kernel,
            tau=taus.get(kernel),
            kernel_options=(kernel_options or {}).get(kernel),
            **scorer_options,
        )
        start = time.perf_counter()
        prediction = scorer.fit(texts, scores).leave_one_out()
        seconds = time.perf_counter() - start
        rows.append(ComparisonRow(kernel, scorer.tau_, agreement(prediction, scores), seconds))
    return rows


def markdown_table(rows: Sequence[ComparisonRow]) -> str:
    lines = [
        "| model | tau | MSE | Spearman rho (95% CI) | p | coverage | n | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        result = row.agreement
        interval = "" if math.isnan(result.spearman_low) else f" ({result.spearman_low:.3f}, {result.spearman_high:.3f})"
        lines.append(
            f"| {row.name} | {_fmt(row.tau, '.2f')} | {_fmt(result.mse, '.4f')} | "
            f"{_fmt(result.spearman, '.3f')}{interval} | {_fmt(result.spearman_p, '.2g')} | "
            f"{_fmt(result.coverage, '.2f')} | {result.n} | {_fmt(row.seconds, '.2f')} |"
        )
    return "\n".join(lines)


def _fmt(value: float, spec: str) -> str:
    return "–" if value is None or math.isnan(value) else format(value, spec)


def _none_if_nan(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value
