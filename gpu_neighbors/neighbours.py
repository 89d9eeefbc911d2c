"""The neighbour model shared by every kernel.

A similarity tile [candidates, training block] is reduced at once to per-candidate sufficient
statistics (count, sum q, sum q^2 of the neighbours) and freed; statistics of training blocks
add up, so nothing of size [C x |S|] is ever kept. The a/b rule then turns the statistics into
estimates. The model never knows which kernel made the tiles.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class NeighborStats:
    """Per-candidate sums over neighbours; additive across training blocks."""

    count: torch.Tensor  # int64
    total: torch.Tensor  # float64, sum of q
    total_sq: torch.Tensor  # float64, sum of q^2

    @classmethod
    def zeros(cls, rows: int, device: torch.device) -> NeighborStats:
        return cls(
            count=torch.zeros(rows, dtype=torch.int64, device=device),
            total=torch.zeros(rows, dtype=torch.float64, device=device),
            total_sq=torch.zeros(rows, dtype=torch.float64, device=device),
        )

    def add_tile(
        self,
        tile: torch.Tensor,
        quality: torch.Tensor,
        tau: float,
        excluded: torch.Tensor | None = None,
    ) -> None:
        """Add the neighbours found in `tile` (similarities >= tau). `quality` holds q of the
        tile's training texts; `excluded` is a boolean mask of pairs that must not count
        (leave-one-out: a text is not its own neighbour)."""
        is_neighbor = tile >= tau
        if excluded is not None:
            is_neighbor &= ~excluded
        weights = is_neighbor.to(torch.float64)
        self.count += is_neighbor.sum(dim=1)
        self.total += weights @ quality
        self.total_sq += weights @ (quality * quality)


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


def is_covered(
    count: torch.Tensor, num_train: int, min_neighbors: int, max_fraction: float
) -> torch.Tensor:
    """The paper's rule: an estimate exists when a <= |N(x)| <= b |S|."""
    return (count >= min_neighbors) & (count <= max_fraction * num_train)


def estimate(
    stats: NeighborStats, num_train: int, min_neighbors: int, max_fraction: float
) -> Prediction:
    """Mean q of the neighbours where the a/b rule allows an estimate, NaN elsewhere; `std` is
    the population standard deviation of the neighbours' q (a confidence the paper lacks)."""
    covered = is_covered(stats.count, num_train, min_neighbors, max_fraction)
    count = stats.count.to(torch.float64).clamp(min=1)
    mean = stats.total / count
    variance = (stats.total_sq / count - mean * mean).clamp(min=0)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=mean.device)
    return Prediction(
        scores=torch.where(covered, mean, nan).cpu().numpy(),
        num_neighbors=stats.count.cpu().numpy(),
        std=torch.where(covered, variance.sqrt(), nan).cpu().numpy(),
        covered=covered.cpu().numpy(),
    )
