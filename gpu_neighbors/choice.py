"""Choosing on the training set what a scorer's parts leave open: `Auto`'s kernel and a
`Combined` kernel's weights, by exact leave-one-out of the scorer's estimator.

The cost is one pass of each kernel over the pairs of a sample of the training set (`sample`
texts of `Auto` or `Combined`), not a fit per kernel: each kernel is fitted on the sample alone
and run over all its pairs, then every candidate (a kernel, or a point of the weight grid) is
scored by the estimator's inner leave-one-out on that sample, tuned as `fit` tunes it (top-k: k
and p; ridge: the penalty by exact leave-one-out error; `core/tuning.py`). The highest Spearman
rho wins; rhos equal to 1e-9 are a tie, won by the first candidate, so a last-bit difference
between machines cannot change the choice. The sample is seeded and taken, and ordered, in the
training set's canonical order (by text checksum, then score): the same texts in the same order
whatever order the training set came in, so the choice is too; and the kernels' tiles are the
same bits in any chunk size, so it does not depend on that either.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.correlation import spearman_rows
from gpu_neighbors.core.neighbours import canonical_order, canonical_sample, text_checksums
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.core.tiling import MatrixReduction, TilePlan, reduce_tiles
from gpu_neighbors.core.validation import MIN_TUNING_TEXTS
from gpu_neighbors.estimators import Estimator
from gpu_neighbors.kernels.combined import weighted_error, weighted_sum
from gpu_neighbors.kernels.parts import Auto, Combined, KernelPart

TIE = 1e-9  # rhos this close are equal
WEIGHT_STEPS = 4  # the weight grid: every split of 1 into quarters among the kernels


@dataclass(frozen=True)
class ChoiceRun:
    """The fit's settings that the choice follows: where tiles run, how they are sized, whether
    and how the estimator is tuned."""

    device: torch.device
    memory_budget: int | None
    chunk_size: int | None
    tune: bool | None
    min_coverage: float

    def chooses(self, num_texts: int) -> bool:
        """Whether to choose at all: from MIN_TUNING_TEXTS texts, as tuning (on fewer, only where
        tuning is asked for; tune=False still chooses, on leave-one-out at untuned settings)."""
        return self.tune is True or num_texts >= MIN_TUNING_TEXTS


@dataclass(frozen=True)
class Sample:
    """The training texts a choice is made on, in canonical order, with their scores."""

    texts: list[str]
    scores: np.ndarray

    @classmethod
    def of(cls, texts: Sequence[str], scores: np.ndarray, size: int | None) -> Sample:
        order = canonical_order(text_checksums(texts), scores)
        if size is not None and order.size > size:
            order = order[np.isin(order, canonical_sample(order, size, seed=0))]
        return cls([texts[index] for index in order], scores[order])


@dataclass(frozen=True)
class KernelPass:
    """A kernel's similarities over all pairs of the sample, and its default threshold."""

    similarities: PairwiseSimilarities
    default_tau: float


def kernel_pass(part: KernelPart, sample: Sample, run: ChoiceRun) -> KernelPass:
    """Kernel `part` fitted on the sample alone and run over all its pairs by the tile loop."""
    kernel = part.build(run.device)
    kernel.fit(sample.texts)
    size = len(sample.texts)
    plan = TilePlan.for_device(run.device, kernel.pair_bytes(), size, run.memory_budget, run.chunk_size)
    matrix = reduce_tiles(kernel.encode_train, kernel.tile, plan.chunks(size), plan.blocks(size),
                          MatrixReduction(size, size))
    similarities = PairwiseSimilarities(matrix, sample.scores, text_checksums(sample.texts), kernel.similarity_error)
    return KernelPass(similarities, float(kernel.default_tau))


