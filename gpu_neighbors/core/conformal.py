"""Prediction intervals that hold: conformal prediction on exact leave-one-out residuals.

Each training text of a calibration set is scored by all the other training texts (exact
leave-one-out, the same estimator and settings as `predict`), and its residual is divided by a
difficulty the estimator knows for any text without its truth: the spread of the neighbours'
q (`std`) plus a floor (a multiple of the calibration texts' median spread, chosen on half of
them where there are enough), so that an estimate from neighbours that disagree gets a wider
interval where the spread predicts the error, and widths stay nearly constant where it does not. At level 1 - alpha the interval of a new
estimate y_hat with difficulty d is y_hat -/+ Q d, with Q the ceil((m + 1)(1 - alpha))-th smallest
of the m normalised residuals (infinite when that rank exceeds m; m is half the calibration
texts when the other half chose the floor).

The guarantee is that of the jackknife (Barber et al., 2021, "Predictive inference with the
jackknife+"): when the training texts and the new text are exchangeable (drawn from one
distribution, in no particular order), and the estimate changes little when one training text
is left out, P(truth in interval) >= 1 - alpha up to that change; with exchangeable residuals
it is ceil((m + 1)(1 - alpha)) / (m + 1) exactly (tests/core/test_conformal.py measures it). Jackknife+ guarantees
1 - 2 alpha without the stability assumption but needs every leave-one-out model's estimate for
every candidate; the neighbour estimates change only where the left-out text was a neighbour, so
the plain jackknife is what is computed. Texts without an estimate get none (NaN): intervals
are conditional on an estimate existing, and calibrated on training texts that had one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import numpy as np
import torch

from gpu_neighbors.core.neighbours import canonical_sample
from gpu_neighbors.core.tiling import Reduction, Result, Tile

# Training texts whose leave-one-out residuals calibrate the intervals: all of them up to this
# many, else a seeded random sample of this many (each still scored by all the others).
MAX_CALIBRATION_TEXTS = 2000
# The floor added to every spread, in units of the calibration texts' median spread: from
# widths that follow the spread (0.1: never zero, as one neighbour or neighbours that agree have
# none) to nearly constant ones (100), where the spread says little about the error. Choosing it
# on the same residuals that calibrate would cost coverage (0.87 for 0.9 with 19 calibration texts
# in test_conformal's setting), hence the split.
FLOOR_SCALES = (0.1, 1.0, 10.0, 100.0)
MIN_SELECTION_TEXTS = 100
REFERENCE_LEVEL = 0.9


@dataclass(frozen=True)
class Calibration:
    """The sorted normalised leave-one-out residuals |y - y_hat| / d of the calibration texts
    that had an estimate, and the floor added to every spread."""

    residuals: np.ndarray  # float64, ascending
    floor: float

    @classmethod
    def fit(cls, estimates: np.ndarray, spreads: np.ndarray, truth: np.ndarray) -> Calibration:
        """From leave-one-out estimates and spreads (NaN where none) and the true scores.

        From MIN_SELECTION_TEXTS texts with a spread on, a seeded half of them chooses the floor
        (the one of FLOOR_SCALES x the median spread with the narrowest mean interval at
        REFERENCE_LEVEL) and the other half alone calibrates: the choice never sees the
        residuals that set the width, so the finite-sample guarantee holds for the half. The
        halves are cut by position: the scorer hands its texts over in its canonical order, so
        they hold the same texts whatever order the training set came in."""
        estimates, spreads, truth = (np.asarray(a, dtype=np.float64) for a in (estimates, spreads, truth))
        defined = np.isfinite(estimates) & np.isfinite(spreads)
        spreads, errors = spreads[defined], np.abs(truth[defined] - estimates[defined])
        positive = spreads[spreads > 0]
        scale = float(np.median(positive)) if positive.size else 1.0
        floors = [factor * scale for factor in FLOOR_SCALES]
        if errors.size < MIN_SELECTION_TEXTS or not positive.size:
            return cls(np.sort(errors / (spreads + floors[0])), floors[0])
        order = np.random.default_rng(0).permutation(errors.size)
        choose, keep = order[: errors.size // 2], order[errors.size // 2 :]

        def mean_width(floor: float) -> float:
            trial = cls(np.sort(errors[choose] / (spreads[choose] + floor)), floor)
            return trial.quantile(REFERENCE_LEVEL) * float(np.mean(spreads[choose] + floor))

        floor = min(floors, key=mean_width)  # ties: the smallest floor
        return cls(np.sort(errors[keep] / (spreads[keep] + floor)), floor)

    @property
    def size(self) -> int:
        return int(self.residuals.size)

    def quantile(self, level: float) -> float:
        """Q: the ceil((m + 1) level)-th smallest normalised residual, inf past the m-th."""
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), not {level!r}")
        rank = math.ceil((self.size + 1) * level - 1e-12)
        return float(self.residuals[rank - 1]) if rank <= self.size else math.inf

    def interval(
        self, estimates: np.ndarray, spreads: np.ndarray, level: float, bounds: tuple[float, float] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) float64 around each estimate (NaN where it is NaN), clipped to `bounds`
        (the score range: the truth lies inside, so clipping never loses coverage)."""
        low, high = self.interval_tensors(torch.as_tensor(np.asarray(estimates, dtype=np.float64)),
                                          torch.as_tensor(np.asarray(spreads, dtype=np.float64)), level, bounds)
        return low.numpy(), high.numpy()

    def interval_tensors(
        self, estimates: torch.Tensor, spreads: torch.Tensor, level: float, bounds: tuple[float, float] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`interval` on tensors, on their device: Q is a host number, so nothing waits."""
        half = self.quantile(level) * (spreads.to(torch.float64) + self.floor)
        estimates = estimates.to(torch.float64)
        low, high = estimates - half, estimates + half
        if bounds is not None:
            low, high = low.clamp(*bounds), high.clamp(*bounds)
        nan = torch.full_like(estimates, float("nan"))
        defined = torch.isfinite(estimates)
        return torch.where(defined, low, nan), torch.where(defined, high, nan)


Spreads = TypeVar("Spreads", np.ndarray, torch.Tensor)


def difficulty(estimator: str, spreads: Spreads) -> Spreads:
    """What an estimator's intervals scale by: the neighbours' spread, or for the ridge
    estimator, which has none (its `std` is NaN), zero: one width, set by the floor."""
    if estimator != "ridge":
        return spreads
    return torch.zeros_like(spreads) if isinstance(spreads, torch.Tensor) else np.zeros_like(spreads)


def calibration_sample(order: np.ndarray, seed: int = 0) -> np.ndarray:
    """The training texts (sorted positions) that calibrate, of those in `order` (a
    `neighbours.canonical_order`): all, or a seeded sample of MAX_CALIBRATION_TEXTS (the same
    texts in any order of the training set)."""
    return canonical_sample(order, MAX_CALIBRATION_TEXTS, seed)


class WithoutOwn(Generic[Result]):
    """Feeds `inner` every tile with each row's own training text masked out (-inf): candidate
    row r is training text own[r], so this is leave-one-out for any sample of training texts."""

    def __init__(self, inner: Reduction[Result], own: torch.Tensor) -> None:
        self.inner, self.own = inner, own

    def add(self, tile: Tile) -> None:
        """One comparison per pair, no branch on the data: the host never waits for the device."""
        rows, columns = tile.values.shape
        own = self.own[tile.row : tile.row + rows].to(tile.values.device) - tile.column
        mine = own[:, None] == torch.arange(columns, device=tile.values.device)[None, :]
        self.inner.add(replace(tile, values=tile.values.masked_fill(mine, -torch.inf)))

    def result(self) -> Result:
        return self.inner.result()
