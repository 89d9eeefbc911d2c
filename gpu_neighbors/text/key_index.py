"""Where each of many int64 keys sits in a sorted table of keys, at a slot or two per key.

`np.searchsorted` answers this by binary search: log2(n) dependent reads a key, most of them
mispredicted branches (85 ns a key into a table of 1,307 keys, measured while encoding TF-IDF
n-grams, the largest part of their cost). `KeyIndex` answers the same question from a hash
table over the table's positions: a key's home slot is the top bits of the key times an odd
constant (Fibonacci hashing, mod 2^64), collisions go to the next slot (linear probing), and the
table holds at least twice as many slots as keys, so a lookup reads about two slots. Built and
read by whole-array numpy passes, one per probe step, so no Python runs per key; the answer is
the key's position in the sorted table whatever the slots, so it is the same as a binary
search's. Where the table's keys are all small (below max(DENSE_KEYS, DENSE_PER_KEY x their
number): a TF-IDF table of character bigrams, a small training set's n-grams), a table indexed by
the key answers instead, in one read: no hashing, no probing (TF-IDF encoding, one thread: 8.9-9.3
against 10.6-10.9 us a candidate against 10 training texts, 17.2-17.8 against 18.2-20.0 against
2,000).
"""
from __future__ import annotations

import numpy as np

from gpu_neighbors.text.compiled import native

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio, odd
DENSE_KEYS = 1 << 16
DENSE_PER_KEY = 8  # so at most 512 KiB, or 64 bytes a key (the hash: about 40)


def indexed_by_key(top: int, size: int) -> bool:
    """Whether `size` keys below `top` are kept in a table indexed by the key: at most
    max(DENSE_KEYS, DENSE_PER_KEY x size) slots (here, and typicality's counts by key)."""
    return top <= max(DENSE_KEYS, DENSE_PER_KEY * size)


class KeyIndex:
    """Positions of keys (int64; a negative one is absent) in `table` (sorted, distinct,
    non-negative int64)."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        size = table.size
        top = int(table[-1]) + 1 if size else 0
        self._dense: np.ndarray | None = None
        if indexed_by_key(top, size):
            # Position by key, and -1 in a last slot past every key, where the keys asked that
            # are negative or past the table land (read as unsigned, clipped to it).
            self._dense = np.full(top + 1, -1, dtype=np.int64)
            self._dense[table] = np.arange(size, dtype=np.int64)
            return
        bits = max(4, int(2 * size).bit_length())  # at least 2 slots a key
        self._shift = np.uint64(64 - bits)
        self._mask = (1 << bits) - 1
        # Each slot holds a position in `table`, or `size` where empty: `_keys[size]` is the
        # least int64, which no key asked for equals (a negative one is absent), so an empty slot
        # reads as a miss without a test of its own.
        self._keys = np.append(table.astype(np.int64), np.iinfo(np.int64).min)
        self._slots = np.full(1 << bits, size, dtype=np.int64)
        pending = np.arange(size, dtype=np.int64)
        slots = self._home(self._keys[:-1])
        while pending.size:
            free = self._slots[slots] == size
            # Of the keys reaching a free slot at once, the first takes it; the rest probe on.
            taken, first = np.unique(slots[free], return_index=True)
            winners = np.flatnonzero(free)[first]
            self._slots[taken] = pending[winners]
            waiting = np.ones(pending.size, dtype=bool)
            waiting[winners] = False
            pending, slots = pending[waiting], (slots[waiting] + 1) & self._mask

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
        """The index as plain arrays, for the compiled loops (`text.compiled`): (position by key
        with its last slot -1, or empty), (slots, or empty), (keys with the empty slot's
        sentinel last, or empty), the home slot's shift and the slots' mask."""
        empty = np.zeros(0, dtype=np.int64)
        if self._dense is not None:
            return self._dense, empty, empty, 0, 0
        return empty, self._slots, self._keys, int(self._shift), self._mask

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return ((keys.view(np.uint64) * _MULTIPLIER) >> self._shift).view(np.int64)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """Each key's position in the table (int64), or -1 where it is absent."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if self._dense is not None:
            return self._dense[np.minimum(keys.view(np.uint64), np.uint64(self._dense.size - 1))]
        shape, keys = keys.shape, keys.reshape(-1)
        if native is not None:  # the same probes, key by key in C
            found = np.empty(keys.size, dtype=np.int64)
            native.find_keys(*self.arrays(), keys, found)
            return found.reshape(shape)
        size = self.table.size
        slots = self._home(keys)
        positions = self._slots[slots]
        hit = self._keys[positions] == keys
        found = np.where(hit, positions, -1)
        probing = np.flatnonzero(~hit & (positions != size))
        slots = slots[probing]
        while probing.size:
            slots = (slots + 1) & self._mask
            positions = self._slots[slots]
            hit = self._keys[positions] == keys[probing]
            found[probing[hit]] = positions[hit]
            going_on = ~hit & (positions != size)
            probing, slots = probing[going_on], slots[going_on]
        return found.reshape(shape)


def concatenated(indexes: list[KeyIndex]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Several indexes' `arrays()` as one dense table, one slots array and one keys array, with
    each index's bounds in them (int64 [indexes, 7]: dense start and size, slots start, keys
    start and size, shift, mask): what a compiled loop over several tables reads."""
    arrays = [index.arrays() for index in indexes]
    dense = [item[0] for item in arrays]
    slots = [item[1] for item in arrays]
    keys = [item[2] for item in arrays]
    bounds = np.zeros((len(arrays), 7), dtype=np.int64)
    for column, parts in ((0, dense), (2, slots), (3, keys)):
        sizes = np.array([part.size for part in parts], dtype=np.int64)
        bounds[:, column] = np.cumsum(sizes) - sizes
        if column != 2:
            bounds[:, column + 1] = sizes
    bounds[:, 5] = [item[3] for item in arrays]
    bounds[:, 6] = [item[4] for item in arrays]

    def joined(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    return joined(dense), joined(slots), joined(keys), bounds
