"""Whether a text lies outside the training distribution: a conformal outlier test.

Each statistic of a text (how ordinary its words are, `text.typicality`, how similar its nearest
training text is, and a score of the first learned from degenerate copies, `core.discriminant`)
is compared with the same statistic of the calibration texts, each
measured by leave-one-out (the text left out of its own counts and neighbours), so that for a
new text drawn from the training distribution the calibration values and its value are
exchangeable. The conformal p-value of a value v whose atypical side is low is
(1 + #{calibration values <= v}) / (m + 1) (mirrored where high is atypical), which is at
least uniform for such a text (Bates, Candes, Lei, Romano and Sesia, 2023, "Testing for outliers
with conformal p-values"). A statistic a text lacks (NaN: no word, no training text similar at
all) counts as more atypical than every calibration value.

The statistics' p-values become one, for two kinds of evidence: one statistic far out (Bonferroni: k
times the smallest of the p-values of the k statistics that may flag a text alone; a statistic may
be evidence that only adds up, `alone` false) and several a little out (Fisher's combination: the
product of all the p-values, ranked among the calibration texts' own products). Their weighted
union, min(Bonferroni's / w, Fisher's / (1 - w)) capped at 1, is at least uniform whatever the
statistics' dependence (P(union <= t) <= w t + (1 - w) t = t), but that bound is loose: at level
0.05 it flagged 1.6-3.7% of ordinary development texts and missed copies whose words were dropped
(MLQE's checklist 0.018 short). So the union is a statistic of the text in turn, and where the
calibration set is large enough its p-value is the union's conformal rank among the calibration
texts' own unions (`OutsideRule.ranked`): exact, and the dropped copies pass (bench/outside.md).
Each calibration text's values are taken against the other calibration texts (its p-values, its
product's rank and its union's), which errs on the safe side.

Bonferroni's share w is 1/2 where the calibration set is large and grows where it is small: with m
calibration texts the smallest p-value of one statistic is 1 / (m + 1), so one statistic alone
brings the union to k / (m + 1) / w, below the level only for w >= k / ((m + 1) level). The share
is max(1/2, k / (m level)) (m, not m + 1: a margin that no rounding crosses), and from m level <= k
on Bonferroni's test stands alone (w = 1; `OutsideRule.bonferroni_share`): at the defaults (k = 5,
level 0.05) Fisher's combination joins above 100 calibration texts, has half the level from 200
on, and the union is ranked from 220 on (below, a text far out on one statistic would tie with
the calibration texts far out on theirs and rank above the level). Share and ranking are decided
by the calibration set's size and the level, never by the text tested. Fisher's alone flags more
texts of another domain but lets repeated headlines through; k + 1 tests in one Bonferroni union
flag the fewest of another domain: both measured, bench/outside.md. A text is outside when
p <= level; between level and 2 level its estimate and interval move part of the way (linearly in
p) towards those of a flagged text, so the evidence fades in instead of jumping: a text from the
training distribution is touched with probability at most 2 level.

Counts, products and quotients of float64 (correctly rounded everywhere) from sorted arrays:
the same p-values and flags on every device.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_neighbors.core.caller_warnings import beyond_float_is_inf
from gpu_neighbors.core.discriminant import LinearScore
from gpu_neighbors.core.portable import divided



@dataclass(frozen=True)
class OutlierTest:
    """The calibration texts' statistics, each column sorted ascending with NaNs removed, and
    for each column whether its low side is the atypical one."""

    columns: tuple[np.ndarray, ...]
    low_is_atypical: tuple[bool, ...]
    size: int  # calibration texts: m
    products: np.ndarray  # sorted: each calibration text's product of p-values against the others
    smallest: np.ndarray  # beside each product, that text's smallest p-value of the statistics that flag alone
    alone: tuple[bool, ...] | None = None  # which statistics join Bonferroni's test (None: all)
    on: dict[torch.device, tuple[torch.Tensor, ...]] = field(default_factory=dict, compare=False, repr=False)
    unions: dict[tuple[torch.device, float], torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def fit(cls, statistics: np.ndarray, low_is_atypical: Sequence[bool],
            alone: Sequence[bool] | None = None) -> OutlierTest:
        """From float64 [m, statistics] of the calibration texts (NaN: atypical beyond all);
        `alone`: which statistics may flag a text by themselves (None: all)."""
        statistics = np.asarray(statistics, dtype=np.float64)
        if statistics.ndim != 2 or statistics.shape[1] != len(low_is_atypical):
            raise ValueError(f"statistics must be [texts, {len(low_is_atypical)}], got {statistics.shape}")
        columns = tuple(np.sort(column[np.isfinite(column)]) for column in statistics.T)
        lows = tuple(bool(low) for low in low_is_atypical)
        m = statistics.shape[0]
        flags = None if alone is None else tuple(bool(one) for one in alone)
        products, smallest = np.ones(m), np.ones(m)
        for index, (column, low) in enumerate(zip(statistics.T, lows)):  # the order `p_values` multiplies in
            sign = 1.0 if low else -1.0  # the atypical side low either way
            values = sign * column
            finite = np.sort(values[np.isfinite(values)])
            beyond = np.searchsorted(finite, values, side="right") - 1  # the others at or below
            lacking = m - finite.size
            count = np.where(np.isfinite(values), beyond + lacking, lacking - 1)
            p = (1 + count) / (m + 1)
            products = products * p
            if flags is None or flags[index]:
                smallest = np.minimum(smallest, p)
        order = np.argsort(products, kind="stable")
        return cls(columns, lows, m, products[order], smallest[order], flags)

    @property
    def single_tests(self) -> int:
        """How many statistics Bonferroni's test divides the level among (k)."""
        return len(self.columns) if self.alone is None else sum(self.alone)

    def p_values(self, statistics: torch.Tensor, bonferroni_share: float = 0.5, ranked: bool = False) -> torch.Tensor:
        """float64 [texts]: the p-value of each row of float64 `statistics` [texts, columns]
        (any device): its union (`union`; w Bonferroni's share, 1: Bonferroni's alone), `ranked`
        among the calibration texts' own or taken as it is (a bound)."""
        if not 0.0 < bonferroni_share <= 1.0:
            raise ValueError(f"Bonferroni's share must be in (0, 1], not {bonferroni_share!r}")
        product = torch.ones(statistics.shape[0], dtype=torch.float64, device=statistics.device)
        smallest = torch.ones_like(product)
        for column in range(len(self.columns)):
            p = self.p_value_tensor(statistics[:, column].contiguous(), column)
            product = product * p
            if self.alone is None or self.alone[column]:
                smallest = torch.minimum(smallest, p)
        products = self._on(statistics.device)[-1]
        union = self.union(smallest, 1 + torch.searchsorted(products, product, right=True), bonferroni_share)
        if not ranked:
            return union
        rank = torch.searchsorted(self._unions(statistics.device, bonferroni_share), union, right=True)
        return divided((1 + rank).to(torch.float64), self.size + 1)

    def union(self, smallest: torch.Tensor, rank: torch.Tensor, bonferroni_share: float) -> torch.Tensor:
        """The weighted union of Bonferroni's and Fisher's tests, min(1, k `smallest` / w,
        `rank` / (m + 1) / (1 - w)), of texts' smallest p-values of the k statistics that may flag
        alone and their products' `rank` (1 + the calibration products at or below)."""
        k = self.single_tests
        if bonferroni_share == 1.0:
            return torch.clamp(k * smallest, max=1.0)
        combined = divided(rank.to(torch.float64), self.size + 1)
        return torch.clamp(torch.minimum(divided(k * smallest, bonferroni_share),
                                         divided(combined, 1.0 - bonferroni_share)), max=1.0)

    def _unions(self, device: torch.device, bonferroni_share: float) -> torch.Tensor:
        """The calibration texts' unions, sorted, on `device`: each text's against the other
        calibration texts (its product's rank counts itself instead of the 1 a new text adds),
        made on the host once per device and share with the operations a new text's takes."""
        key = (device, bonferroni_share)
        if key not in self.unions:
            products = torch.as_tensor(self.products)
            rank = torch.searchsorted(products, products, right=True)
            union = self.union(torch.as_tensor(self.smallest), rank, bonferroni_share)
            self.unions[key] = torch.sort(union).values.to(device)
        return self.unions[key]

    def _on(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        """The sorted columns, then the sorted products, on `device` (copied once per device, so
        later calls never wait)."""
        if device not in self.on:
            self.on[device] = tuple(torch.as_tensor(values, device=device) for values in (*self.columns, self.products))
        return self.on[device]

    def p_value_tensor(self, values: torch.Tensor, column: int) -> torch.Tensor:
        """float64 p-values of `values` (float64, any device) for statistic `column`."""
        sorted_values = self._on(values.device)[column]
        if self.low_is_atypical[column]:
            beyond = torch.searchsorted(sorted_values, values, right=True)
        else:
            beyond = sorted_values.numel() - torch.searchsorted(sorted_values, values, right=False)
        # calibration texts lacking the statistic (dropped) are beyond every value; a text
        # lacking it ties with them
        lacking = self.size - sorted_values.numel()
        count = torch.where(torch.isfinite(values), beyond + lacking, torch.full_like(beyond, lacking))
        return divided((1 + count).to(torch.float64), self.size + 1)


@beyond_float_is_inf
def lowest_decile_mean(scores: Sequence[float] | np.ndarray) -> float:
    """The mean of the lowest tenth of `scores` (rounded up: at least one): the score the worst
    real outputs get, the negative evidence's and the checklist's reference."""
    ordered = np.sort(np.asarray(scores, dtype=np.float64))
    if ordered.size == 0:
        raise ValueError("no training scores: fit the scorer first")
    return float(np.mean(ordered[: -(-ordered.size // 10)]))


@dataclass(frozen=True)
class OutsideRule:
    """What a scorer does with texts outside its training distribution: `test` flags them at
    `level` (p <= level); a covered estimate of a flagged text becomes `negative_score` (None:
    kept), and its interval the whole `bounds`, the score range (its calibration says nothing
    about texts the training set does not resemble). A text with level < p < 2 level goes the
    share 1 - `weights` of the way there. `degeneracy`: a learned score of the statistics
    (`core.discriminant`), the test's last column, computed from the others."""

    test: OutlierTest
    level: float
    negative_score: float | None
    bounds: tuple[float, float]
    degeneracy: LinearScore | None = None

    @property
    def bonferroni_share(self) -> float:
        """Bonferroni's share w of the level beside Fisher's combination: max(1/2, k / (m
        level)), 1 (Bonferroni's alone) from m level <= k on, so that one statistic far out can
        flag a text by itself at any size (the shipped example's 100 texts: alone)."""
        k, m = self.test.single_tests, self.test.size
        return 1.0 if m * self.level <= k else max(0.5, k / (m * self.level))

    @property
    def ranked(self) -> bool:
        """Whether the union is ranked among the calibration texts' own: where a text beyond
        every calibration value of one statistic still ranks at or below the level. Its union,
        k / (m + 1) / w, is at or below the unions of at most k / w calibration texts (k by one
        statistic each, k (1 - w) / w by their products' rank), so it ranks at most
        (1 + k / w) / (m + 1): ranked from (1 + k / w) <= m level on (m, not m + 1: a margin no
        rounding crosses; at the defaults from 220 calibration texts), the bound below that."""
        k, m = self.test.single_tests, self.test.size
        return 1.0 + k / self.bonferroni_share <= m * self.level

    def p_values(self, statistics: torch.Tensor) -> torch.Tensor:
        """float64 [texts] on the statistics' device, with no host synchronisation: of the
        test's columns, the last one (the degeneracy score) made here where there is one."""
        statistics = statistics.to(torch.float64)
        if self.degeneracy is not None:
            statistics = torch.cat([statistics, self.degeneracy.score(statistics)[:, None]], dim=1)
        return self.test.p_values(statistics, self.bonferroni_share, self.ranked)

    def flags(self, p_values: torch.Tensor) -> torch.Tensor:
        return p_values <= self.level

    def weights(self, p_values: torch.Tensor) -> torch.Tensor:
        """How much of its own estimate and interval a text keeps: 0 where flagged, 1 from
        p >= 2 level on, linear between."""
        return torch.clamp(divided(p_values - self.level, self.level), min=0.0, max=1.0)

    def estimates(self, scores: torch.Tensor, covered: torch.Tensor, p_values: torch.Tensor) -> torch.Tensor:
        if self.negative_score is None:
            return scores
        return _towards(scores, self.negative_score, self.weights(p_values), covered)

    def widen(self, low: torch.Tensor, high: torch.Tensor, p_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The intervals of texts with an estimate, widened towards the whole score range:
        all of it where flagged."""
        weights, defined = self.weights(p_values), torch.isfinite(low)
        return _towards(low, self.bounds[0], weights, defined), _towards(high, self.bounds[1], weights, defined)


def _towards(values: torch.Tensor, target: float, weights: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """target + weights (values - target) where `where` and weights < 1; `values` (the same
    bits) elsewhere."""
    moved = target + weights * (values - target)
    return torch.where(where & (weights < 1), moved, values)
