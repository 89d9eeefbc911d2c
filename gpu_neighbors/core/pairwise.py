"""One all-pairs similarity pass over a scored data set, from which every protocol is cut.

Leave-one-out inside a subset, the folds of cross-validation, nested tuning, learning curves and
threshold sweeps all need similarities between items of the same data set, so the kernel runs
once and each split reads a sub-matrix. The neighbour model (`neighbours.py`) then runs on those
sub-matrices exactly as the scorer runs it on tiles, with the training side's q encoded as a
refit on that side would encode it: results equal refitting a scorer on the split.

The pass holds an [n x n] float64 matrix, so it is meant for evaluation sets (n up to ~10^4);
`NeighborsScorer.fit_pairwise` makes one.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gpu_neighbors.core import kernel_ridge
from gpu_neighbors.core.neighbours import (
    NeighborStats,
    Prediction,
    Quality,
    Thresholds,
    canonical_order,
    canonical_sample,
    estimate,
)
from gpu_neighbors.core.tiling import Tile
from gpu_neighbors.core.topk import NO_INDEX, TopK, estimate_topk_grid, rank_segments

# How far a similarity may lie from the value another faithful evaluation of its kernel gives
# (another device, a contracted formula), when the pass does not say: at least every exact
# kernel's `Kernel.similarity_error` (tests/core/test_tau_margin.py checks it), so a threshold
# tuned with it keeps clear of every training similarity of those kernels.
DEFAULT_SIMILARITY_ERROR = 2.0**-44
# Items up to which `top` reads one ordering of every row, kept with the pass (int32: 64 MB at 4,000).
MAX_ORDERED = 4000
# Entries of a block of rows that `row_orders` sorts at a time (its temporaries: about 40 bytes an entry).
ORDER_BLOCK = 1 << 16


class PairwiseSimilarities:
    """k(x_i, x_j) for all items of one data set, with the items' known quality and, to break
    ties in top-k rankings as the scorer does, the checksums of their texts
    (`neighbours.text_checksums`; without them ties go by q, then position). `error` is the
    kernel's bound on how far a similarity may move in another faithful evaluation
    (`Kernel.similarity_error`): tuning keeps every threshold farther than that from every
    similarity."""

    def __init__(
        self,
        matrix: torch.Tensor | np.ndarray,
        scores: Sequence[float] | np.ndarray,
        checksums: np.ndarray | None = None,
        error: float = DEFAULT_SIMILARITY_ERROR,
    ) -> None:
        self.error = float(error)
        self.matrix = torch.as_tensor(matrix, dtype=torch.float64).cpu()
        self.scores = np.asarray(scores, dtype=np.float64)
        self.checksums = None if checksums is None else np.asarray(checksums, dtype=np.int64)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != self.matrix.shape[1]:
            raise ValueError(f"need a square similarity matrix, got shape {tuple(self.matrix.shape)}")
        if self.scores.shape != (self.matrix.shape[0],):
            raise ValueError(f"{self.matrix.shape[0]} items but {self.scores.size} scores")
        if self.checksums is not None and self.checksums.shape != self.scores.shape:
            raise ValueError(f"{self.scores.size} items but {self.checksums.size} checksums")
        self._order: np.ndarray | None = None  # `_ordering`, made on first use

    def subset(self, items: np.ndarray) -> PairwiseSimilarities:
        """The items `items` alone, as their own data set (a copy of their block, and of their
        rows of the ordering, less the other items: the same order)."""
        items = _indices(items)
        part = PairwiseSimilarities(self.matrix[np.ix_(items, items)], self.scores[items],
                                    None if self.checksums is None else self.checksums[items], self.error)
        order = self._ordering()
        if order is not None:
            position = np.full(len(self), -1, dtype=np.int32)
            position[items] = np.arange(items.size, dtype=np.int32)
            kept = position[order[items]]
            part._order = kept[kept >= 0].reshape(items.size, items.size)
        return part

    def __len__(self) -> int:
        return int(self.scores.size)

    def stats(self, rows: np.ndarray, columns: np.ndarray, tau: float, power: float = 0.0) -> NeighborStats:
        """Neighbour statistics of items `rows` among items `columns` (weighted by k^power when
        power > 0); an item is never its own neighbour."""
        rows, columns = _indices(rows), _indices(columns)
        tile = self.matrix[np.ix_(rows, columns)]
        excluded = torch.as_tensor(rows[:, None] == columns[None, :])
        quality = self.quality(columns)
        result = NeighborStats.zeros(rows.size, len(quality.bands), torch.device("cpu"), power)
        result.add_tile(tile, quality, tau, excluded if excluded.any() else None)
        return result

    def top(self, rows: np.ndarray, columns: np.ndarray, ks: Sequence[int]) -> TopK:
        """The max(ks) most similar of items `columns` for each of items `rows` (indices are
        positions in `columns`), an item never its own neighbour, the first k for each k of `ks`
        first (`rank_segments`: in the scorer's `TopKReduction` order as `estimate_top` reads it).
        Up to MAX_ORDERED items, read off one ordering of every row (`_ordering`), in full order:
        tuning per fold, learning curves and nested leave-one-out rank subsets of the same items
        again and again, and a subset's order is the whole set's without the others."""
        rows, columns = _indices(rows), _indices(columns)
        order = self._ordering()
        if order is None:
            tile = self.matrix[np.ix_(rows, columns)].clone()
            tile[torch.as_tensor(rows[:, None] == columns[None, :])] = -torch.inf
            return rank_segments(tile, ks, self.quality(columns).tie_rank)
        width = min(max(ks), columns.size)
        position = np.full(len(self), NO_INDEX, dtype=np.int64)
        position[columns] = np.arange(columns.size)
        # A row's first `width` kept entries lie within its first `width` + (items left out,
        # itself included) of the ordering: read no further.
        reach = min(len(self), width + len(self) - columns.size + 1)
        index = np.full((rows.size, width), NO_INDEX, dtype=np.int64)
        similarity = np.full((rows.size, width), -np.inf)
        matrix = self.matrix.numpy()
        step = max(1, ORDER_BLOCK // reach)  # a block of rows at a time, as `row_orders`
        for start in range(0, rows.size, step):
            block = rows[start:start + step]
            candidates = order[block, :reach]  # the most similar items first
            keep = (position[candidates] >= 0) & (candidates != block[:, None])
            place = np.cumsum(keep, axis=1)
            row, entry = np.nonzero(keep & (place <= width))
            chosen = candidates[row, entry]
            slot = (row + start, place[row, entry] - 1)
            index[slot] = position[chosen]
            similarity[slot] = matrix[block[row], chosen]
        return TopK(torch.from_numpy(similarity), torch.from_numpy(index))

    def _ordering(self) -> np.ndarray | None:
        """Every item's others by similarity, then tie rank (`Quality.tie_rank`: a subset's
        ranks keep this order), its own column wherever its similarity puts it (`top` leaves
        it out) [n, n]; made once, and only up to MAX_ORDERED items (its memory)."""
        if len(self) > MAX_ORDERED:
            return None
        if self._order is None:
            self._order = row_orders(self.matrix.numpy(), self.quality(np.arange(len(self))).tie_rank.numpy())
        return self._order

    def quality(self, columns: np.ndarray) -> Quality:
        """q of a training side, encoded as a scorer fitted on just those items encodes it."""
        columns = _indices(columns)
        checksums = None if self.checksums is None else self.checksums[columns]
        return Quality.encode(torch.as_tensor(self.scores[columns]), checksums)

    def leave_one_out(self, items: np.ndarray, thresholds: Thresholds) -> Prediction:
        """Each of `items` scored by the other `items` (a scorer fitted on `items`, then its
        leave_one_out)."""
        items = _indices(items)
        if thresholds.estimator == "ridge":
            return kernel_ridge.leave_one_out_prediction(self.ridge(items, thresholds.penalty).loo,
                                                         self.similar_counts(items))
        return self._predict(items, items, items.size - 1, thresholds)

    def predict(self, test: np.ndarray, train: np.ndarray, thresholds: Thresholds) -> Prediction:
        """Items `test` scored against items `train` (a scorer fitted on `train`, then predict)."""
        test, train = _indices(test), _indices(train)
        if np.intersect1d(test, train).size:
            raise ValueError("test and training items overlap; use leave_one_out for that")
        return self._predict(test, train, train.size, thresholds)

    def similar_counts(self, items: np.ndarray) -> np.ndarray:
        """How many other items of `items` have a positive similarity with each (int64)."""
        items = _indices(items)
        block = self.matrix[np.ix_(items, items)] > 0
        return (block.sum(dim=1) - block.diagonal().to(torch.int64)).numpy()

    def ridge(self, train: np.ndarray, penalty: float | None = None) -> kernel_ridge.KernelRidge:
        """Kernel ridge fitted on items `train` (as the scorer fits it), at `penalty` or, when
        None, at the one exact leave-one-out chooses. The solve runs on the items in
        `canonical_order` (by text checksum, then score), so the same items in any order give
        the same bits. Above MAX_RIDGE_TEXTS items it is fitted on a seeded sample of them
        (`canonical_sample`): the others get dual weight zero, and their `loo` is the model's
        estimate, made without them."""
        train = _indices(train)
        order = canonical_order(None if self.checksums is None else self.checksums[train], self.scores[train])
        sampled = train.size > kernel_ridge.MAX_RIDGE_TEXTS
        if sampled:
            order = order[np.isin(order, canonical_sample(order, kernel_ridge.MAX_RIDGE_TEXTS, seed=1))]
        fitted = train[order]
        block = self.matrix[np.ix_(fitted, fitted)]
        model = kernel_ridge.fit_quantised(block, self.scores[fitted], None if penalty is None else [penalty])
        alpha, loo = np.zeros(train.size), np.empty(train.size)
        alpha[order] = model.alpha
        if sampled:
            whole = kernel_ridge.KernelRidge(alpha, model.intercept, model.penalty, model.loo)
            loo = self._ridge_estimates(whole, train, train, leave_one_out=True).scores
        loo[order] = model.loo
        return kernel_ridge.KernelRidge(alpha, model.intercept, model.penalty, loo)

    def _ridge_estimates(self, model: kernel_ridge.KernelRidge, test: np.ndarray, train: np.ndarray,
                         leave_one_out: bool = False) -> Prediction:
        """`model` (fitted on items `train`) applied to items `test` by the scorer's reduction."""
        reduction = kernel_ridge.RidgeReduction(test.size, kernel_ridge.RidgeWeights.of(model, torch.device("cpu")),
                                                leave_one_out)
        reduction.add(Tile(self.matrix[np.ix_(test, train)], 0, 0))
        return reduction.result().numpy()

    def _predict(self, test: np.ndarray, train: np.ndarray, num_train: int, thresholds: Thresholds) -> Prediction:
        if thresholds.estimator == "ridge":
            return self._ridge_estimates(self.ridge(train, thresholds.penalty), test, train)
        if thresholds.estimator == "topk":
            k = int(thresholds.top_k or 1)
            return self.estimate_top(self.top(test, train, [k]), train, [k], thresholds.power)[0]
        stats = self.stats(test, train, thresholds.tau, thresholds.power)
        return self.estimate(stats, train, num_train, thresholds)

    def estimate_top(self, top: TopK, train: np.ndarray, ks: list[int], power: float,
                     spread: bool = True) -> list[Prediction]:
        """The top-k estimate from `top` (positions in `train`, from `top` with these `ks`) at
        every k of `ks`, from one pass over it (`top` is reused across k and p); `spread` False:
        no std (NaN), for tuning, which reads the estimates alone."""
        return [prediction.numpy() for prediction in estimate_topk_grid(top, self.quality(train), ks, power, spread)]

    def estimate(
        self, stats: NeighborStats, train: np.ndarray, num_train: int, thresholds: Thresholds
    ) -> Prediction:
        """The a/b rule on statistics from `stats` (reused across a and b in sweeps)."""
        return estimate(
            stats, self.quality(train), num_train, thresholds.min_neighbors, thresholds.max_fraction
        )

    def off_diagonal(self, items: np.ndarray) -> np.ndarray:
        """Similarities between distinct items of `items`, flattened (for data-driven grids)."""
        items = _indices(items)
        block = self.matrix[np.ix_(items, items)].numpy()
        return block[~np.eye(items.size, dtype=bool)]


