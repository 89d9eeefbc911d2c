"""A weighted sum of kernels: k(x, s) = sum_m w_m k_m(x, s), one tile of each kernel per tile.

Each kernel sees one aspect of a pair (exact word overlap, character n-grams, the longest common
subsequence, embeddings); kernel ridge on their weighted sum, with the weights and the penalty
chosen by exact leave-one-out (the scorer does that, `choice.py`), uses several at once (multiple
kernel learning). The weights are non-negative and sum to 1, so a sum of kernels in [0, 1] stays
in [0, 1]; a kernel of weight 0 is never built or run.

The same bits on every device and tiling: each kernel's tile is (each kernel guarantees it), and
the sum is made of IEEE products and sums, one rounding each, in the kernels' order: w_1 t_1, then
+ w_2 t_2, ... never contracted into a fused multiply-add. Cost per pair: the sum of the kernels'
(their tiles run one after the other on the same chunk), plus two float64 operations per kernel.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gpu_neighbors.kernels.base import Kernel

FLOAT64_ULP = 2.0**-52  # one rounding of a product or a sum of values in [0, 1]


class CombinedKernel(Kernel[tuple[Any, ...]]):
    """The kernels' similarities weighted by `weights` (non-negative, summing to 1); `tokenizer`
    is the part's text settings (what typicality reads), each kernel keeps its own."""

    name = "combined"
    uses_tokenizer = False  # each kernel's settings name its own tokenizer
    default_estimator = "ridge"

    def __init__(self, *, kernels: Sequence[Kernel[Any]], weights: Sequence[float], **common: Any) -> None:
        super().__init__(**common)
        if len(kernels) != len(weights) or not kernels:
            raise ValueError(f"a combined kernel needs one weight per kernel, got {len(weights)} for {len(kernels)}")
        self.kernels, self.weights = tuple(kernels), tuple(float(weight) for weight in weights)
        # Instance facts here, read off the kernels: encoded ahead only where each of them is,
        # and the threshold rule starts from the weighted mean of their default thresholds.
        self.prepares_ahead = all(kernel.prepares_ahead for kernel in self.kernels)  # type: ignore[misc]
        self.default_tau = float(sum(  # type: ignore[misc]
            weight * kernel.default_tau for weight, kernel in zip(self.weights, self.kernels)))

    def _fit(self, texts: list[str]) -> None:
        for kernel in self.kernels:
            kernel.fit(texts)

    def _encode(self, texts: Sequence[str]) -> tuple[Any, ...]:
        return tuple(kernel.encode(texts) for kernel in self.kernels)

    def _encode_train(self, start: int, stop: int) -> tuple[Any, ...]:
        return tuple(kernel.encode_train(start, stop) for kernel in self.kernels)

    def tile(self, encoded: tuple[Any, ...], start: int, stop: int) -> torch.Tensor:
        return weighted_sum([kernel.tile(chunk, start, stop) for kernel, chunk in zip(self.kernels, encoded)],
                            self.weights)

    def pair_bytes(self) -> int:
        # The kernels run one after the other: the largest one's working memory, beside the
        # running sum it adds into.
        return max(kernel.pair_bytes() for kernel in self.kernels) + 8

    @property
    def bounded(self) -> bool:
        return all(kernel.bounded for kernel in self.kernels)

    @property
    def similarity_error(self) -> float:
        return weighted_error([kernel.similarity_error for kernel in self.kernels], self.weights)

    @property
    def depends_on_training_set(self) -> bool:
        return any(kernel.depends_on_training_set for kernel in self.kernels)

    def settings(self) -> dict[str, str]:
        settings = {"kernels": "+".join(kernel.name for kernel in self.kernels),
                    "weights": ",".join(f"{weight:.6g}" for weight in self.weights)}
        for kernel in self.kernels:
            settings.update({f"{kernel.name}.{key}": value for key, value in kernel.settings().items()})
        return settings


def weighted_sum(tiles: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """w_1 t_1 + w_2 t_2 + ..., in this order, one IEEE rounding per product and per sum (new
    tensors: the tiles are left as they are)."""
    total = tiles[0] * weights[0]
    for tile, weight in zip(tiles[1:], weights[1:]):
        total.add_(tile * weight)
    return total


def weighted_error(errors: Sequence[float], weights: Sequence[float]) -> float:
    """How far a weighted sum may move in another faithful evaluation: the weighted kernels'
    bounds, plus a rounding of each product and each sum."""
    return float(sum(weight * error for weight, error in zip(weights, errors)) + 2 * len(errors) * FLOAT64_ULP)
