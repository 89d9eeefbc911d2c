"""Significance of differences between systems whose quality is a mean of per-text values.

The tests are sacrebleu's (mjpost/sacrebleu, `sacrebleu/significance.py`, the code behind
`--paired-bs` and `--paired-ar`), applied to the statistic "mean estimate":

- paired bootstrap resampling (Koehn 2004): one seeded matrix of indices
  `default_rng(seed).choice(n, size=(resamples, n))`, the same for every system; per resample
  each system's mean; the p-value of a pair counts how often the centred resampled absolute
  difference, |d_r| - mean(|d|), exceeds the observed |d|;
- approximate randomization (Riezler and Maxwell 2005): one seeded boolean matrix
  `default_rng(seed).integers(2, size=(trials, n), dtype=bool)`; in each trial the two systems
  swap their values on the inputs where it is True, and the p-value counts how often the
  absolute difference of the two pseudo-systems exceeds the observed one;
- both p-values are (count + 1) / (draws + 1) with a strict ">", and a 95% interval takes the
  sorted resamples at positions n // 40 and n - n // 40 - 1, as sacrebleu's `estimate_ci`.

Differences from sacrebleu, each on purpose: sums are float64 (sacrebleu's bootstrap uses
float32), and the means and differences reported are exactly rounded sums (`exact_mean`), so
they do not depend on the order of the texts: two systems with the same values in another
order have the same mean and a difference of exactly 0; an observed difference of exactly 0 gets p = 1 (sacrebleu's ">" would give the
smallest p, 1 / (draws + 1), to a system compared with itself); and since one system may have
no estimate where another has one, every input is resampled and each pair's means run over the
inputs where both have an estimate, so a resample's mean is a ratio of sums. Where every system
has an estimate on every input this is exactly sacrebleu's procedure (tested against sacrebleu).

Resamples are drawn in chunks of rows (the same numbers as one full draw: `choice` draws row
after row, and the boolean draw is cut at multiples of 32 rows, where numpy's bit buffer is
empty) and multiplied with all systems' columns at once, so 10^5 inputs x 10 systems take
seconds and bounded memory.

Without shared inputs (no pairing), each system's texts are bootstrapped on their own, one
after another in the order given, from one seeded stream, and approximate randomization
becomes its unpaired form, a permutation test: each trial deals the pooled texts of the two
systems at random into groups of the original sizes (reseeded for each pair, as sacrebleu
reseeds for each comparison).
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from gpu_neighbors.core.caller_warnings import beyond_float_is_inf

SEED = 12345  # sacrebleu's default (SACREBLEU_SEED)
RESAMPLES = 1000  # sacrebleu's default for the paired bootstrap
TRIALS = 10000  # sacrebleu's default for approximate randomization
CHUNK_ELEMENTS = 1 << 24  # draws held at once: 128 MiB as float64; far smaller chunks starve the matrix product (32 rows x 10^5 inputs ran 14x slower)
_BIT_ROWS = 32  # boolean draws cut at multiples of 32 rows keep numpy's stream unchanged


def interval(samples: np.ndarray) -> tuple[float, float]:
    """sacrebleu's 95% interval of resampled statistics: the sorted values at n // 40 and
    n - n // 40 - 1 (non-finite resamples, where a resample held no estimate, left out)."""
    values = np.sort(samples[np.isfinite(samples)])
    if values.size == 0:
        return float("nan"), float("nan")
    low = values.size // 40
    return float(values[low]), float(values[values.size - low - 1])


def p_value(null: np.ndarray, observed: float) -> float:
    """(how many null statistics exceed the observed one + 1) / (their number + 1), as
    sacrebleu (and multeval) count; 1 for an observed difference of exactly 0."""
    if not np.isfinite(observed):
        return float("nan")
    if observed == 0:
        return 1.0
    finite = null[np.isfinite(null)]
    return (int(np.count_nonzero(finite > observed)) + 1) / (finite.size + 1)


