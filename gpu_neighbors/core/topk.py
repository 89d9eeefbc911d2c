"""The k most similar training texts of each candidate, as a running reduction of the one tile
loop, and the top-k estimator built on them.

Each tile is merged at once into a [rows, k] buffer of the best similarities so far and their
training indices (a set, ordered once at the end) by similarity (highest first) and, on equal
similarity, by the training texts' tie rank (`Quality.tie_rank`: by a checksum of the text, then q). That order is
a total order, so the buffer after the last tile is the same whatever the chunk size, block size
or order of tiles; and texts it cannot tell apart have the same text checksum and the same q, so
which of them is kept changes no estimate: the estimates do not depend on where a text sits in
the training set either. (Ties at the k-th place are common: many pairs share a BLEU* value.)

The top-k estimate is the similarity-weighted mean of q over the k most similar training texts
(weights k(x, s)^p quantised as for weighted neighbours; p = 0 is the plain mean), counting
only texts with a positive similarity: it exists for every candidate with any similar training
text. Its sums are exact integers (weights in 2^-20 units times 13-bit limbs of q, as
`NeighborStats` sums them), so no device or summation order changes a bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from gpu_neighbors.core.neighbours import (
    Neighbors,
    NeighborStats,
    Quality,
    TensorPrediction,
    TrainingSubset,
    excluded_pairs,
    moments,
    quantised_weights,
)
from gpu_neighbors.core.tiling import Reduction, Tile

NO_INDEX = -1
# merge_top selects before sorting when k is at most 1/SELECT_SHARE of the entries: predict of
# 20,000 x 2,000, one thread, 2.0x faster at k = 10 and 1.6x at k = 50 (BLEU* and tfidf alike).
SELECT_SHARE = 4
First = TypeVar("First")
Second = TypeVar("Second")


@dataclass
class TopK:
    """Best similarities [rows, k] (float64, -inf where none) and their training indices
    (int64, NO_INDEX where none), best first."""

    similarity: torch.Tensor
    index: torch.Tensor

    def first(self, k: int) -> TopK:
        return TopK(self.similarity[:, :k], self.index[:, :k])

    def neighbors(self, quality: torch.Tensor) -> Neighbors:
        """As numpy records for the host: index, similarity and the training texts' q."""
        valid = self.index >= 0
        index = torch.where(valid, self.index, NO_INDEX)
        score = torch.where(valid, quality[self.index.clamp(min=0)], float("nan"))
        similarity = torch.where(valid, self.similarity, float("nan"))
        return Neighbors(index.cpu().numpy(), similarity.cpu().numpy(), score.cpu().numpy())


def merge_top(similarity: torch.Tensor, index: torch.Tensor, k: int, tie_rank: torch.Tensor) -> TopK:
    """The first k of each row of (similarity, index) [rows, n] in the order similarity
    descending, tie rank ascending (`tie_rank[index]`; empty slots, index past the training set,
    last), in that order (`select_top`, then `order_top`)."""
    return order_top(select_top(similarity, index, k, tie_rank), k, tie_rank)


