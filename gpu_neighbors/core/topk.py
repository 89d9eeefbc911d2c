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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import torch

from gpu_neighbors.core.compiled import native
from gpu_neighbors.core.neighbours import (
    Neighbors,
    NeighborStats,
    Quality,
    TensorPrediction,
    TrainingSubset,
    excluded_pairs,
    moments,
    quantised_weights,
    weighted_mean,
)
from gpu_neighbors.core.sparse import csr_matrix
from gpu_neighbors.core.tiling import Reduction, Tile

NO_INDEX = -1
PRUNE_WIDTH = 4  # a first tile at least this many k wide is selected from (`_first_tile_top`)
First = TypeVar("First")
Second = TypeVar("Second")


@dataclass
class TopK:
    """Best similarities [rows, k] (float64, -inf where none) and their training indices
    (int64, NO_INDEX where none), best first (from `TopKReduction(ordered=False)`: in no order)."""

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


def select_top(similarity: torch.Tensor, index: torch.Tensor, k: int, tie_rank: torch.Tensor,
               rank: torch.Tensor | None = None, host_waits: bool = True) -> TopK:
    """The first k of each row of (similarity, index) [rows, n] in the order similarity
    descending, tie rank ascending (`tie_rank[index]`; empty slots, index past the training set,
    last), as a set, in no particular order (`order_top` orders it). Ranks
    are distinct, so the order is total and the first k are one set: every entry above the
    row's k-th largest similarity, then those equal to it with the lowest ranks. That set is
    chosen by selections (`topk`, linear in n) on a priority that encodes exactly this (0 above
    the k-th value, 1 + rank at it): 3.6-5x faster than `order_top`'s two stable sorts at every
    k and n measured ([1,024 rows x 80-4,072 entries], k 50 and 1,000, one thread); where k is
    not below n there is nothing to select. A running reduction keeps its buffer as such a set
    and orders it once, at the end: ordering each tile's k was over a third of a calibration
    pass's merging. `rank`: the entries' ranks, where the caller has them; `host_waits` false:
    the host reads nothing from the tensors (the token-ids path)."""
    if k >= similarity.shape[1]:
        return order_top(TopK(similarity, index), k, tie_rank)
    chosen = _first_positions(similarity, index, k, tie_rank, rank, host_waits)
    return TopK(torch.gather(similarity, 1, chosen), torch.gather(index, 1, chosen))


def _first_positions(similarity: torch.Tensor, index: torch.Tensor, k: int, tie_rank: torch.Tensor,
                     rank: torch.Tensor | None, host_waits: bool) -> torch.Tensor:
    """Positions [rows, k] of each row's first k (`select_top`; k below the width), in no order."""
    best = torch.topk(similarity, k, dim=1, sorted=False)
    kth = best.values.amin(dim=1, keepdim=True)
    if host_waits and similarity.device.type == "cpu":
        # On the CPU, a row whose k-th value no entry left out shares has one first-k set, the
        # one `topk` chose; ranks decide only the other rows (with continuous similarities, few;
        # where most rows tie, as BLEU*'s few values make them, all rows are ranked). Not on a
        # GPU, nor where the host must not wait: picking those rows out reads their count.
        tied = ((similarity == kth).sum(dim=1) > (best.values == kth).sum(dim=1)).nonzero().flatten()
        if 2 * tied.numel() <= similarity.shape[0]:
            chosen = best.indices
            if tied.numel():
                chosen = chosen.clone()
                chosen[tied] = _by_priority(similarity[tied], kth[tied],
                                            _ranks(index[tied], tie_rank) if rank is None else rank[tied], k)
            return chosen
    return _by_priority(similarity, kth, _ranks(index, tie_rank) if rank is None else rank, k)


