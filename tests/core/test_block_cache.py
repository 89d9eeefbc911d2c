"""core/tiling.py's BlockCache: what a kernel derives from a block of training texts is made once
a block, kept across chunks, cleared by a block of another tiling, and never pickled."""
from __future__ import annotations

import pickle

from gpu_neighbors.core.tiling import BlockCache


def test_a_block_is_made_once_and_another_tiling_clears_the_kept_ones():
    made: list[tuple[int, int]] = []
    cache: BlockCache[str] = BlockCache()

    def get(start: int, stop: int) -> str:
        def make() -> str:
            made.append((start, stop))
            return f"{start}-{stop}"
        return cache.made(start, stop, make)

    assert [get(0, 10), get(10, 20), get(0, 10), get(10, 20)] == ["0-10", "10-20", "0-10", "10-20"]
    assert made == [(0, 10), (10, 20)]  # two chunks, one making of each block
    assert get(5, 15) == "5-15" and set(cache) == {(5, 15)}  # another tiling's block: the others go
    assert get(15, 25) == "15-25" and set(cache) == {(5, 15), (15, 25)}  # touching, not overlapping
    assert get(10, 20) == "10-20" and set(cache) == {(10, 20)}  # overlapping both
    assert pickle.loads(pickle.dumps(cache)) == {}
