"""The neighbour model shared by every kernel.

A similarity tile [candidates, training block] is reduced at once to per-candidate sufficient
statistics (count, sum q, sum q^2 of the neighbours; `NeighborReduction`) and freed; statistics of training blocks
add up, so nothing of size [C x |S|] is ever kept. The a/b rule then turns the statistics into
estimates. The model never knows which kernel made the tiles.

Sums are exact integers (q in fixed point, split into two 26-bit limbs), so they do not depend
on how the training set is cut into blocks or in which order blocks arrive: the same inputs
give bit-identical estimates for every chunk size and device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.tiling import Tile

LIMB_BITS = 26  # a float64 matmul sums up to 2^27 such limbs exactly
MANTISSA_BITS = 52


@dataclass(frozen=True)
class FixedPoint:
    """Values as integers value * 2^shift split into two limbs (high * 2^26 + low), each held
    in float64 so sums over up to 2^27 of them are exact in a matmul on any device."""

    high: torch.Tensor
    low: torch.Tensor
    shift: int

    @classmethod
    def encode(cls, values: torch.Tensor) -> FixedPoint:
        largest = float(values.abs().max()) if values.numel() else 0.0
        shift = MANTISSA_BITS - (math.frexp(largest)[1] if largest > 0 else 0)
        fixed = torch.round(values * 2.0**shift).to(torch.int64)
        high = torch.div(fixed, 2**LIMB_BITS, rounding_mode="floor")
        low = fixed - high * 2**LIMB_BITS
        return cls(high.to(torch.float64), low.to(torch.float64), shift)

    def block(self, start: int, stop: int) -> FixedPoint:
        return FixedPoint(self.high[start:stop], self.low[start:stop], self.shift)

    def decode(self, limb_sums: torch.Tensor) -> torch.Tensor:
        """float64 values of limb sums, rounded once (deterministically)."""
        sums = limb_sums.to(torch.float64)
        return (sums[:, 0] * 2.0**LIMB_BITS + sums[:, 1]) * 2.0**-self.shift


@dataclass(frozen=True)
class Quality:
    """The training set's q, and q^2, ready for exact neighbour sums."""

    values: FixedPoint
    squares: FixedPoint

    @classmethod
    def encode(cls, quality: torch.Tensor) -> Quality:
        return cls(FixedPoint.encode(quality), FixedPoint.encode(quality * quality))

    def block(self, start: int, stop: int) -> Quality:
        return Quality(self.values.block(start, stop), self.squares.block(start, stop))

    def to(self, device: torch.device) -> Quality:
        """The same limbs on `device` (a copy, so the same bits)."""
        return Quality(
            FixedPoint(self.values.high.to(device), self.values.low.to(device), self.values.shift),
            FixedPoint(self.squares.high.to(device), self.squares.low.to(device), self.squares.shift),
        )

    @property
    def device(self) -> torch.device:
        return self.values.high.device


@dataclass(frozen=True)
class Thresholds:
    """The three settings of the neighbour model: tau, a (min_neighbors), b (max_fraction)."""

    tau: float
    min_neighbors: int
    max_fraction: float

    def as_dict(self) -> dict[str, float | int]:
        return {"tau": self.tau, "min_neighbors": self.min_neighbors, "max_fraction": self.max_fraction}


@dataclass(frozen=True)
class TrainingSubset:
    """Training texts allowed to be neighbours (bool [|S|] on the device) and how many there are,
    as a host integer so the b |S| bound needs no device read (subsampled rewards)."""

    mask: torch.Tensor
    size: int


@dataclass
class NeighborStats:
    """Per-candidate neighbour count and exact limb sums of q and q^2; additive across blocks."""

    count: torch.Tensor  # int64 [rows]
    total: torch.Tensor  # int64 [rows, 2], limbs of sum q
    total_sq: torch.Tensor  # int64 [rows, 2], limbs of sum q^2

    @classmethod
    def zeros(cls, rows: int, device: torch.device) -> NeighborStats:
        def limbs() -> torch.Tensor:
            return torch.zeros((rows, 2), dtype=torch.int64, device=device)

        return cls(torch.zeros(rows, dtype=torch.int64, device=device), limbs(), limbs())

    def add_tile(
        self,
        tile: torch.Tensor,
        quality: Quality,
        tau: float,
        excluded: torch.Tensor | None = None,
        first: int = 0,
    ) -> None:
        """Add the neighbours found in `tile` (similarities >= tau) to rows first.. .
        `quality` holds q of the tile's training texts; `excluded` is a boolean mask of pairs
        that must not count (leave-one-out: a text is not its own neighbour)."""
        is_neighbor = tile >= tau
        if excluded is not None:
            is_neighbor &= ~excluded
        # One pass over the tile for everything: a column of ones counts the neighbours
        # (exactly, as the limbs), so the tile is read once by a single matmul.
        columns = [torch.ones_like(quality.values.high), quality.values.high, quality.values.low,
                   quality.squares.high, quality.squares.low]
        sums = (is_neighbor.to(torch.float64) @ torch.stack(columns, dim=1)).to(torch.int64)
        rows = slice(first, first + sums.shape[0])
        self.count[rows] += sums[:, 0]
        self.total[rows] += sums[:, 1:3]
        self.total_sq[rows] += sums[:, 3:5]