def _by_priority(similarity: torch.Tensor, kth: torch.Tensor, rank: torch.Tensor, k: int) -> torch.Tensor:
    """Positions of the first k of each row in `select_top`'s order, given each row's k-th
    largest similarity and its entries' ranks: every entry above the k-th, then those at it
    with the lowest ranks (one selection on a priority: 0 above, 1 + rank at it)."""
    excluded = torch.iinfo(torch.int64).max
    priority = torch.where(similarity > kth, 0, torch.where(similarity == kth, rank + 1, excluded))
    return torch.topk(priority, k, dim=1, largest=False, sorted=False).indices


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


def rank_segments(similarity: torch.Tensor, ks: Sequence[int], tie_rank: torch.Tensor) -> TopK:
    """The first max(ks) of each row of a whole matrix [rows, n] (columns are training indices
    0..n-1 with ranks `tie_rank`; -inf entries are no neighbours) in the reduction's order as far
    as `estimate_topk_grid` reads it: for every k of `ks` the first k entries are the first k, in
    no particular order between two consecutive ks (the grid reads sums over those segments,
    exact in any order). Nested selections from the largest k down instead of ordering the list
    (two stable sorts): 0.36 against 0.73 s at k = 1,000 of 4,000 x 4,000, one thread."""
    similarity = similarity.to(torch.float64)
    rows, width = similarity.shape
    current = TopK(similarity, torch.arange(width, dtype=torch.int64).expand(rows, width))
    beyond: list[TopK] = []  # the segments past the next end, nearest first
    for end in sorted({min(k, width) for k in ks}, reverse=True):
        if end >= current.similarity.shape[1]:
            continue
        chosen = (_first_positions(current.similarity, current.index, end, tie_rank, None, True) if end
                  else torch.zeros((rows, 0), dtype=torch.int64))
        if end != min(max(ks), width):  # past the largest end nothing is kept
            rest = torch.ones_like(current.similarity, dtype=torch.bool).scatter_(1, chosen, False)
            size = current.similarity.shape[1] - end
            beyond.insert(0, TopK(current.similarity[rest].view(rows, size), current.index[rest].view(rows, size)))
        current = TopK(torch.gather(current.similarity, 1, chosen), torch.gather(current.index, 1, chosen))
    parts = [current, *beyond]
    top = TopK(torch.cat([part.similarity for part in parts], dim=1), torch.cat([part.index for part in parts], dim=1))
    return TopK(top.similarity, top.index.masked_fill(torch.isinf(top.similarity), NO_INDEX))


@dataclass
class Entrants:
    """A tile's entries that may enter the rows' buffers: similarities, training indices and
    their tie ranks, [rows, width]."""

    similarity: torch.Tensor
    index: torch.Tensor
    rank: torch.Tensor


def _entrants(similarity: torch.Tensor, bound: torch.Tensor, first_column: int, tie_rank: torch.Tensor,
              host_waits: bool) -> Entrants:
    """The entries of a tile (training columns from `first_column`) at or above their row's `bound`,
    the least similarity its buffer of k holds: an entry below it comes after all k in the total
    order, so it can never enter, and the merge need not read it. Late in a pass few pass (a
    calibration pass at 50,000 training texts, k = 1,000, tiles 3,072 wide: the widest row's
    entrants fell to ~100 by the last tiles), so they are packed to the left (`_packed`) and the
    merge reads k + width entries a row instead of k + the tile's width. The set merged into the
    buffer, and so every bit after it, is the same. Where any row's buffer is not yet full (bound
    -inf), or any row's entrants are over half the tile, the whole tile is merged; and without
    `host_waits` or on a GPU always: packing makes the host wait for the counts every tile (the
    token-ids path promises no host synchronisation), and a GPU's selections cost little."""
    if not host_waits or similarity.device.type != "cpu" or not similarity.shape[0]:
        return _whole_tile(similarity, first_column, tie_rank)
    passing = Passing.of(similarity, bound)
    width = int(passing.counts.max())
    if 2 * width > similarity.shape[1]:
        return _whole_tile(similarity, first_column, tie_rank)
    return _packed(passing, width, first_column, tie_rank)


