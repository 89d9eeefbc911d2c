"""Choosing on the training set what a scorer's parts leave open: `Auto`'s kernel and a
`Combined` kernel's weights, by exact leave-one-out of the scorer's estimator.

The cost is one pass of each kernel over the pairs of a sample of the training set (`sample`
texts of `Auto` or `Combined`), not a fit per kernel: each kernel is fitted on the sample alone
and run over all its pairs, then every candidate (a kernel, or a point of the weight grid) is
scored by the estimator's inner leave-one-out on that sample, tuned as `fit` tunes it (top-k: k
and p; ridge: the penalty by exact leave-one-out error; `core/tuning.py`). The highest Spearman
rho wins; rhos equal to 1e-9 are a tie, won by the first candidate, so a last-bit difference
between machines cannot change the choice. Each leaves its first candidate (`Auto`'s first
kernel, tfidf; a `Combined` kernel's first kernel alone) only where the winner's gain beats the
sample's noise (a seeded paired bootstrap of the two rhos, one-sided p < 0.05): on HUSE's 160-180
training texts every switch of kernel the plain rule made was noise (gains 0.002-0.015, p
0.39-0.45) and lost on the held-out texts; GUG's rouge gained 0.059, p 0.033.
The sample is seeded and taken, and ordered, in the training set's canonical order (by text
checksum, then score): the same texts in the same order whatever order the training set came
in, so the choice is too; and the kernels' tiles are the same bits in any chunk size, so it
does not depend on that either.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.correlation import spearman_rows
from gpu_neighbors.core.neighbours import canonical_order, canonical_sample, text_checksums
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds
from gpu_neighbors.core.tiling import MatrixReduction, TilePlan, reduce_tiles
from gpu_neighbors.core.validation import MIN_TUNING_TEXTS
from gpu_neighbors.estimators import Estimator
from gpu_neighbors.kernels.combined import weighted_error, weighted_sum
from gpu_neighbors.kernels.parts import Auto, Combined, KernelPart

TIE = 1e-9  # rhos this close are equal
# A choice leaves its first candidate only for one whose leave-one-out gain on the sample a
# paired bootstrap puts above zero at this level (one-sided), over this many resamples.
SWITCH_LEVEL = 0.05
SWITCH_RESAMPLES = 1000
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


def inner_fit(estimator: Estimator, scored: KernelPass, run: ChoiceRun) -> tuple[float, Thresholds]:
    """rho of the estimator's leave-one-out on the sample (-inf where undefined), and the
    settings it was made with: tuned where `fit` would tune them there."""
    similarities = scored.similarities
    size = len(similarities)
    base = estimator.start(scored.default_tau, size)
    if estimator.tunes(size) if run.tune is None else run.tune:
        tuned = estimator.tune(similarities, base, run.min_coverage)
        rho, settings = tuned.spearman, tuned.thresholds
    else:
        rho, settings = float(spearman_rows(inner_estimates(scored, base)[None, :], similarities.scores)[0]), base
    return (float(rho) if np.isfinite(rho) else -np.inf), settings


def inner_estimates(scored: KernelPass, settings: Thresholds) -> np.ndarray:
    """Each sample text's leave-one-out estimate at `settings` (NaN where it has none)."""
    prediction = scored.similarities.leave_one_out(np.arange(len(scored.similarities)), settings)
    return np.where(prediction.covered, prediction.scores, np.nan)


def beyond_noise(challenger: tuple[KernelPass, Thresholds], first: tuple[KernelPass, Thresholds],
                 truth: np.ndarray) -> bool:
    """Whether the challenger's leave-one-out rho on the sample (its pass at its settings) beats
    the first candidate's beyond the sample's noise (`switch_p_value` below SWITCH_LEVEL)."""
    return gains_beyond_noise(inner_estimates(*challenger), inner_estimates(*first), truth)


def gains_beyond_noise(challenger: np.ndarray, first: np.ndarray, truth: np.ndarray) -> bool:
    """Whether leave-one-out estimates `challenger` rank `truth` better than `first` beyond the
    noise of these texts (`switch_p_value` below SWITCH_LEVEL): the rule every automatic choice
    follows (a kernel, a combined kernel's weights, fluency in the estimate)."""
    return switch_p_value(challenger, first, truth) < SWITCH_LEVEL


def switch_p_value(challenger: np.ndarray, first: np.ndarray, truth: np.ndarray) -> float:
    """How often the challenger's rho is not above the first kernel's (to TIE) when the sample's
    texts are resampled (paired bootstrap, SWITCH_RESAMPLES resamples, seeded): a one-sided
    p-value of its gain."""
    resamples = np.random.default_rng(0).integers(0, truth.size, size=(SWITCH_RESAMPLES, truth.size))
    gains = spearman_rows(challenger[resamples], truth[resamples]) - spearman_rows(first[resamples], truth[resamples])
    return float(np.mean(~(gains > TIE)))


def first_best(rhos: Sequence[float]) -> int:
    """The highest rho's position; a tie (to TIE) goes to the first."""
    values = np.asarray(rhos, dtype=np.float64)
    best = float(values.max())
    return int(np.flatnonzero(values >= best - TIE)[0])


def choose_kernel(auto: Auto, estimator_of: Callable[[KernelPart], Estimator], texts: Sequence[str],
                  scores: np.ndarray, run: ChoiceRun) -> tuple[KernelPart, dict[str, float] | None]:
    """`auto`'s kernel with the best inner rho on the sample where its gain over the first
    kernel's is beyond noise (`switch_p_value` below SWITCH_LEVEL), else the first; and each
    kernel's rho (None, and the first kernel, where the training set is too small to choose on)."""
    sample = Sample.of(texts, scores, auto.sample)
    if not run.chooses(len(sample.texts)):
        return auto.kernels[0], None
    passes = [kernel_pass(part, sample, run) for part in auto.kernels]
    fits = [inner_fit(estimator_of(part), scored, run) for part, scored in zip(auto.kernels, passes)]
    rhos = [rho for rho, _ in fits]
    best = first_best(rhos)
    if best and np.isfinite(rhos[0]) and not beyond_noise((passes[best], fits[best][1]), (passes[0], fits[0][1]),
                                                          sample.scores):
        best = 0  # the first kernel stays unless the gain beats the sample's noise
    return auto.kernels[best], dict(zip(_labels(auto.kernels), rhos))


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
    summed as the combined kernel sums them, so each point is that kernel) where its gain over
    the first kernel alone is beyond noise, else the first kernel alone; and the rho of each
    kernel alone and of the chosen weights; equal weights, and None, where the training set is
    too small to choose on."""
    sample = Sample.of(texts, scores, combined.sample)
    size = len(combined.kernels)
    if not run.chooses(len(sample.texts)):
        return tuple(1.0 / size for _ in range(size)), None
    passes = [kernel_pass(part, sample, run) for part in combined.kernels]
    grid = weight_grid(size)
    fits = [inner_fit(estimator, _summed(passes, weights), run) for weights in grid]
    rhos = [rho for rho, _ in fits]
    best = first_best(rhos)
    if best and np.isfinite(rhos[0]) and not beyond_noise((_summed(passes, grid[best]), fits[best][1]),
                                                          (_summed(passes, grid[0]), fits[0][1]), sample.scores):
        best = 0  # the first kernel alone (the grid's first point) stays unless the gain beats the noise
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
