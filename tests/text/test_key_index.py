"""The hash index gives every key the position a binary search of the sorted table gives."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_neighbors.text.key_index import KeyIndex


def binary_search(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if not table.size:
        return np.full(keys.shape, -1, dtype=np.int64)
    position = np.minimum(np.searchsorted(table, keys), table.size - 1)
    return np.where(table[position] == keys, position, -1)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("dense", [False, True], ids=["hashed", "dense"])
@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000, 50_000])
def test_positions_equal_binary_search(size, dense, compiled, monkeypatch):
    """By hash and by a table indexed by the key (forced each way), probed in C where built
    (`text.compiled`) or by numpy's passes, on keys past the table's, negative ones and
    colliding ones."""
    if not compiled:
        monkeypatch.setattr("gpu_neighbors.text.key_index.native", None)
    monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_KEYS", 1 << 30 if dense else 0)
    monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_PER_KEY", 0)
    assert (KeyIndex(np.arange(3, dtype=np.int64))._dense is not None) == dense
    rng = np.random.default_rng(size)
    table = np.unique(rng.integers(0, 4 * size + 10, size))
    # Keys that collide on purpose: multiples of a power of two share their low bits (kept
    # within a few MB of slots where indexed by key).
    table = np.unique(np.concatenate([table, np.arange(min(size, 500), dtype=np.int64) << (10 if dense else 20)]))
    keys = np.concatenate([table, table[::-1], rng.integers(-5, 8 * size + 20, 3 * size + 10), [-1, 0, 2**62]])
    assert np.array_equal(KeyIndex(table).find(keys), binary_search(table, keys))
    assert KeyIndex(table).find(np.zeros(0, dtype=np.int64)).shape == (0,)
    grid = keys[: keys.size // 2 * 2].reshape(2, -1)
    assert np.array_equal(KeyIndex(table).find(grid), binary_search(table, grid))