def bootstrap_p_value(differences: np.ndarray, observed: float) -> float:
    """Paired bootstrap p-value from resampled signed differences: the absolute ones,
    centred on their mean, against the observed absolute difference."""
    absolute = np.abs(differences[np.isfinite(differences)])
    return p_value(absolute - absolute.mean() if absolute.size else absolute, abs(observed))


def _rows_per_chunk(columns: int, multiple: int = 1) -> int:
    rows = max(1, CHUNK_ELEMENTS // max(columns, 1))
    return max(multiple, rows // multiple * multiple)


def bootstrap_counts(n: int, resamples: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Chunks of the resamples as counts [rows, n] (float64): how often each input was drawn;
    together the rows of `rng.choice(n, size=(resamples, n))`."""
    rows = _rows_per_chunk(n)
    for start in range(0, resamples, rows):
        count = min(rows, resamples - start)
        drawn = rng.choice(n, size=(count, n), replace=True)
        drawn += (np.arange(count) * n)[:, None]  # row r counts into its own n bins
        counts = np.bincount(drawn.ravel(), minlength=count * n)
        del drawn
        yield counts.reshape(count, n).astype(np.float64)


def swap_masks(n: int, trials: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Chunks [rows, n] (float64, 1 where the two systems swap) of
    `rng.integers(2, size=(trials, n), dtype=bool)`."""
    rows = _rows_per_chunk(n, _BIT_ROWS)
    for start in range(0, trials, rows):
        count = min(rows, trials - start)
        yield rng.integers(2, size=(count, n), dtype=bool).astype(np.float64)


@dataclass(frozen=True)
class PairTest:
    """One pair of systems: the observed difference of means (first - second), its 95%
    bootstrap interval and both p-values; `compared` counts the texts the means ran over."""

    difference: float
    low: float
    high: float
    p_bootstrap: float
    p_randomization: float
    compared: int


@dataclass(frozen=True)
class Tests:
    """Per system its mean, 95% interval and resampled means [resamples, systems]; per pair
    (in `pairs` order) its test."""

    means: np.ndarray
    lows: np.ndarray
    highs: np.ndarray
    resampled: np.ndarray
    pairs: list[PairTest]


def exact_mean(values: np.ndarray) -> float:
    """The mean of `values` from their sum rounded once (math.fsum): the same bits in any
    order; NaN for none."""
    if not values.size:
        return float("nan")
    try:
        return math.fsum(values.tolist()) / values.size
    except OverflowError:  # the sum leaves the float range: sum the terms scaled by an exact 2^-k
        scale = 2.0 ** -math.ceil(math.log2(values.size))
        return math.fsum((values * scale).tolist()) / values.size / scale


def exact_difference(first: np.ndarray, second: np.ndarray) -> float:
    """mean(first) - mean(second) over paired values, from one exactly rounded sum of both:
    exactly 0 where the two hold the same values in any order; NaN for none."""
    return exact_mean(np.concatenate([first, -second])) * 2 if first.size else float("nan")


def _means(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


@beyond_float_is_inf
def paired_tests(values: np.ndarray, pairs: Sequence[tuple[int, int]], *, resamples: int = RESAMPLES,
                 trials: int = TRIALS, seed: int = SEED) -> Tests:
    """Tests on shared inputs: `values` [inputs, systems], NaN where a system has no estimate
    on an input (inputs in a canonical order: the draws index them)."""
    n, k = values.shape
    covered = ~np.isnan(values)
    zeroed = np.where(covered, values, 0.0)
    p = len(pairs)
    both = np.zeros((n, p))
    gaps = np.zeros((n, p))  # per pair, first - second on the inputs where both have an estimate
    for index, (j, m) in enumerate(pairs):
        shared = covered[:, j] & covered[:, m]
        both[:, index] = shared
        gaps[:, index] = np.where(shared, zeroed[:, j] - zeroed[:, m], 0.0)
    # bootstrap: every system's and every pair's sums and counts from the same counts
    columns = np.concatenate([zeroed, covered.astype(np.float64), gaps, both], axis=1)
    pieces = [counts @ columns for counts in bootstrap_counts(n, resamples, np.random.default_rng(seed))]
    drawn = np.concatenate(pieces) if pieces else np.zeros((0, columns.shape[1]))
    resampled = _means(drawn[:, :k], drawn[:, k:2 * k])
    differences = _means(drawn[:, 2 * k:2 * k + p], drawn[:, 2 * k + p:])
    # approximate randomization: where the mask is True the two systems swap values, so the
    # pseudo-systems differ by (sum of gaps - 2 x the swapped gaps) / compared (sacrebleu's
    # pos_sel @ baseline + neg_sel @ system against the reverse)
    totals, compared = gaps.sum(0), both.sum(0)
    swapped = [mask @ gaps for mask in swap_masks(n, trials, np.random.default_rng(seed))]
    shuffled = np.concatenate(swapped) if swapped else np.zeros((0, p))
    null = np.abs(_means(totals - 2 * shuffled, compared))
    tests = []
    for index, (j, m) in enumerate(pairs):
        shared = both[:, index] > 0
        observed = exact_difference(values[shared, j], values[shared, m])
        low, high = interval(differences[:, index])
        tests.append(PairTest(observed, low, high, bootstrap_p_value(differences[:, index], observed),
                              p_value(null[:, index], abs(observed)), int(compared[index])))
    means = np.array([exact_mean(values[covered[:, j], j]) for j in range(k)])
    bounds = [interval(resampled[:, j]) for j in range(k)]
    return Tests(means, np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds]), resampled, tests)


@beyond_float_is_inf
def unpaired_tests(groups: Sequence[np.ndarray], pairs: Sequence[tuple[int, int]], *,
                   resamples: int = RESAMPLES, trials: int = TRIALS, seed: int = SEED) -> Tests:
    """Tests on systems with texts of their own: `groups` holds each system's estimates (no
    NaN; in a canonical order, e.g. sorted), bootstrapped one system after another from one
    stream; pairs get a permutation test reseeded per pair."""
    rng = np.random.default_rng(seed)
    resampled = np.full((resamples, len(groups)), np.nan)
    for j, group in enumerate(groups):
        if group.size == 0:  # no estimate at all: nothing to resample (its mean is NaN)
            continue
        done = 0
        for counts in bootstrap_counts(group.size, resamples, rng):
            resampled[done:done + len(counts), j] = counts @ group / group.size
            done += len(counts)
    means = np.array([exact_mean(group) for group in groups])
    tests = []
    for j, m in pairs:
        observed = means[j] - means[m]
        if not np.isfinite(observed):
            tests.append(PairTest(float("nan"), float("nan"), float("nan"), float("nan"), float("nan"), 0))
            continue
        differences = resampled[:, j] - resampled[:, m]
        low, high = interval(differences)
        null = _permutation_null(groups[j], groups[m], trials, np.random.default_rng(seed))
        tests.append(PairTest(float(observed), low, high, bootstrap_p_value(differences, observed),
                              p_value(null, abs(float(observed))), groups[j].size + groups[m].size))
    bounds = [interval(resampled[:, j]) for j in range(len(groups))]
    return Tests(means, np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds]), resampled, tests)


def _permutation_null(first: np.ndarray, second: np.ndarray, trials: int, rng: np.random.Generator) -> np.ndarray:
    """|mean of group A - mean of group B| when the pooled texts are dealt at random into
    groups of the two sizes: the texts whose uniform keys are the len(first) smallest of
    `rng.random((trials, pooled))` form A."""
    pooled = np.concatenate([first, second])
    total, size, other = pooled.sum(), first.size, second.size
    null = np.empty(trials)
    rows = _rows_per_chunk(pooled.size)
    for start in range(0, trials, rows):
        count = min(rows, trials - start)
        keys = rng.random((count, pooled.size))
        chosen = np.argpartition(keys, size - 1, axis=1)[:, :size]
        sums = pooled[chosen].sum(axis=1)
        null[start:start + count] = np.abs(sums / size - (total - sums) / other)
    return null
