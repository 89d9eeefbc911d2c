"""Every exp, log and root of BLEU as tables made on the host and gathered on the device.

BLEU is a product of factors that each depend on small integers: the brevity penalty on the two
lengths, a precision p_n^w on a clipped count and a total. So each factor is tabulated once on the
host (by `core.portable`, the same bits on every machine) over the integers a batch can reach, and
the device only gathers them by integer index and multiplies them in a fixed order. IEEE 754
rounds a product the same way on every device, so a tile is the same bits on a GPU as on the CPU,
by construction rather than by the luck of two math libraries agreeing.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch

from gpu_neighbors.core import portable

SMOOTHINGS = ("none", "epsilon", "add1", "exp")
EPSILON = 0.1  # NLTK's SmoothingFunction default epsilon for method1
# BLEU*'s numerators of an order with no match, by smoothing (orders 2, 3, 4). For `exp` the k-th
# order with no match, counted from order 2, gets 2^-k; a pair sharing order n has no match only
# above n, so its last unmatched order is k = 5 - n: see `star_order_factors`.
UNMATCHED_NUMERATORS = {
    "none": (1.0, 1.0, 1.0),
    "epsilon": (EPSILON, EPSILON, EPSILON),
    "add1": (1.0, 1.0, 1.0),
    "exp": (1 / 8, 1 / 4, 1 / 2),
}


TABLE_STEP = 256  # tables for padded widths are sized in multiples of this


def table_size(size: int) -> int:
    """`size` rounded up to a multiple of TABLE_STEP: token-id batches of similar padded widths
    share one table, so a training loop whose widths vary keeps a few tables, not one per width."""
    return -(-size // TABLE_STEP) * TABLE_STEP


def check_smoothing(smoothing: str) -> str:
    if smoothing not in SMOOTHINGS:
        raise ValueError(f"smoothing must be one of {', '.join(SMOOTHINGS)}, not {smoothing!r}")
    return smoothing


def brevity(candidate_lengths: np.ndarray, reference_lengths: np.ndarray) -> np.ndarray:
    """NLTK's brevity penalty of (candidate, reference) lengths, elementwise with numpy
    broadcasting: 1 where the candidate is longer, exp(1 - r/c) where not, 0 for an empty one."""
    c = np.asarray(candidate_lengths, dtype=np.float64)
    r = np.asarray(reference_lengths, dtype=np.float64)
    exponent = np.minimum(1.0 - r / np.maximum(c, 1.0), 0.0)
    return np.where(c > 0, portable.exp(exponent), 0.0)


def star_unigram_only(candidate_lengths: np.ndarray, smoothing: str) -> np.ndarray:
    """BLEU* without its brevity penalty for a pair that shares a word but no bigram, by
    candidate length: (prod_n N_n / d_n)^(1/3) over n = 2, 3, 4, with N_n the unmatched numerator
    and d_n = max(c - n + 1, 1) (+ 1 under add1), summed as logs in order n = 2, 3, 4."""
    c = np.asarray(candidate_lengths, dtype=np.float64)
    add_one = 1.0 if smoothing == "add1" else 0.0
    total = np.zeros_like(c)
    for order, numerator in zip(range(2, 5), UNMATCHED_NUMERATORS[smoothing]):
        total = total + portable.log(numerator / (np.maximum(c - order + 1, 1.0) + add_one))
    return portable.exp(total / 3)


def star_by_length(candidate_lengths: np.ndarray, train_lengths: np.ndarray, smoothing: str) -> np.ndarray:
    """[len(candidate_lengths), len(train_lengths)]: the BLEU* of a pair sharing a word and no
    bigram, which depends on the two lengths alone."""
    c = np.asarray(candidate_lengths)
    return star_unigram_only(c, smoothing)[:, None] * brevity(c[:, None], np.asarray(train_lengths)[None, :])


def star_order_factors(size: int, smoothing: str) -> np.ndarray:
    """[3, size]: what sharing order n = 2, 3, 4 with m_n = 1..size-1 clipped matches multiplies
    a pair's BLEU* by, ((m_n + add) / N_n)^(1/3) (see `kernels.bleu.bleu_star`); an order not
    shared (m_n = 0) multiplies by 1, which leaves every float as it is."""
    add_one = 1.0 if smoothing == "add1" else 0.0
    counts = np.arange(1, max(size, 1), dtype=np.float64)
    shared = [portable.exp(portable.log((counts + add_one) / numerator) / 3)
              for numerator in UNMATCHED_NUMERATORS[smoothing]]
    return np.stack([np.concatenate([np.ones(1), factors]) for factors in shared])


class PrecisionTables:
    """The precision factors p_n^(w_n) of NLTK's BLEU for 1-4 `weights` and a smoothing, for
    counts and totals below `size`, on a device. p^w = m^w / t^w: both powers come from tables,
    the division is the device's one rounding. `product` multiplies the factors of each row in
    order n = 1, 2, ... (the same bits on every device)."""

    def __init__(self, weights: Sequence[float], smoothing: str, size: int, device: torch.device) -> None:
        self.smoothing = check_smoothing(smoothing)
        self.orders = len(weights)
        self.size = max(int(size), 2)
        integers = np.arange(self.size + 1, dtype=np.float64)  # add1 looks up t + 1
        powers = np.stack([portable.power(integers, w) for w in weights])
        if smoothing == "none":  # method0: a zero precision counts as the smallest float
            unmatched = np.stack([portable.power(np.full(1, sys.float_info.min), w) for w in weights])
        elif smoothing == "epsilon":  # method1: EPSILON / t
            unmatched = np.stack([portable.power(np.full(1, EPSILON), w) for w in weights])
        else:  # exp (method3): 1 / (2^k t) for the k-th order with no match; add1 needs none
            k = np.arange(self.orders + 1, dtype=np.float64)
            unmatched = np.stack([portable.power(0.5**k, w) for w in weights])
        self.powers = torch.from_numpy(powers).to(device)
        self.unmatched = torch.from_numpy(unmatched).to(device)

    def product(self, matches: torch.Tensor, totals: torch.Tensor) -> torch.Tensor:
        """prod_n p_n^(w_n) per row (float64) of int64 clipped matches and totals [rows, orders]."""
        zero = matches == 0
        # The k-th order with no match (method3), counted in integers: a float cumsum has no
        # deterministic CUDA kernel, and an integer one is exact anyway.
        nth_zero = torch.cumsum(zero.to(torch.int64), dim=1) if self.smoothing == "exp" else None
        value = None
        for n in range(self.orders):
            m, t = matches[:, n], totals[:, n]
            if self.smoothing == "add1" and n > 0:  # method2: (m + 1) / (t + 1) past unigrams
                m, t = m + 1, t + 1
            power, below = self.powers[n], self.powers[n].index_select(0, t)
            factor = power.index_select(0, m) / below
            if self.smoothing == "none":
                factor = torch.where(zero[:, n], self.unmatched[n, 0], factor)
            elif self.smoothing == "epsilon":
                factor = torch.where(zero[:, n], self.unmatched[n, 0] / below, factor)
            elif self.smoothing == "exp":
                assert nth_zero is not None
                factor = torch.where(zero[:, n], self.unmatched[n].index_select(0, nth_zero[:, n]) / below, factor)
            value = factor if value is None else value * factor
        assert value is not None
        return value


def bleu_of_rows(
    tables: PrecisionTables,
    matches: torch.Tensor,
    totals: torch.Tensor,
    lengths: torch.Tensor,
    brevity_penalty: torch.Tensor,
) -> torch.Tensor:
    """BLEU per row from int64 clipped `matches` and `totals` [rows, orders], candidate
    `lengths` [rows] and each row's brevity penalty [rows] (gathered from a `brevity` table):
    0 where no unigram matches or the candidate is empty, as NLTK has it."""
    value = brevity_penalty * tables.product(matches, totals)
    return torch.where((matches[:, 0] == 0) | (lengths == 0), 0.0, value)
