"""Whether a text lies outside the training distribution: a conformal outlier test.

Each statistic of a text (how ordinary its words are, `text.typicality`, and how similar its
nearest training text is) is compared with the same statistic of the calibration texts, each
measured by leave-one-out (the text left out of its own counts and neighbours), so that for a
new text drawn from the training distribution the calibration values and its value are
exchangeable. The conformal p-value of a value v whose atypical side is low is
(1 + #{calibration values <= v}) / (m + 1) (mirrored where high is atypical), which is at
least uniform for such a text (Bates, Candes, Lei, Romano and Sesia, 2023, "Testing for outliers
with conformal p-values"). A text is outside when some statistic's p-value is at most
level / (number of statistics) (Bonferroni), so a text from the training distribution is flagged
with probability at most `level` whatever the statistics' dependence. A statistic a text lacks
(NaN: no word, no training text similar at all) counts as more atypical than every calibration
value.

Everything here runs on the host in float64 and integers from sorted arrays: the same flags on
every device.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_neighbors.core.caller_warnings import beyond_float_is_inf



@dataclass(frozen=True)
class OutlierTest:
    """The calibration texts' statistics, each column sorted ascending with NaNs removed, and
    for each column whether its low side is the atypical one."""

    columns: tuple[np.ndarray, ...]
    low_is_atypical: tuple[bool, ...]
    size: int  # calibration texts: m
    on: dict[torch.device, tuple[torch.Tensor, ...]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def fit(cls, statistics: np.ndarray, low_is_atypical: Sequence[bool]) -> OutlierTest:
        """From float64 [m, statistics] of the calibration texts (NaN: atypical beyond all)."""
        statistics = np.asarray(statistics, dtype=np.float64)
        if statistics.ndim != 2 or statistics.shape[1] != len(low_is_atypical):
            raise ValueError(f"statistics must be [texts, {len(low_is_atypical)}], got {statistics.shape}")
        columns = tuple(np.sort(column[np.isfinite(column)]) for column in statistics.T)
        return cls(columns, tuple(bool(low) for low in low_is_atypical), statistics.shape[0])

    def p_value_tensor(self, values: torch.Tensor, column: int) -> torch.Tensor:
        """float64 p-values of `values` (float64, any device) for statistic `column`."""
        if values.device not in self.on:  # copied once per device, so later calls never wait
            self.on[values.device] = tuple(torch.as_tensor(values_, device=values.device) for values_ in self.columns)
        sorted_values = self.on[values.device][column]
        if self.low_is_atypical[column]:
            beyond = torch.searchsorted(sorted_values, values, right=True)
        else:
            beyond = sorted_values.numel() - torch.searchsorted(sorted_values, values, right=False)
        # calibration texts lacking the statistic (dropped) are beyond every value; a text
        # lacking it ties with them
        lacking = self.size - sorted_values.numel()
        count = torch.where(torch.isfinite(values), beyond + lacking, torch.full_like(beyond, lacking))
        return (1 + count).to(torch.float64) / (self.size + 1)


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
    `level`; a covered estimate of a flagged text becomes `negative_score` (None: kept), and its
    interval the whole `bounds`, the score range (its calibration says nothing about texts the
    training set does not resemble)."""

    test: OutlierTest
    level: float
    negative_score: float | None
    bounds: tuple[float, float]

    def flags(self, statistics: torch.Tensor) -> torch.Tensor:
        """bool [texts] on the statistics' device, with no host synchronisation: some statistic
        of `statistics` [texts, statistics] has a p-value at most level / statistics."""
        threshold = self.level / len(self.test.columns)
        flagged = torch.zeros(statistics.shape[0], dtype=torch.bool, device=statistics.device)
        for column in range(len(self.test.columns)):
            flagged |= self.test.p_value_tensor(statistics[:, column].to(torch.float64).contiguous(), column) <= threshold
        return flagged

    def estimates(self, scores: torch.Tensor, covered: torch.Tensor, outside: torch.Tensor) -> torch.Tensor:
        if self.negative_score is None:
            return scores
        return torch.where(outside & covered, torch.full_like(scores, self.negative_score), scores)

    def widen(self, low: torch.Tensor, high: torch.Tensor, outside: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The intervals of flagged texts with an estimate become the whole score range."""
        flagged = outside & torch.isfinite(low)
        return (torch.where(flagged, torch.full_like(low, self.bounds[0]), low),
                torch.where(flagged, torch.full_like(high, self.bounds[1]), high))
