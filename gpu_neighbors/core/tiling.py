"""The one tile loop: for each chunk of candidates, for each block of the training set, one
similarity tile, handed at once to a reduction.

The device and the memory budget size the tiles (`TilePlan`); a kernel makes them; a
`Reduction` turns each into something small (neighbour statistics, the whole matrix, ...) and
never knows which kernel made it. Every pass over candidates x training texts runs here, so a
new reduction never copies the loop.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch

from gpu_neighbors.core.host_memory import keep_freed_memory

DEFAULT_CPU_BUDGET = 1 << 30  # bytes of tile working memory on CPU
CUDA_BUDGET_SHARE = 0.5  # of the device's free memory
MAX_CHUNK_ROWS = 4096
# Fewer candidates per chunk and the fixed costs of a tile (encoding, cutting the training side
# into a block) dominate: a large training set is cut into more blocks instead.
MIN_CHUNK_ROWS = 1024
# On a CPU a bigger tile is no faster (measured: 1-8 Mi pairs within noise), and past 32 MiB
# (4 Mi float64 pairs) glibc maps fresh pages for every tile: 3 Mi pairs stay below that.
CPU_TILE_PAIRS = 3 << 20
# On a GPU a tile's sparse products (cuSPARSE SpGEMM) take a workspace that grows with their
# intermediate products, one per shared occurrence feature of a pair: up to the candidate's
# length per pair, which `pair_bytes` cannot bound, and PyTorch issue 95169 reports COO x COO
# allocating far beyond its result on CUDA. So GPU tiles stop at 2^26 pairs (a 512 MiB float64
# tile) and the rest of the budget (half the free memory) is headroom for that workspace; per-tile
# costs are a few kernel launches, negligible at that size.
CUDA_TILE_PAIRS = 1 << 26

Span = tuple[int, int]  # rows or columns start..stop-1
Encoded = TypeVar("Encoded")
Result = TypeVar("Result", covariant=True)
Key = TypeVar("Key")
Value = TypeVar("Value")


def resolve_device(device: str | torch.device) -> torch.device:
    """`auto` picks CUDA when present, else the CPU; a name or a `torch.device` must be the CPU
    or a CUDA device this machine has."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"unknown device {device!r}: {error}") from None
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r} cannot score: use auto, cpu, cuda or cuda:N")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available here")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r} asked for, but this machine has {torch.cuda.device_count()} CUDA "
                         "device(s), numbered from 0")
    return resolved


def default_memory_budget(device: torch.device) -> int:
    """Half the free memory of a CUDA device; on the CPU 1 GiB, or a quarter of the memory
    the host has available when that is less."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * CUDA_BUDGET_SHARE)
    available = _available_host_memory()
    return DEFAULT_CPU_BUDGET if available is None else min(DEFAULT_CPU_BUDGET, available // 4)


def _available_host_memory() -> int | None:
    """MemAvailable of Linux (free memory plus what the page cache would give back), else the
    free physical memory where the platform tells it, else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def spans(total: int, width: int) -> list[Span]:
    """0..total-1 cut into consecutive spans of `width` (the last one shorter)."""
    return [(start, min(start + width, total)) for start in range(0, total, width)]


