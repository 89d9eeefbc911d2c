"""The BLEU settings of NLTK and sacrebleu beyond what the device tables (`bleu_tables`) hold:
NLTK's smoothing methods 4-7, a custom epsilon / k / alpha, `auto_reweigh`, several weight tuples
at once (NLTK 3.8's list of BLEU-n), weights above MAX_TABLE_WEIGHT, and sacrebleu's formula
(`effective_order`, floor and add-k smoothing with any value).

These formulas mix counts from several orders, the hypothesis length and (NLTK's methods 5 and 6)
the last hypothesis's own n-grams, so they are not a product of per-order tables: the clipped
counts come from the device as usual, and the formula runs on the host in float64 with
`core.portable`'s exp and log, the same bits on every machine (the one host read makes a CUDA
caller wait; the settings the tables hold keep the path without it).
"""
from __future__ import annotations

import numbers
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from gpu_neighbors.core import portable
from gpu_neighbors.core.validation import check_flag
from gpu_neighbors.kernels.bleu_sets import check_weights
from gpu_neighbors.kernels.bleu_tables import EPSILON, SMOOTHINGS, brevity

# NLTK's SmoothingFunction().methodN: methods 0-3 are the tables' smoothings under NLTK's names.
NLTK_METHODS = {"method0": "none", "method1": "epsilon", "method2": "add1", "method3": "exp"}
GENERAL_SMOOTHINGS = ("method4", "method5", "method6", "method7", "floor", "add-k")
ALL_SMOOTHINGS = (*SMOOTHINGS, *NLTK_METHODS, *GENERAL_SMOOTHINGS)
# The smoothings with a value, and its default: NLTK's epsilon (method1), k (method4, 7) and alpha
# (method6); sacrebleu's floor and add-k values.
SMOOTH_VALUES = {"epsilon": EPSILON, "method4": 5.0, "method6": 5.0, "method7": 5.0, "floor": 0.1, "add-k": 1.0}
SACREBLEU_SMOOTHINGS = ("none", "exp", "floor", "add-k")
# The tables hold p^w as m^w / t^w, finite for every weight up to this and every int64 count
# (16 ln 2^63 = 699 < 709, where float64's exp overflows). NLTK takes weights of any size: larger
# ones take the host formula, exp(w log p) of the ratio itself, as NLTK computes it.
MAX_TABLE_WEIGHT = 16.0
MY_LOG_ZERO = -9999999999.0  # sacrebleu's log of a zero precision


@dataclass(frozen=True)
class BleuSetting:
    """A checked BLEU setting: `weights` one tuple or several (`several`: a list was given, one
    score each), `smoothing` a canonical name, `smooth_value` its value (or None), NLTK's
    `auto_reweigh`, and `sacrebleu` (its formula: `effective_order`, floor or add-k)."""

    weights: tuple[tuple[float, ...], ...]
    several: bool
    smoothing: str
    smooth_value: float | None
    auto_reweigh: bool
    effective_order: bool

    @property
    def sacrebleu(self) -> bool:
        return self.effective_order or self.smoothing in ("floor", "add-k")

    @property
    def on_tables(self) -> bool:
        """Whether the device tables compute it (one weight tuple of weights up to
        MAX_TABLE_WEIGHT, a table smoothing at its default value, NLTK's formula as it is)."""
        return (not self.several and not self.auto_reweigh and not self.sacrebleu and self.smoothing in SMOOTHINGS
                and (self.smoothing != "epsilon" or self.smooth_value == EPSILON)
                and max(self.weights[0]) <= MAX_TABLE_WEIGHT)

    @property
    def orders(self) -> int:
        return max(map(len, self.weights))

    @property
    def counted_orders(self) -> int:
        """Orders to count: NLTK's method 5 (and 7) also reads the hypothesis's 5-gram precision."""
        return max(self.orders, 5) if self.smoothing in ("method5", "method7") else self.orders