def _indices(items: np.ndarray | Sequence[int]) -> np.ndarray:
    return np.asarray(items, dtype=np.int64).reshape(-1)


def row_orders(matrix: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Each row's columns by descending value, equal values (NaN equal to NaN, as numpy's sorts
    take them) by ascending `ranks` (distinct) [n, n] int32: `np.lexsort((ranks, -matrix),
    axis=1)` from two of numpy's vectorised (unstable) sorts instead of its two stable passes:
    the values' sort gives each entry the place of its value among the row's distinct values,
    and the keys (place, the column's rank) are distinct. A block of rows at a time, so that
    the temporaries stay in cache and are not fresh pages each time (2,000 x 2,000 with many
    ties, process CPU: 0.09 s against lexsort's 0.29-0.62 s, a loaded 2-core machine)."""
    rows, columns = matrix.shape
    key_type = np.int32 if columns * columns < 2**31 else np.int64
    by_rank = np.argsort(ranks, kind="stable").astype(np.int32)
    rank_of = np.empty(columns, dtype=key_type)
    rank_of[by_rank] = np.arange(columns, dtype=key_type)
    result = np.empty((rows, columns), dtype=np.int32)
    step = max(1, ORDER_BLOCK // max(columns, 1))
    for start in range(0, rows, step):
        values = np.negative(matrix[start:start + step])
        order = np.argsort(values, axis=1)
        ordered = np.take_along_axis(values, order, axis=1)
        same = (ordered[:, 1:] == ordered[:, :-1]) | (np.isnan(ordered[:, 1:]) & np.isnan(ordered[:, :-1]))
        keys = np.zeros(values.shape, dtype=key_type)
        np.cumsum(~same, axis=1, out=keys[:, 1:])
        keys *= key_type(columns)
        keys += rank_of[order]
        keys.sort(axis=1)
        np.take(by_rank, keys % columns, out=result[start:start + step])
    return result
