"""Reductions of the one tile loop (`core.tiling.reduce_tiles`) for the all-pairs jobs: row means
within groups (MBR expected utility), the whole matrix written to a float32 `.npy` file, and the
pairs at or above a threshold handed on tile by tile. None keeps more than a row's worth of
state per candidate, so memory stays bounded by the tile whatever the size of the job. (The k
most similar texts per row are `core.topk.TopKReduction`.)
"""
from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import torch

from gpu_neighbors.core.files import NOFOLLOW, naming
from gpu_neighbors.core.neighbours import decode_limbs
from gpu_neighbors.core.tiling import Reduction, Tile

Inner = TypeVar("Inner")
NPY_DTYPE = np.dtype("<f4")


def diagonal_mask(tile: Tile) -> torch.Tensor | None:
    """Where a tile of a set against itself pairs a text with itself (bool [rows, columns]);
    None when the tile holds no such pair."""
    rows, columns = tile.values.shape
    if not (tile.row < tile.column + columns and tile.column < tile.row + rows):
        return None
    device = tile.values.device
    row = torch.arange(tile.row, tile.row + rows, device=device)
    return row[:, None] == torch.arange(tile.column, tile.column + columns, device=device)[None, :]


class GroupMeanReduction:
    """Each text's mean similarity to the *other* texts of its group, for a set against itself:
    an exact sum and a count per row, no matrix. `groups` (int64 [texts], on the tiles' device)
    names each text's group; pairs across groups are ignored, so tiles need only cover the pairs
    within groups. Rows with no other text in their group get NaN.

    Each similarity is rounded to a whole number of 2^-SUM_SHIFT units (|k| < 2^15: every
    kernel's range) and summed as integers in two limbs, so the sums are the same bits on every
    device, in every tiling and order: a float sum would depend on the order a device adds in."""

    SUM_SHIFT = 48
    LIMB_BITS = 24

    def __init__(self, groups: torch.Tensor) -> None:
        self.groups = groups
        self.sums = torch.zeros((groups.numel(), 2), dtype=torch.int64, device=groups.device)
        self.counts = torch.zeros(groups.numel(), dtype=torch.int64, device=groups.device)

    def add(self, tile: Tile) -> None:
        rows, columns = tile.values.shape
        part = slice(tile.row, tile.row + rows)
        same = self.groups[part, None] == self.groups[None, tile.column : tile.column + columns]
        itself = diagonal_mask(tile)
        if itself is not None:
            same &= ~itself
        fixed = torch.round(tile.values.to(torch.float64) * 2.0**self.SUM_SHIFT).to(torch.int64)
        fixed = torch.where(same, fixed, 0)
        high = torch.div(fixed, 2**self.LIMB_BITS, rounding_mode="floor")
        self.sums[part, 0] += high.sum(dim=1)
        self.sums[part, 1] += (fixed - high * 2**self.LIMB_BITS).sum(dim=1)
        self.counts[part] += same.sum(dim=1)

    def result(self) -> torch.Tensor:
        total = decode_limbs(self.sums, self.LIMB_BITS, self.SUM_SHIFT)
        return torch.where(self.counts > 0, total / self.counts.clamp(min=1), float("nan"))


class NpyReduction:
    """Every tile written at its place in a float32 `.npy` file [rows, columns] (C order), with
    positioned writes rather than a writable memory map, whose dirty pages would count against
    the process until unmapped: the file goes through the page cache and the process holds only
    the tile. `np.load(path, mmap_mode="r")` maps the result back. `path` must exist already
    (the output mechanism creates it exclusively) and is never opened through a link."""

    def __init__(self, path: str | os.PathLike[str], rows: int, columns: int) -> None:
        self.path = Path(path)
        self.columns = columns
        # Never through a symbolic link: the caller made the file (exclusively) for us, and a link
        # put in its place since would send the matrix into the link's target.
        flags = os.O_WRONLY | os.O_TRUNC | NOFOLLOW
        with naming(self.path), os.fdopen(os.open(self.path, flags), "wb") as handle:  # sized: past a limit, named
            header = {"descr": np.lib.format.dtype_to_descr(NPY_DTYPE), "fortran_order": False,
                      "shape": (rows, columns)}
            np.lib.format.write_array_header_2_0(handle, header)
            self.offset = handle.tell()
            handle.truncate(self.offset + rows * columns * NPY_DTYPE.itemsize)
        self.descriptor: int | None = os.open(self.path, os.O_WRONLY | NOFOLLOW)

    def add(self, tile: Tile) -> None:
        assert self.descriptor is not None, "the file is closed: result() was called"
        values = np.ascontiguousarray(tile.values.to(torch.float32).cpu().numpy(), dtype=NPY_DTYPE)
        rows, columns = values.shape
        item = NPY_DTYPE.itemsize
        if columns == self.columns:  # whole rows: one contiguous write
            write_at(self.descriptor, values.data, self.offset + tile.row * self.columns * item, self.path)
            return
        for index in range(rows):
            start = ((tile.row + index) * self.columns + tile.column) * item
            write_at(self.descriptor, values[index].data, self.offset + start, self.path)

    def result(self) -> Path:
        if self.descriptor is not None:
            with naming(self.path):
                os.fsync(self.descriptor)
            os.close(self.descriptor)
            self.descriptor = None
        return self.path


def write_at(descriptor: int, data: memoryview, offset: int, path: Path) -> None:
    """All of `data` written at `offset` of `path`'s open `descriptor`. A positioned write may
    write less than asked (a full disk under a file sized in advance, with holes); the rest is
    written again, so a disk that stays full raises ENOSPC, naming the file, instead of leaving
    zeros where the values belonged."""
    view = memoryview(data).cast("B")
    while view:
        try:
            written = os.pwrite(descriptor, view, offset)
        except OSError as error:
            raise OSError(error.errno, error.strerror, str(path)) from None
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        view, offset = view[written:], offset + written


PairSink = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


class PairsAboveReduction:
    """The pairs with similarity >= `min_similarity`, handed to `sink(rows, columns, values)`
    tile by tile (int64, int64, float64 on the CPU; in (row, column) order within a tile), so
    nothing accumulates here; `exclude_self` leaves out a text paired with itself. `result` is
    the number of pairs handed on."""

    def __init__(self, min_similarity: float, sink: PairSink, exclude_self: bool = False) -> None:
        self.min_similarity = min_similarity
        self.sink = sink
        self.exclude_self = exclude_self
        self.count = 0

    def add(self, tile: Tile) -> None:
        kept = tile.values >= self.min_similarity
        itself = diagonal_mask(tile) if self.exclude_self else None
        if itself is not None:
            kept &= ~itself
        rows, columns = kept.nonzero(as_tuple=True)
        values = tile.values[rows, columns].to(torch.float64).cpu()
        self.sink((rows + tile.row).cpu(), (columns + tile.column).cpu(), values)
        self.count += int(values.numel())

    def result(self) -> int:
        return self.count


class MaskBelow(Generic[Inner]):
    """Another reduction fed each tile with similarities below `min_similarity` set to -inf
    (what `TopKReduction` counts as no neighbour)."""

    def __init__(self, reduction: Reduction[Inner], min_similarity: float) -> None:
        self.reduction = reduction
        self.min_similarity = min_similarity

    def add(self, tile: Tile) -> None:
        values = tile.values.masked_fill(tile.values < self.min_similarity, -torch.inf)
        self.reduction.add(Tile(values, tile.row, tile.column))

    def result(self) -> Inner:
        return self.reduction.result()