@dataclass(frozen=True)
class TilePlan:
    """How many candidates per chunk and training texts per block fit the memory budget."""

    chunk_rows: int
    block_columns: int

    @classmethod
    def from_budget(
        cls,
        budget: int,
        pair_bytes: int,
        num_train: int,
        chunk_rows: int | None,
        max_pairs: int | None = None,
    ) -> TilePlan:
        """Tiles of at most budget / pair_bytes pairs (and `max_pairs`): whole training rows
        when they fit MIN_CHUNK_ROWS candidates, else MIN_CHUNK_ROWS candidates against
        training blocks, so that |S| = 10^6 runs in the same budget as |S| = 10^3."""
        pairs = max(budget // max(pair_bytes, 1), 1)
        if max_pairs is not None:
            pairs = min(pairs, max_pairs)
        if chunk_rows is None:
            chunk_rows = int(min(MAX_CHUNK_ROWS, pairs, max(pairs // max(num_train, 1), MIN_CHUNK_ROWS)))
        block = int(min(max(num_train, 1), max(pairs // chunk_rows, 1)))
        return cls(chunk_rows=chunk_rows, block_columns=block)

    @classmethod
    def for_device(
        cls,
        device: torch.device,
        pair_bytes: int,
        num_train: int,
        memory_budget: int | None = None,
        chunk_rows: int | None = None,
    ) -> TilePlan:
        """`from_budget` with the device's budget (unless `memory_budget` is given) and at most
        CPU_TILE_PAIRS (CPU) or CUDA_TILE_PAIRS (GPU) pairs a tile."""
        budget = memory_budget or default_memory_budget(device)
        max_pairs = CPU_TILE_PAIRS if device.type == "cpu" else CUDA_TILE_PAIRS
        return cls.from_budget(budget, pair_bytes, num_train, chunk_rows, max_pairs)

    def chunks(self, rows: int) -> list[Span]:
        return spans(rows, self.chunk_rows)

    def blocks(self, columns: int) -> list[Span]:
        return spans(columns, self.block_columns)


@dataclass(frozen=True)
class Tile:
    """Similarities of candidate rows row.. against training columns column.., [rows, cols]."""

    values: torch.Tensor
    row: int
    column: int


class Reduction(Protocol[Result]):
    """What a pass makes of its tiles: `add` each one as it comes (in any order), then
    `result`."""

    def add(self, tile: Tile) -> None: ...

    def result(self) -> Result: ...


def reduce_tiles(
    encode: Callable[[int, int], Encoded],
    tile: Callable[[Encoded, int, int], torch.Tensor],
    chunks: Iterable[Span],
    blocks: Sequence[Span],
    reduction: Reduction[Result],
    on_chunk: Callable[[int], Any] | None = None,
) -> Result:
    """The tile loop. `encode(first, last)` prepares candidate rows first..last-1 once per
    chunk; `tile(encoded, start, stop)` gives their similarities to training texts
    start..stop-1; `on_chunk(rows)` follows each chunk (progress bars). The host's allocator
    keeps what a tile frees for the next (`core.host_memory`)."""
    keep_freed_memory()
    for first, last in chunks:
        encoded = encode(first, last)
        for start, stop in blocks:
            reduction.add(Tile(tile(encoded, start, stop), first, start))
        if on_chunk is not None:
            on_chunk(last - first)
    return reduction.result()


class MatrixReduction:
    """Collects every tile into one float64 matrix on the CPU: for passes that keep all pairs
    (evaluation sets, parity tests), never for streams of candidates."""

    def __init__(self, rows: int, columns: int) -> None:
        self.matrix = torch.zeros((rows, columns), dtype=torch.float64)

    def add(self, tile: Tile) -> None:
        rows, columns = tile.values.shape
        self.matrix[tile.row : tile.row + rows, tile.column : tile.column + columns] = tile.values.cpu()

    def result(self) -> torch.Tensor:
        return self.matrix


class TransientCache(dict[Key, Value]):
    """Derived state built on first use (tables per device, subset draw counts): pickles as empty,
    so a fitted object moved to another device or process rebuilds it there."""

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (type(self), ())


class BlockCache(TransientCache[tuple[int, int], Value]):
    """What a kernel derives from one block of training texts (start, stop), made once and kept:
    every chunk of candidates meets the same blocks. At most one tiling's blocks are kept (about
    one copy of what is derived): a block overlapping a kept one, of another tiling, clears them."""

    def made(self, start: int, stop: int, make: Callable[[], Value]) -> Value:
        if (start, stop) not in self:
            if any(first < stop and start < last for first, last in self):
                self.clear()
            self[start, stop] = make()
        return self[start, stop]


class HostTensors:
    """Mixin for objects whose attributes named in `host_tensors` must stay CPU tensors when
    pickled and loaded elsewhere: `torch.load(..., map_location=device)` moves every tensor it
    unpickles, so these travel as numpy arrays (which it leaves alone) and come back as CPU
    tensors: a scorer pickled and loaded that way onto a GPU keeps its host tables. (Ray's workers
    load a saved folder instead, `NeighborsScorer.load`; nothing there is unpickled.)"""

    host_tensors: ClassVar[tuple[str, ...]] = ()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in self.host_tensors:
            value = state.get(name)
            if isinstance(value, torch.Tensor):
                state[name] = value.cpu().numpy()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in self.host_tensors:
            value = state.get(name)
            if isinstance(value, np.ndarray):
                state[name] = torch.from_numpy(value)
        self.__dict__.update(state)
