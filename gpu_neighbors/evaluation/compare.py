"""Kernel comparison: leave-one-out for several kernels on one data set (the paper's Table 1)."""
from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_neighbors.evaluation.agreement import Agreement, agreement, human_agreement
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.parts import KernelPart, kernel_part


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
    kernel_options: Mapping[str, Mapping[str, Any]] | None = None,
    tokenizer: str = "whitespace",
    lowercase: bool = False,
    **options: Any,
) -> list[ComparisonRow]:
    """`comparison_rows` of the kernels named, all of them (`kernel_parts` makes their parts)."""
    parts = kernel_parts(kernels, kernel_options=kernel_options, tokenizer=tokenizer, lowercase=lowercase)
    return list(comparison_rows(texts, scores, parts, **options))


def kernel_parts(kernels: Sequence[str], *, kernel_options: Mapping[str, Mapping[str, Any]] | None = None,
                 tokenizer: str = "whitespace", lowercase: bool = False) -> list[KernelPart]:
    """Each kernel's part with its `kernel_options` and the text settings, its models and
    tokenizers checked (`KernelPart.check_available`): a missing one is refused here, before
    any kernel runs."""
    parts = []
    for kernel in kernels:
        part = kernel_part(kernel, tokenizer=tokenizer, lowercase=lowercase, **(kernel_options or {}).get(kernel, {}))
        if not isinstance(part, KernelPart) or part.name == "combined":
            raise ValueError(f"compare takes single kernels, not {kernel!r}")
        part.check_available()
        parts.append(part)
    return parts


def comparison_rows(
    texts: Sequence[str],
    scores: Sequence[float] | np.ndarray,
    parts: Sequence[KernelPart],
    *,
    taus: Mapping[str, float] | None = None,
    judgments: Sequence[Mapping[str, Any]] | None = None,
    min_neighbors: int | None = None,
    max_fraction: float | None = None,
    **run: Any,
) -> Iterator[ComparisonRow]:
    """Leave-one-out agreement of each kernel at its default tau (or `taus[name]`), timed from
    fit to estimates, each row as soon as it is made; with per-annotator `judgments` (records
    holding `score` and `judgments`), the paper's "Human (best)" and "Human (average)" rows
    come first."""
    taus = dict(taus or {})
    unknown = set(taus) - {part.name for part in parts}
    if unknown:
        raise ValueError(f"--tau given for kernels not compared: {', '.join(sorted(unknown))}")
    if judgments is not None:
        for name, result in human_agreement(judgments).items():
            yield ComparisonRow(name, math.nan, result, math.nan)
    for part in parts:
        scorer = NeighborsScorer(
            kernel=part,
            # the paper's Table 1: its settings, never tuned on all items
            estimator=Threshold(tau=taus.get(part.name), min_neighbors=min_neighbors, max_fraction=max_fraction,
                                tuning="never"),
            **run,
        )
        start = time.perf_counter()
        prediction = scorer.fit(texts, scores).leave_one_out()
        seconds = time.perf_counter() - start
        yield ComparisonRow(part.name, scorer.tau_, agreement(prediction, scores), seconds)


COLUMNS = ("model", "tau", "mse", "spearman", "spearman_low", "spearman_high", "spearman_p", "coverage", "n", "seconds")
