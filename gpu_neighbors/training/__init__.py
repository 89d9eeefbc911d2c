"""Training-loop tools: TRL reward functions (`rewards`) and torchmetrics metrics (`metric`).
Names load on first use, so the metric's torchmetrics stays optional."""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "AlignedBleu": "gpu_neighbors.training.metric",
    "AlignedRouge": "gpu_neighbors.training.metric",
    "BleuReward": "gpu_neighbors.training.rewards",
    "RougeReward": "gpu_neighbors.training.rewards",
    "RewardFunction": "gpu_neighbors.training.rewards",
    "reward_function": "gpu_neighbors.training.rewards",
    "NeighborsQuality": "gpu_neighbors.training.metric",
}

__all__ = sorted(_PUBLIC)

if TYPE_CHECKING:
    from gpu_neighbors.training.metric import AlignedBleu, AlignedRouge, NeighborsQuality
    from gpu_neighbors.training.rewards import BleuReward, RewardFunction, RougeReward, reward_function


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_PUBLIC[name]), name)