class NeighborReduction:
    """Neighbour statistics of candidate rows 0..rows-1, tile by tile (the scorer's reduction).

    leave_one_out: the candidates are the training set itself, and row i is not a neighbour of
    itself (the tile's offsets say which pairs are the diagonal). subset: only those training
    texts can be neighbours (subsampled rewards). Statistics are exact integers, so neither the
    tiling nor the order of tiles changes a bit."""

    def __init__(
        self,
        rows: int,
        quality: Quality,
        tau: float,
        *,
        leave_one_out: bool = False,
        subset: TrainingSubset | None = None,
    ) -> None:
        self.stats = NeighborStats.zeros(rows, quality.device)
        self.quality = quality
        self.tau = tau
        self.leave_one_out = leave_one_out
        self.subset = subset

    def add(self, tile: Tile) -> None:
        rows, columns = tile.values.shape
        start, stop = tile.column, tile.column + columns
        excluded = None
        if self.leave_one_out and tile.row < stop and start < tile.row + rows:
            device = tile.values.device
            candidate = torch.arange(tile.row, tile.row + rows, device=device)
            excluded = candidate[:, None] == torch.arange(start, stop, device=device)[None, :]
        if self.subset is not None:
            outside = ~self.subset.mask[None, start:stop]
            excluded = outside if excluded is None else excluded | outside
        self.stats.add_tile(tile.values, self.quality.block(start, stop), self.tau, excluded, tile.row)

    def result(self) -> NeighborStats:
        return self.stats


@dataclass(frozen=True)
class Prediction:
    """Estimates for a batch of candidates (numpy, in input order)."""

    scores: np.ndarray  # float64, NaN where undefined
    num_neighbors: np.ndarray  # int64
    std: np.ndarray  # float64, spread of the neighbours' q; NaN where undefined
    covered: np.ndarray  # bool

    @property
    def coverage(self) -> float:
        """Share of candidates with an estimate (the paper's Definition 3.3); NaN for none."""
        return float(self.covered.mean()) if self.covered.size else float("nan")

    def __len__(self) -> int:
        return int(self.scores.size)


@dataclass(frozen=True)
class TensorPrediction:
    """`Prediction` as torch tensors left on the device that computed them, so training loops
    (rewards, metrics) use them without a host round trip."""

    scores: torch.Tensor  # float64, NaN where undefined
    num_neighbors: torch.Tensor  # int64
    std: torch.Tensor  # float64, NaN where undefined
    covered: torch.Tensor  # bool

    def numpy(self) -> Prediction:
        return Prediction(
            scores=self.scores.cpu().numpy(),
            num_neighbors=self.num_neighbors.cpu().numpy(),
            std=self.std.cpu().numpy(),
            covered=self.covered.cpu().numpy(),
        )

    def __len__(self) -> int:
        return int(self.scores.numel())


def is_covered(
    count: torch.Tensor,
    num_train: int,
    min_neighbors: int | torch.Tensor,
    max_fraction: float | torch.Tensor,
) -> torch.Tensor:
    """The paper's rule: an estimate exists when a <= |N(x)| <= b |S| (a and b may be columns
    of a grid, as tuning asks for every (a, b) at once)."""
    return (count >= min_neighbors) & (count <= max_fraction * num_train)


def estimate(
    stats: NeighborStats,
    quality: Quality,
    num_train: int,
    min_neighbors: int,
    max_fraction: float,
) -> Prediction:
    """Mean q of the neighbours where the a/b rule allows an estimate, NaN elsewhere; `std` is
    the population standard deviation of the neighbours' q (a confidence the paper lacks)."""
    return estimate_tensors(stats, quality, num_train, min_neighbors, max_fraction).numpy()


def estimate_tensors(
    stats: NeighborStats,
    quality: Quality,
    num_train: int,
    min_neighbors: int,
    max_fraction: float,
) -> TensorPrediction:
    """`estimate` without leaving the device (no host copy, no sync)."""
    covered = is_covered(stats.count, num_train, min_neighbors, max_fraction)
    count = stats.count.to(torch.float64).clamp(min=1)
    mean = quality.values.decode(stats.total) / count
    variance = (quality.squares.decode(stats.total_sq) / count - mean * mean).clamp(min=0)
    nan = torch.full_like(mean, float("nan"))
    return TensorPrediction(
        scores=torch.where(covered, mean, nan),
        num_neighbors=stats.count,
        std=torch.where(covered, variance.sqrt(), nan),
        covered=covered,
    )