def inner_rho(estimator: Estimator, scored: KernelPass, run: ChoiceRun) -> float:
    """rho of the estimator's leave-one-out on the sample, tuned where `fit` would tune it
    there (-inf where undefined)."""
    similarities = scored.similarities
    size = len(similarities)
    base = estimator.start(scored.default_tau, size)
    if estimator.tunes(size) if run.tune is None else run.tune:
        rho = estimator.tune(similarities, base, run.min_coverage).spearman
    else:
        prediction = similarities.leave_one_out(np.arange(size), base)
        estimates = np.where(prediction.covered, prediction.scores, np.nan)
        rho = float(spearman_rows(estimates[None, :], similarities.scores)[0])
    return float(rho) if np.isfinite(rho) else -np.inf


def first_best(rhos: Sequence[float]) -> int:
    """The highest rho's position; a tie (to TIE) goes to the first."""
    values = np.asarray(rhos, dtype=np.float64)
    best = float(values.max())
    return int(np.flatnonzero(values >= best - TIE)[0])


def choose_kernel(auto: Auto, estimator_of: Callable[[KernelPart], Estimator], texts: Sequence[str],
                  scores: np.ndarray, run: ChoiceRun) -> tuple[KernelPart, dict[str, float] | None]:
    """`auto`'s kernel with the best inner rho on the sample, and each kernel's rho (None, and
    the first kernel, where the training set is too small to choose on)."""
    sample = Sample.of(texts, scores, auto.sample)
    if not run.chooses(len(sample.texts)):
        return auto.kernels[0], None
    rhos = [inner_rho(estimator_of(part), kernel_pass(part, sample, run), run) for part in auto.kernels]
    return auto.kernels[first_best(rhos)], dict(zip(_labels(auto.kernels), rhos))


def weight_grid(size: int) -> list[tuple[float, ...]]:
    """Every split of 1 into WEIGHT_STEPS equal steps among `size` kernels: each kernel alone
    first (so a tie keeps one kernel, in the given order), then the mixtures."""
    points = [tuple(float(count) / WEIGHT_STEPS for count in counts)
              for counts in itertools.product(range(WEIGHT_STEPS + 1), repeat=size) if sum(counts) == WEIGHT_STEPS]
    alone = [point for point in points if max(point) == 1.0]
    return sorted(alone, key=lambda point: point.index(1.0)) + sorted(
        (point for point in points if max(point) < 1.0), reverse=True)


def choose_weights(combined: Combined, estimator: Estimator, texts: Sequence[str], scores: np.ndarray,
                   run: ChoiceRun) -> tuple[tuple[float, ...], dict[str, float] | None]:
    """The weights of `combined`'s kernels with the best inner rho on the sample (its similarities
    summed as the combined kernel sums them, so each point is that kernel), and the rho of each
    kernel alone and of the chosen sum; equal weights, and None, where the training set is too
    small to choose on."""
    sample = Sample.of(texts, scores, combined.sample)
    size = len(combined.kernels)
    if not run.chooses(len(sample.texts)):
        return tuple(1.0 / size for _ in range(size)), None
    passes = [kernel_pass(part, sample, run) for part in combined.kernels]
    grid = weight_grid(size)
    rhos = [inner_rho(estimator, _summed(passes, weights), run) for weights in grid]
    best = first_best(rhos)
    return grid[best], {**dict(zip(_labels(combined.kernels), rhos[:size])), "combined": rhos[best]}


def _summed(passes: Sequence[KernelPass], weights: Sequence[float]) -> KernelPass:
    used = [(scored, weight) for scored, weight in zip(passes, weights) if weight > 0]
    first = used[0][0].similarities
    matrix = weighted_sum([scored.similarities.matrix for scored, _ in used], [weight for _, weight in used])
    error = weighted_error([scored.similarities.error for scored, _ in used], [weight for _, weight in used])
    tau = sum(weight * scored.default_tau for scored, weight in used)
    return KernelPass(PairwiseSimilarities(matrix, first.scores, first.checksums, error), tau)


def _labels(parts: Sequence[KernelPart]) -> list[str]:
    """Each part's name, or its repr where two share a name."""
    names = [part.name for part in parts]
    return [name if names.count(name) == 1 else repr(part) for name, part in zip(names, parts)]