def select_top(similarity: torch.Tensor, index: torch.Tensor, k: int, tie_rank: torch.Tensor,
               rank: torch.Tensor | None = None) -> TopK:
    """The first k of each row in `merge_top`'s order, as a set, in no particular order. Ranks
    are distinct, so the order is total and the first k are one set: every entry above the
    row's k-th largest similarity, then those equal to it with the lowest ranks. That set is
    chosen by selections (`topk`, linear in n) on a priority that encodes exactly this (0 above
    the k-th value, 1 + rank at it); where k is a large share of n (k = 1,000 of 3,000 measured
    no faster) every entry is sorted instead. A running reduction keeps its buffer as such a
    set and orders it once, at the end: ordering each tile's k (two stable sorts) was over a
    third of a calibration pass's merging. `rank`: the entries' ranks, where the caller has
    them."""
    width = similarity.shape[1]
    if SELECT_SHARE * k > width:
        return order_top(TopK(similarity, index), k, tie_rank)
    rank = _ranks(index, tie_rank) if rank is None else rank
    kth = torch.topk(similarity, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    excluded = torch.iinfo(torch.int64).max
    priority = torch.where(similarity > kth, 0, torch.where(similarity == kth, rank + 1, excluded))
    chosen = torch.topk(priority, k, dim=1, largest=False, sorted=False).indices
    return TopK(torch.gather(similarity, 1, chosen), torch.gather(index, 1, chosen))


def order_top(top: TopK, k: int, tie_rank: torch.Tensor) -> TopK:
    """The first k of `top`'s rows, ordered: similarity descending, tie rank ascending."""
    by_rank = torch.sort(_ranks(top.index, tie_rank), dim=1, stable=True)
    similarity = torch.gather(top.similarity, 1, by_rank.indices)
    index = torch.gather(top.index, 1, by_rank.indices)
    by_similarity = torch.sort(similarity, dim=1, descending=True, stable=True)
    order = by_similarity.indices[:, :k]
    return TopK(by_similarity.values[:, :k], torch.gather(index, 1, order))


def _ranks(index: torch.Tensor, tie_rank: torch.Tensor) -> torch.Tensor:
    """Each entry's tie rank (an index past the training set: after every rank)."""
    size = tie_rank.numel()
    return torch.where(index < size, tie_rank[index.clamp(max=max(size - 1, 0))], size)


def rank_rows(similarity: torch.Tensor, k: int, tie_rank: torch.Tensor) -> TopK:
    """The top k of each row of a whole matrix [rows, n] (columns are training indices 0..n-1
    with ranks `tie_rank`) in the reduction's order; -inf entries are no neighbours."""
    index = torch.arange(similarity.shape[1], dtype=torch.int64).expand_as(similarity)
    top = merge_top(similarity.to(torch.float64), index, k, tie_rank)
    top.index = torch.where(torch.isinf(top.similarity), NO_INDEX, top.index)
    return top


class TopKReduction:
    """The k most similar training texts of candidate rows 0..rows-1, tile by tile, ties
    broken by `tie_rank` (int64 [|S|], distinct, on the tiles' device). leave_one_out and subset
    exclude pairs as `NeighborReduction` does."""

    def __init__(
        self,
        rows: int,
        k: int,
        tie_rank: torch.Tensor,
        *,
        leave_one_out: bool = False,
        subset: TrainingSubset | None = None,
    ) -> None:
        self.k = k
        self.tie_rank = tie_rank
        device = tie_rank.device
        self.top = TopK(
            torch.full((rows, k), -torch.inf, dtype=torch.float64, device=device),
            torch.full((rows, k), torch.iinfo(torch.int64).max, dtype=torch.int64, device=device),
        )
        self.leave_one_out = leave_one_out
        self.subset = subset

    def add(self, tile: Tile) -> None:
        rows, columns = tile.values.shape
        similarity = tile.values.to(torch.float64)
        excluded = excluded_pairs(tile, self.leave_one_out, self.subset)
        if excluded is not None:
            similarity = similarity.masked_fill(excluded, -torch.inf)
        index = torch.arange(tile.column, tile.column + columns, device=similarity.device).expand(rows, columns)
        part = slice(tile.row, tile.row + rows)
        held = self.top.index[part]
        ranks = (_ranks(held, self.tie_rank), self.tie_rank[tile.column : tile.column + columns].expand(rows, columns))
        merged = select_top(  # the tile's ranks are a slice of the table's: no lookup per pair
            torch.cat([self.top.similarity[part], similarity], dim=1),
            torch.cat([held, index], dim=1),
            self.k,
            self.tie_rank,
            torch.cat(ranks, dim=1),
        )
        self.top.similarity[part], self.top.index[part] = merged.similarity, merged.index

    def result(self) -> TopK:
        top = order_top(self.top, self.k, self.tie_rank)
        return TopK(top.similarity, top.index.masked_fill(torch.isinf(top.similarity), NO_INDEX))


class Both(Generic[First, Second]):
    """Two reductions fed the same tiles (an estimate and the neighbours shown with it)."""

    def __init__(self, first: Reduction[First], second: Reduction[Second]) -> None:
        self.first, self.second = first, second

    def add(self, tile: Tile) -> None:
        self.first.add(tile)
        self.second.add(tile)

    def result(self) -> tuple[First, Second]:
        return self.first.result(), self.second.result()


def estimate_topk(top: TopK, quality: Quality, k: int, power: float) -> TensorPrediction:
    """Similarity-weighted mean (and spread) of q over the first k of `top` with a positive
    similarity; undefined (NaN) where there is none. `quality` is the training set's (on the
    device of `top`). Exact sums: each weight is a whole number of units and each q limb an
    integer, and k <= 2^19 products of them stay below 2^52, so a float64 sum of them is exact
    in any order."""
    top = top.first(k)
    positive = (top.index >= 0) & (top.similarity > 0)
    weights = torch.where(positive, quantised_weights(top.similarity, power), 0.0)
    index = top.index.clamp(min=0)
    columns = [
        (weights * quality.weighted_columns[:, column][index]).sum(dim=1).to(torch.int64)
        for column in range(quality.weighted_columns.shape[1])
    ]
    stats = NeighborStats.zeros(index.shape[0], len(quality.bands), index.device, power, weighted=True)
    stats.add_sums(slice(None), torch.stack(columns, dim=1))
    stats.count = positive.sum(dim=1)
    mean, std = moments(stats, quality)
    defined = stats.count > 0
    nan = torch.full_like(mean, float("nan"))
    return TensorPrediction(
        scores=torch.where(defined, mean, nan),
        num_neighbors=stats.count,
        std=torch.where(defined, std, nan),
        covered=defined,
        estimator="topk",
    )