def check_setting(weights: Sequence[float] | Sequence[Sequence[float]], smoothing: str,
                  smooth_value: float | None = None, auto_reweigh: bool = False,
                  effective_order: bool = False) -> BleuSetting:
    """The setting, or a one-line error naming the argument. `weights` as NLTK takes them: one
    tuple, list, numpy array or tensor, or several (a list of them, or a 2-D array)."""
    if isinstance(weights, torch.Tensor):
        weights = weights.tolist()
    if isinstance(weights, str) or not isinstance(weights, (Sequence, np.ndarray)):  # else "float has no len()"
        raise TypeError(f"weights must be a sequence of weights, one per n-gram order (or a list of such "
                        f"sequences), not {type(weights).__name__}")
    several = len(weights) > 0 and all(map(_is_weight_tuple, weights))
    groups = cast(Sequence[Sequence[float]], weights) if several else [cast(Sequence[float], weights)]
    tuples = tuple(check_weights(item, most_orders=None, normalised=False) for item in groups)
    if smoothing not in ALL_SMOOTHINGS:
        raise ValueError(f"smoothing must be one of {', '.join(ALL_SMOOTHINGS)}, not {smoothing!r}")
    smoothing = NLTK_METHODS.get(smoothing, smoothing)
    if smooth_value is not None:
        if smoothing not in SMOOTH_VALUES:
            raise ValueError(f"smooth_value: smoothing {smoothing!r} takes no value (those that do: "
                             f"{', '.join(SMOOTH_VALUES)})")
        if isinstance(smooth_value, bool) or not isinstance(smooth_value, numbers.Real) or not smooth_value >= 0:
            raise ValueError(f"smooth_value must be a non-negative number, not {smooth_value!r}")
    value = SMOOTH_VALUES.get(smoothing) if smooth_value is None else float(smooth_value)
    setting = BleuSetting(tuples, several, smoothing, value, check_flag("auto_reweigh", auto_reweigh),
                          check_flag("effective_order", effective_order))
    if setting.sacrebleu:
        if smoothing not in SACREBLEU_SMOOTHINGS:
            raise ValueError(f"smoothing {smoothing!r} is NLTK's; sacrebleu's formula (effective_order, floor, "
                             f"add-k) smooths with {', '.join(SACREBLEU_SMOOTHINGS)}")
        if several or auto_reweigh or len(set(tuples[0])) != 1 or abs(sum(tuples[0]) - 1.0) > 1e-12:
            raise ValueError("sacrebleu's formula (effective_order, floor, add-k) weighs its orders equally: give "
                             f"one tuple of equal weights summing to 1, not {weights!r}"
                             + (" (and no auto_reweigh)" if auto_reweigh else ""))
    if smoothing == "method6" and setting.orders < 3:
        raise ValueError(f"smoothing method6 needs at least 3 orders (NLTK reads the trigram precision), got "
                         f"{setting.orders}")
    return setting


def _is_weight_tuple(item: object) -> bool:
    return (isinstance(item, Sequence) and not isinstance(item, str)) or (isinstance(item, np.ndarray)
                                                                         and item.ndim == 1)