@dataclass(frozen=True)
class Passing:
    """A CPU tile's entries at or above their row's bound [rows, 1], on numpy's arrays (the
    tensors' own memory: numpy's comparison, positions and scatters take half the time of
    torch's indexing on the CPU, 1,536 x 2,000, one thread: 5.9 against 13.4 ms): the tile's
    values, the passing entries' flat positions (ascending) and how many pass in each row."""

    values: np.ndarray
    flat: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, similarity: torch.Tensor, bound: torch.Tensor) -> Passing:
        values = similarity.contiguous().numpy()
        flat = np.flatnonzero(values >= bound.numpy())
        return cls(values, flat, np.bincount(flat // values.shape[1], minlength=values.shape[0]))


def _packed(passing: Passing, width: int, first_column: int, tie_rank: torch.Tensor) -> Entrants:
    """The passing entries of the rows with at most `width` of them packed to the left of
    [rows, width] (training columns from `first_column`); empty slots, and every slot of the
    other rows, as -inf with an index and a rank past the training set."""
    rows, columns = passing.values.shape
    narrow = passing.counts <= width
    counts = np.where(narrow, passing.counts, 0)
    flat = passing.flat
    row = flat // columns
    if not narrow.all():
        kept = narrow[row]
        flat, row = flat[kept], row[kept]
    slot = np.arange(flat.size) + row * width - (np.cumsum(counts) - counts)[row]
    taken = flat - row * columns + first_column
    ranks = tie_rank.numpy()
    packed = Entrants(torch.full((rows, width), -torch.inf, dtype=torch.float64),
                      torch.full((rows, width), torch.iinfo(torch.int64).max, dtype=torch.int64),
                      torch.full((rows, width), ranks.size, dtype=tie_rank.dtype))
    packed.similarity.numpy().reshape(-1)[slot] = passing.values.reshape(-1)[flat]
    packed.index.numpy().reshape(-1)[slot] = taken
    packed.rank.numpy().reshape(-1)[slot] = ranks[taken]
    return packed


def _cheapest_width(counts: np.ndarray, columns: int, least: int) -> int:
    """The width w >= `least` (one of `counts`, or `least`) that packs rows at a least cost of
    rows x w + (rows with more than w entries) x `columns`: the entries the selections read
    (with BLEU*'s ties the widest rows pass many times as many entries as most)."""
    widths = np.unique(np.append(counts[counts > least], least))
    over = counts.size - np.searchsorted(np.sort(counts), widths, side="right")
    return int(widths[np.argmin(counts.size * widths + over * columns)])


def _first_tile_top(similarity: torch.Tensor, first_column: int, tie_rank: torch.Tensor, k: int,
                    host_waits: bool) -> TopK:
    """`select_top` of a tile's k first (the rows' buffers empty). On the CPU, where the host may
    wait and the tile is at least PRUNE_WIDTH k wide, from its entries at or above a lower bound
    of each row's k-th largest similarity (`_kth_lower_bound`), packed (`_packed`) to the width
    that reads the fewest entries (`_cheapest_width`), the rows with more selected from whole (a
    row with no similar text: all 0): the selection reads a few k entries a row instead of the
    tile's width (1,536 x 2,000, k 50, one thread: 11-18 against 31-38 ms on TF-IDF's
    similarities; 40-43 against 83-104 ms on BLEU*'s, full of ties, and 40-83 ms packed to the
    widest row under half the tile). The same set: every entry of the first k is at or above
    the row's k-th largest similarity, so at or above the bound."""
    whole = _whole_tile(similarity, first_column, tie_rank)
    rows, columns = similarity.shape
    if not host_waits or similarity.device.type != "cpu" or not rows or columns < PRUNE_WIDTH * k:
        return select_top(whole.similarity, whole.index, k, tie_rank, whole.rank, host_waits)
    passing = Passing.of(similarity, _kth_lower_bound(similarity, k))
    width = _cheapest_width(passing.counts, columns, k)
    packed = _packed(passing, width, first_column, tie_rank)
    top = select_top(packed.similarity, packed.index, k, tie_rank, packed.rank, host_waits)
    wide = torch.from_numpy(np.flatnonzero(passing.counts > width))
    if wide.numel():
        rest = select_top(whole.similarity[wide], whole.index[wide], k, tie_rank, whole.rank[wide], host_waits)
        top.similarity[wide], top.index[wide] = rest.similarity, rest.index
    return top


def _kth_lower_bound(similarity: torch.Tensor, k: int) -> torch.Tensor:
    """A lower bound [rows, 1] of each row's k-th largest similarity: the k-th largest of the
    maxima of 2k chunks of the row (k of those maxima are k distinct entries at or above it). Two
    passes over the tile that cost a tenth of a selection from it."""
    rows, columns = similarity.shape
    width = columns // (2 * k)
    whole = 2 * k * width
    maxima = similarity[:, :whole].reshape(rows, 2 * k, width).amax(dim=2)
    if whole < columns:
        maxima = torch.cat([maxima, similarity[:, whole:].amax(dim=1, keepdim=True)], dim=1)
    return torch.topk(maxima, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)


def _whole_tile(similarity: torch.Tensor, first_column: int, tie_rank: torch.Tensor) -> Entrants:
    """Every entry of a tile (training columns from `first_column`) as entrants."""
    rows, columns = similarity.shape
    index = torch.arange(first_column, first_column + columns, device=similarity.device)
    return Entrants(similarity, index.expand(rows, columns),
                    tie_rank[first_column : first_column + columns].expand(rows, columns))


class TopKReduction:
    """The k most similar training texts of candidate rows 0..rows-1, tile by tile, ties
    broken by `tie_rank` (int64 [|S|], distinct, on the tiles' device). leave_one_out and subset
    exclude pairs as `NeighborReduction` does; `host_waits` false: the host reads nothing from
    the tiles (late tiles are not packed, `_entrants`, nor rows without ties selected apart,
    `select_top`): the token-ids path. `ordered` false: the result holds each row's k as a set,
    in no order (for sums over all k, which are exact in any order: ordering them was 5% of a
    default predict). On the CPU, where the host may wait and the compiled loops were built
    (`core.compiled`), each tile is merged in one compiled pass per row (`merge_top`, seeded with
    the row's buffer: the first tile and later training blocks alike) instead of the torch
    selections: the same set, as the order is total."""

    def __init__(
        self,
        rows: int,
        k: int,
        tie_rank: torch.Tensor,
        *,
        leave_one_out: bool = False,
        subset: TrainingSubset | None = None,
        host_waits: bool = True,
        ordered: bool = True,
    ) -> None:
        self.k = k
        self.host_waits, self.ordered = host_waits, ordered
        self.tie_rank = tie_rank
        device = tie_rank.device
        self.top = TopK(
            torch.full((rows, k), -torch.inf, dtype=torch.float64, device=device),
            torch.full((rows, k), torch.iinfo(torch.int64).max, dtype=torch.int64, device=device),
        )
        self.leave_one_out = leave_one_out
        self.subset = subset
        self._merged = np.zeros(rows, dtype=bool)  # on the host: rows that a tile has reached

    def add(self, tile: Tile) -> None:
        rows, columns = tile.values.shape
        similarity = tile.values.to(torch.float64)
        excluded = excluded_pairs(tile, self.leave_one_out, self.subset)
        if excluded is not None:
            similarity = similarity.masked_fill(excluded, -torch.inf)
        part = slice(tile.row, tile.row + rows)
        if native is not None and self.host_waits and similarity.device.type == "cpu":
            native.merge_top(similarity.contiguous().numpy(), tile.column, self.tie_rank.contiguous().numpy(),
                             self.top.similarity[part].numpy(), self.top.index[part].numpy())
            return
        first = columns >= self.k and not self._merged[part].any()
        self._merged[part] = True
        if first:
            # The rows' empty buffers come after every entry of the tile, so its first k are
            # the merge's (with a single training block, every tile: no copy of it is made).
            top = _first_tile_top(similarity, tile.column, self.tie_rank, self.k, self.host_waits)
            self.top.similarity[part], self.top.index[part] = top.similarity, top.index
            return
        held = TopK(self.top.similarity[part], self.top.index[part])
        entrants = _entrants(similarity, held.similarity.amin(dim=1, keepdim=True), tile.column, self.tie_rank,
                             self.host_waits)
        merged = select_top(
            torch.cat([held.similarity, entrants.similarity], dim=1),
            torch.cat([held.index, entrants.index], dim=1),
            self.k,
            self.tie_rank,
            torch.cat([_ranks(held.index, self.tie_rank), entrants.rank], dim=1),
            self.host_waits,
        )
        self.top.similarity[part], self.top.index[part] = merged.similarity, merged.index

    def keeps_nearest(self, leave_one_out: bool) -> bool:
        """Whether `nearest` is what a `NearestReduction(leave_one_out)` fed the same tiles finds:
        the same pairs excluded (no subset), and at least one kept."""
        return self.subset is None and self.leave_one_out == leave_one_out and self.k > 0

    def nearest(self) -> torch.Tensor:
        """Each row's highest similarity (-inf where no pair may be a neighbour): the best of the k
        it keeps, which are copies of the tiles' values, so a maximum of the same values, exact."""
        return self.top.similarity.amax(dim=1)

    def result(self) -> TopK:
        top = order_top(self.top, self.k, self.tie_rank) if self.ordered else self.top
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


def estimate_topk(top: TopK, quality: Quality, k: int, power: float, host_waits: bool = True) -> TensorPrediction:
    """Similarity-weighted mean (and spread) of q over the first k of `top` with a positive
    similarity; undefined (NaN) where there is none. `quality` is the training set's (on the
    device of `top`). Exact sums: each weight is a whole number of units and each q limb an
    integer, and k <= 2^19 products of them stay below 2^52, so a float64 sum of them is exact
    in any order. `host_waits` false: the host reads nothing from the tensors (the token-ids
    path)."""
    return estimate_topk_grid(top, quality, [k], power, host_waits=host_waits)[0]


def estimate_topk_grid(top: TopK, quality: Quality, ks: Sequence[int], power: float,
                       spread: bool = True, host_waits: bool = True) -> list[TensorPrediction]:
    """`estimate_topk` at each k of `ks` from one pass over the first max(ks) entries of `top`:
    running sums along each row, read at every k (tuning's grid reads all its k from one list).
    Each running sum is exact, as the sums are, so each k gets the bits of its own sum; and
    only which entries come before each k counts, not their order there (`rank_segments`).
    `spread` False: the estimates alone, std NaN (tuning ranks estimates; the spread's exact
    square roots were a third of its time)."""
    sums, counts = running_sums(top, quality, ks, power, host_waits)
    rows = sums.shape[0]
    predictions = []
    for position in range(len(ks)):
        stats = NeighborStats.zeros(rows, len(quality.bands), sums.device, power, weighted=True)
        stats.add_sums(slice(None), sums[:, position])
        stats.count = counts[:, position]
        if spread:
            mean, std = moments(stats, quality)
        else:
            mean = weighted_mean(stats.weight, stats.total, quality)
            std = torch.full_like(mean, float("nan"))
        defined = stats.count > 0
        nan = torch.full_like(mean, float("nan"))
        predictions.append(TensorPrediction(
            scores=torch.where(defined, mean, nan),
            num_neighbors=stats.count,
            std=torch.where(defined, std, nan),
            covered=defined,
            estimator="topk",
        ))
    return predictions


def running_sums(top: TopK, quality: Quality, ks: Sequence[int], power: float,
                 host_waits: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact int64 sums of weight x `quality.weighted_columns` over each row's first k entries
    of `top` with a positive similarity, for each k of `ks` [rows, len(ks), columns], and how
    many entries those are [rows, len(ks)] (`estimate_topk_grid` reads its estimates off
    them; nested tuning subtracts one text from them). `host_waits` false: the host reads
    nothing from the tensors (the token-ids path)."""
    top = top.first(max(ks))
    width = top.index.shape[1]
    at = [min(k, width) for k in ks]  # host ints: reading them makes no copy to the device
    ends = sorted(set(at))
    read = [ends.index(position) for position in at]

    def running(segments: torch.Tensor) -> torch.Tensor:
        """Sums of each row's first `at` entries from its segments' sums [rows, segments, ...]:
        running sums in int64 (a float cumsum has no deterministic CUDA kernel), read at each k."""
        sums = segments.to(torch.int64)
        if sums.shape[1] > 1:
            sums = sums.cumsum(dim=1)
        return torch.stack([sums[:, position] for position in read], dim=1)  # int indices: no copy to the device

    table = quality.weighted_columns
    if native is not None and host_waits and top.index.device.type == "cpu":
        # One compiled pass per row (`topk_sums`): the same integers as the passes below, which
        # read nothing on the host (the token-ids path takes them, as a device does).
        sums = torch.empty((top.index.shape[0], len(ends), table.shape[1]), dtype=torch.int64)
        counts = torch.empty((top.index.shape[0], len(ends)), dtype=torch.int64)
        native.topk_sums(top.similarity.contiguous().numpy(), top.index.contiguous().numpy(),
                         np.asarray(ends, dtype=np.int64), table.contiguous().numpy(), float(power), sums.numpy(),
                         counts.numpy())
        return running(sums), running(counts)
    positive = (top.index >= 0) & (top.similarity > 0)
    weights = torch.where(positive, quantised_weights(top.similarity, power), 0.0)
    index = top.index.clamp(min=0, max=max(quality.raw.numel() - 1, 0))  # in range: the product reads by it unchecked
    return running(_segment_sums(weights, index, ends, table)), running(_segment_totals(positive, ends))


def _segment_sums(weights: torch.Tensor, index: torch.Tensor, ends: list[int], table: torch.Tensor) -> torch.Tensor:
    """Sums of weights[r, j] * table[index[r, j]] over the positions j of each segment of each
    row (from the previous end to each of `ends`, ascending), [rows, len(ends), table's columns].
    On the CPU one product of a sparse matrix (a row per row and segment, its weights at their
    training indices) by the table, 7x faster than gathering the table column by column (2,000
    rows x 1,000 entries, 18 columns, one thread); elsewhere by those gathers
    (`_gathered_segment_sums`: cuSPARSE takes a CSR row's column indices as sorted and distinct,
    which a top list's are not). The terms are whole numbers whose sums stay below 2^52
    (`estimate_topk`), so each sum is exact in any order, on any device."""
    rows, used, device = weights.shape[0], ends[-1], weights.device
    if not rows or not used or not table.shape[0]:
        return torch.zeros((rows, len(ends), table.shape[1]), dtype=torch.float64, device=device)
    if device.type != "cpu":
        return _gathered_segment_sums(weights, index, ends, table)
    starts = torch.cat([torch.full((1,), start, dtype=torch.int64, device=device) for start in [0, *ends[:-1]]])
    offsets = torch.cat([(torch.arange(rows, device=device)[:, None] * used + starts).flatten(),
                         torch.full((1,), rows * used, dtype=torch.int64, device=device)])
    matrix = csr_matrix(offsets, index[:, :used].flatten(), weights[:, :used].flatten(),
                        (rows * len(ends), table.shape[0]))
    return torch.sparse.mm(matrix, table).view(rows, len(ends), table.shape[1])


def _gathered_segment_sums(weights: torch.Tensor, index: torch.Tensor, ends: list[int],
                           table: torch.Tensor) -> torch.Tensor:
    """`_segment_sums` by gathering the table one column at a time."""
    return torch.stack([_segment_totals(weights * table[:, column][index], ends) for column in range(table.shape[1])],
                       dim=2)


def _segment_totals(values: torch.Tensor, ends: list[int]) -> torch.Tensor:
    """[rows, len(ends)]: each row's sum of `values` [rows, width] from the previous end to each
    of `ends` (ascending)."""
    return torch.stack([values[:, start:end].sum(dim=1) for start, end in zip([0, *ends], ends)], dim=1)
