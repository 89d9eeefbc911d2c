"""The fluency statistics as columns of the outlier test (`core/outside.py`), within length.

A text's mean token log-probability grows with its length (the model has more context: Spearman
0.37-0.50 with the token count on the development sets), so compared with every calibration text
alike the shortest fifth of ordinary texts was flagged at 9-25% and long broken texts hid among
short real ones. Each column is a statistic's distance from the line fitted on the calibration
texts against log(token count), divided by the spread fitted the same way (the line of
log(|distance| + 1/ROUNDING) on log(token count): a mean of n log-probabilities would spread as
1/sqrt(n) if they were independent; the calibration texts measured slopes of -0.06 to -0.33, not
-0.5, and sqrt(n) flagged the longest fifth of ordinary GUG texts at 13%): a text is compared
with texts of its length. Low is broken.

The lines and the spreads become tables by token count, made once on the host with the portable
log and exp (`core.portable`) and saved with the scorer, so a column is a gather, a subtraction
and a product: the same bits on every device, with no host synchronisation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_neighbors.core.discriminant import solve
from gpu_neighbors.core.portable import exp, log
from gpu_neighbors.fluency.model import MAX_TOKENS
from gpu_neighbors.fluency.part import COUNT_COLUMN, ROUNDING, STATISTIC_COLUMNS
from gpu_neighbors.text.typicality import LOW_IS_ATYPICAL, TEST_ALONE

# The outlier test's columns with fluency: the typicality statistics, the fluency columns (the
# mean log-probability and SLOR; low is broken), the nearest similarity and the degeneracy score.
# The fluency columns add up (Fisher's product) and never flag a text alone: as a sixth single
# test the mean took a sixth of the level from each of the others, and cut-off MLQE translations,
# which the ending statistic flags alone, dropped by 0.225 where 0.276 was needed (0.343 adding
# up; bench/quality.md, issue 51).
FLUENCY_LOW_IS_ATYPICAL = LOW_IS_ATYPICAL + (True,) * STATISTIC_COLUMNS + (True, False)
FLUENCY_ALONE = (TEST_ALONE[: len(LOW_IS_ATYPICAL)] + (False,) * STATISTIC_COLUMNS
                 + TEST_ALONE[len(LOW_IS_ATYPICAL):])


# log(n) for a text of n tokens (index 0: no token), made once with the portable log.
LOG_LENGTH = np.concatenate([[np.nan], log(np.arange(1, MAX_TOKENS + 1, dtype=np.float64))])


def estimate_features(fluency: torch.Tensor) -> torch.Tensor:
    """float64 [rows, 2] of `part.statistics` [rows, 3] (its first two columns): what the
    stacked estimate reads, the mean token log-probability and SLOR (NaN for a text without a
    token). With log(token count) beside them GUG's dev rho rose further (0.51 -> 0.65) but the
    model learned that short learner sentences are the good ones, and cut-off and word-dropped
    copies of good texts then scored as well as their originals (bench/fluency.md): the
    statistics alone, which grow with length, rate them lower."""
    return fluency[:, :STATISTIC_COLUMNS]


@dataclass(frozen=True)
class WithinLength:
    """The columns' tables: `center[c, n]` and `scale[c, n]` for statistic c of a text of n
    tokens (n up to MAX_TOKENS; index 0 unused), float64 [STATISTIC_COLUMNS, MAX_TOKENS + 1]."""

    center: np.ndarray
    scale: np.ndarray
    on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def fit(cls, fluency: np.ndarray) -> WithinLength:
        """From the calibration texts' [texts, 3] `part.statistics`: per statistic, the
        least-squares line of the statistic on log(count) and of its log absolute distance from
        that line on log(count) (flat where the counts do not vary)."""
        counts = fluency[:, COUNT_COLUMN]
        centers, scales = [], []
        for column in range(STATISTIC_COLUMNS):
            usable = np.isfinite(fluency[:, column]) & (counts > 0)
            x, y = log(counts[usable]), fluency[usable, column]
            center = line(x, y, float(np.median(y)) if y.size else 0.0)
            spread = line(x, log(np.abs(y - (center[0] + center[1] * x)) + 1.0 / ROUNDING), 0.0)
            centers.append(center[0] + center[1] * LOG_LENGTH)
            scales.append(np.concatenate([[np.nan], exp(-(spread[0] + spread[1] * LOG_LENGTH[1:]))]))
        return cls(np.stack(centers), np.stack(scales))

    def columns(self, fluency: torch.Tensor) -> torch.Tensor:
        """float64 [rows, STATISTIC_COLUMNS] of [rows, 3] statistics, on their device (NaN:
        no token)."""
        if fluency.device not in self.on:
            self.on[fluency.device] = (torch.as_tensor(self.center, device=fluency.device),
                                       torch.as_tensor(self.scale, device=fluency.device))
        center, scale = self.on[fluency.device]
        counts = fluency[:, COUNT_COLUMN].nan_to_num(0.0).clamp(0, MAX_TOKENS).to(torch.int64)
        return (fluency[:, :STATISTIC_COLUMNS] - center[:, counts].T) * scale[:, counts].T


def line(x: np.ndarray, y: np.ndarray, flat: float) -> tuple[float, float]:
    """(intercept, slope) of y's least-squares line on x, in exact sums (`math.fsum`): the
    same on every host; (flat, 0) where x does not vary or there are too few points."""
    if x.size <= 2 or np.unique(x).size < 2:
        return flat, 0.0
    gram = [[float(x.size), math.fsum(x)], [math.fsum(x), math.fsum(x * x)]]
    intercept, slope = solve(gram, [math.fsum(y), math.fsum(x * y)])
    return intercept, slope