def nltk_bleu(setting: BleuSetting, matches: np.ndarray, denominators: np.ndarray, lengths: np.ndarray,
              reference_lengths: np.ndarray, last_matches: np.ndarray, last_lengths: np.ndarray) -> np.ndarray:
    """NLTK's `corpus_bleu` of each row's statistics: float64 [rows, weight tuples].

    `matches` [rows, counted orders] and `denominators` (sums of max(1, n-grams) per hypothesis)
    [rows, orders], `lengths` and `reference_lengths` [rows]; `last_matches` [rows, counted
    orders] and `last_lengths` [rows]: those of the row's last hypothesis, which methods 5 and 6
    read (a sentence's own)."""
    orders = setting.orders
    m = matches[:, :orders].astype(np.float64)
    d = denominators[:, :orders].astype(np.float64)
    precision = m / d
    zero = matches[:, :orders] == 0
    smoothing, value = setting.smoothing, setting.smooth_value
    assert value is not None or smoothing not in SMOOTH_VALUES
    if smoothing == "none":
        precision = np.where(zero, sys.float_info.min, precision)
    elif smoothing == "epsilon":
        precision = np.where(zero, (0 + value) / d, precision)  # type: ignore[operator]
    elif smoothing == "add1":
        precision[:, 1:] = (m[:, 1:] + 1) / (d[:, 1:] + 1)
    elif smoothing == "exp":
        precision = np.where(zero, 1 / (2.0 ** np.cumsum(zero, axis=1) * d), precision)
    if smoothing in ("method4", "method7"):
        nth = np.cumsum(zero & (lengths[:, None] > 1), axis=1)
        log_length = portable.log(np.maximum(lengths, 1).astype(np.float64))[:, None]
        numerator = 1 / (2.0**nth * value / log_length)  # type: ignore[operator]
        precision = np.where(zero & (lengths[:, None] > 1), numerator / d, precision)
    if smoothing in ("method5", "method7"):
        fifth = last_matches[:, 4] / np.maximum(last_lengths - 4, 1)  # the last hypothesis's 5-gram precision
        following = np.concatenate([precision[:, 1:], fifth[:, None]], axis=1)
        previous = precision[:, 0] + 1
        for n in range(orders):
            precision[:, n] = (previous + precision[:, n] + following[:, n]) / 3
            previous = precision[:, n]
    if smoothing == "method6":
        for n in range(2, orders):
            prior = np.where(precision[:, n - 2] == 0, 0.0,
                             precision[:, n - 1] ** 2 / np.where(precision[:, n - 2] == 0, 1.0, precision[:, n - 2]))
            grams = np.maximum(last_lengths - n, 0).astype(np.float64)  # the last hypothesis's (n+1)-grams
            precision[:, n] = (m[:, n] + value * prior) / (grams + value)
    logs = np.where(precision > 0, portable.log(np.where(precision > 0, precision, 1.0)), 0.0)  # NLTK skips p = 0
    penalty = brevity(lengths, reference_lengths)
    scores = []
    for weights in setting.weights:
        w = np.zeros((len(lengths), orders))
        w[:, : len(weights)] = weights
        if setting.auto_reweigh and weights == (0.25, 0.25, 0.25, 0.25):
            short = (lengths > 0) & (lengths < 4)
            w[short] = np.where(np.arange(orders)[None, :] < lengths[short, None],
                                1 / np.maximum(lengths[short, None], 1), 0.0)
        total = np.zeros(len(lengths))
        with np.errstate(over="ignore"):  # weights past 1e306 (NLTK's fsum overflows): -inf, so 0
            for n in range(orders):  # in order, as math.fsum would not matter at 1e-9
                total = total + w[:, n] * logs[:, n]
        scores.append(penalty * portable.exp(total))
    return np.where((matches[:, 0] == 0)[:, None], 0.0, np.stack(scores, axis=1))


def sacrebleu_bleu(setting: BleuSetting, matches: np.ndarray, totals: np.ndarray, lengths: np.ndarray,
                   reference_lengths: np.ndarray) -> np.ndarray:
    """sacrebleu's `BLEU.compute_bleu` / 100 of each row: float64 [rows, 1]. `totals` are the
    n-gram counts as they are (no floor of 1): an order the hypotheses do not reach ends the
    orders (and, under `effective_order`, the mean)."""
    orders = setting.orders
    correct, total = matches[:, :orders].astype(np.float64), totals[:, :orders].astype(np.float64)
    precision = np.zeros_like(correct)
    effective = np.full(len(lengths), orders)
    going = np.ones(len(lengths), dtype=bool)
    doubling = np.ones(len(lengths))
    value = setting.smooth_value
    for n in range(orders):
        if setting.smoothing == "add-k" and n > 0:
            correct[:, n] += value  # type: ignore[arg-type]
            total[:, n] += value  # type: ignore[arg-type]
        going &= total[:, n] != 0
        if setting.effective_order:
            effective = np.where(going, n + 1, effective)
        denominator = np.where(going, total[:, n], 1.0)
        zero = going & (correct[:, n] == 0)
        if setting.smoothing == "exp":
            doubling = np.where(zero, doubling * 2, doubling)
            precision[:, n] = np.where(zero, 1 / (doubling * denominator), precision[:, n])
        elif setting.smoothing == "floor":
            precision[:, n] = np.where(zero, value / denominator, precision[:, n])
        precision[:, n] = np.where(going & ~zero, correct[:, n] / denominator, precision[:, n])
    logs = np.where(precision > 0, portable.log(np.where(precision > 0, precision, 1.0)), MY_LOG_ZERO)
    used = np.arange(orders)[None, :] < effective[:, None]
    total_log = np.zeros(len(lengths))
    for n in range(orders):
        total_log = total_log + np.where(used[:, n], logs[:, n], 0.0)
    score = brevity(lengths, reference_lengths) * portable.exp(total_log / effective)
    return np.where(matches[:, 0] == 0, 0.0, score)[:, None]
