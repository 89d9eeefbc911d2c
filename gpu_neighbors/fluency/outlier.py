"""The fluency statistic as a column of the outlier test (`core/outside.py`), within length.

A text's mean token log-probability grows with its length (the model has more context: Spearman
0.37-0.50 with the token count on the development sets), so compared with every calibration text
alike the shortest fifth of ordinary texts was flagged at 9-25% and long broken texts hid among
short real ones. The column is the statistic's distance from the line fitted on the calibration
texts against log(token count), scaled by sqrt(token count) (a mean of n log-probabilities
spreads as 1/sqrt(n)): a text is compared with texts of its length. Low is broken.

The line and the scale become a table by token count, made once on the host with the portable
log (`core.portable`) and saved with the scorer, so the column is a gather, a subtraction and a
product: the same bits on every device, with no host synchronisation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_neighbors.core.discriminant import solve
from gpu_neighbors.core.portable import log
from gpu_neighbors.fluency.model import MAX_TOKENS
from gpu_neighbors.text.typicality import LOW_IS_ATYPICAL, TEST_ALONE

# The outlier test's columns with fluency: the typicality statistics, the fluency column (low is
# broken), the nearest similarity and the degeneracy score. The fluency column adds up (Fisher's
# product) and never flags a text alone: as a sixth single test it took a sixth of the level from
# each of the others, and cut-off MLQE translations, which the ending statistic flags alone,
# dropped by 0.225 where 0.276 was needed (0.343 adding up; bench/quality.md, issue 51).
FLUENCY_LOW_IS_ATYPICAL = LOW_IS_ATYPICAL + (True, True, False)
FLUENCY_ALONE = TEST_ALONE[: len(LOW_IS_ATYPICAL)] + (False,) + TEST_ALONE[len(LOW_IS_ATYPICAL):]


# log(n) for a text of n tokens (index 0: no token), made once with the portable log.
LOG_LENGTH = np.concatenate([[np.nan], log(np.arange(1, MAX_TOKENS + 1, dtype=np.float64))])


def estimate_features(fluency: torch.Tensor) -> torch.Tensor:
    """float64 [rows, 1] of [rows, 2] statistics and token counts: what the stacked estimate
    reads, the mean token log-probability alone (NaN for a text without a token). With log(token
    count) beside it GUG's dev rho rose further (0.51 -> 0.65) but the model learned that short
    learner sentences are the good ones, and cut-off and word-dropped copies of good texts then
    scored as well as their originals (bench/fluency.md): the mean alone, which grows with length,
    rates them lower."""
    return fluency[:, :1]


@dataclass(frozen=True)
class WithinLength:
    """The column's table: `center[n]` and `scale[n]` for a text of n tokens (n up to
    MAX_TOKENS; index 0 unused), float64."""

    center: np.ndarray
    scale: np.ndarray
    on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def fit(cls, fluency: np.ndarray) -> WithinLength:
        """From the calibration texts' [texts, 2] statistics and token counts: the least-squares
        line of the statistic on log(count) (flat where the counts do not vary)."""
        finite = fluency[np.isfinite(fluency).all(axis=1) & (fluency[:, 1] > 0)]
        intercept, slope = (float(np.median(finite[:, 0])) if len(finite) else 0.0), 0.0
        if len(finite) > 2 and np.unique(finite[:, 1]).size > 1:
            x = log(finite[:, 1])
            gram = [[float(len(finite)), math.fsum(x)], [math.fsum(x), math.fsum(x * x)]]
            intercept, slope = solve(gram, [math.fsum(finite[:, 0]), math.fsum(x * finite[:, 0])])
        center = intercept + slope * LOG_LENGTH
        scale = np.concatenate([[np.nan], np.sqrt(np.arange(1, MAX_TOKENS + 1, dtype=np.float64))])
        return cls(center, scale)

    def column(self, fluency: torch.Tensor) -> torch.Tensor:
        """float64 [rows] of [rows, 2] statistics and counts, on their device (NaN: no token)."""
        if fluency.device not in self.on:
            self.on[fluency.device] = (torch.as_tensor(self.center, device=fluency.device),
                                       torch.as_tensor(self.scale, device=fluency.device))
        center, scale = self.on[fluency.device]
        counts = fluency[:, 1].nan_to_num(0.0).clamp(0, MAX_TOKENS).to(torch.int64)
        return (fluency[:, 0] - center[counts]) * scale[counts]
