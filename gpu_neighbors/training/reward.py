"""The neighbour estimate as a reinforcement-learning reward.

A reward must be defined for every sample, so estimates the a/b rule leaves undefined are
replaced by a chosen value (default: the mean quality of the training set, which neither
rewards nor punishes a sample the scorer cannot judge).

Against reward hacking the paper advises a large training set subsampled at every evaluation
("Preventing Hacks"), so a policy cannot learn the n-grams of one or two high-quality training
texts. `subsample` keeps a fresh random fraction of the training texts on each call. It reuses
the fitted neighbour model: texts outside the subset are masked out of the neighbour counts and
the b |S| bound uses the subset's size, so nothing is refitted. The subsets come from one random
stream per (scorer, seed, device): the k-th call with a given seed draws the same subset in
every run.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from gpu_neighbors.core.neighbours import TrainingSubset
from gpu_neighbors.training.ids import predict_tensors

if TYPE_CHECKING:
    from gpu_neighbors.scorer import NeighborsScorer

REWARD_DTYPE = torch.float32

_STREAMS: weakref.WeakKeyDictionary[NeighborsScorer, dict[tuple[int, torch.device], torch.Generator]] = (
    weakref.WeakKeyDictionary()
)


def reward(
    scorer: NeighborsScorer,
    inputs: torch.Tensor | Sequence[str],
    undefined: float | None = None,
    subsample: float | None = None,
    seed: int = 0,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """float32 rewards [batch] for token ids [batch, length] (on their device; see
    `NeighborsScorer.predict_ids`) or texts (on the scorer's device)."""
    scorer._check_fitted()
    fill = float(np.mean(scorer.train_scores_)) if undefined is None else _finite(undefined)
    device = inputs.device if isinstance(inputs, torch.Tensor) else scorer.device_
    subset = None if subsample is None else draw_subset(scorer, subsample, seed, device)
    prediction = predict_tensors(scorer, inputs, attention_mask, subset)
    return torch.where(prediction.covered, prediction.scores, fill).to(REWARD_DTYPE)


def draw_subset(
    scorer: NeighborsScorer, fraction: float, seed: int, device: torch.device
) -> TrainingSubset:
    """A fresh random subset of round(fraction * |S|) training texts, drawn on `device`."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"subsample must be a fraction in (0, 1], not {fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, not {seed!r}")
    size = round(fraction * scorer.num_train)
    if size < scorer.min_neighbors_:
        raise ValueError(
            f"subsample={fraction} keeps {size} of {scorer.num_train} training texts, fewer than "
            f"min_neighbors={scorer.min_neighbors_}: no estimate could ever be defined"
        )
    streams = _STREAMS.setdefault(scorer, {})
    key = (seed, device)
    if key not in streams:
        streams[key] = torch.Generator(device=device).manual_seed(seed)
    chosen = torch.randperm(scorer.num_train, generator=streams[key], device=device)[:size]
    mask = torch.zeros(scorer.num_train, dtype=torch.bool, device=device).index_fill_(0, chosen, True)
    return TrainingSubset(mask=mask, size=size)


def _finite(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ValueError(f"undefined must be a finite number or None, not {value!r}")
    return float(value)
