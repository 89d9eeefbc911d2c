"""The core's compiled host loops (`core._compiled`, Cython) against the torch passes they
replace: the running top k of a CPU tile loop merged by `merge_top` holds the same set, bit for
bit, as the torch selections, on tiles made to break it; the top-k estimate's sums by
`topk_sums` are the torch passes' integers; the dense passes BLEU* runs after torch's products
(`rows_times_indicator`, `scale_entries`) are torch's gathers and multiplies bit for bit; and one
loader and switch for both layers' compiled modules (`gpu_neighbors._extensions`)."""
from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import torch

from gpu_neighbors.core import topk
from gpu_neighbors.core.neighbours import TrainingSubset
from gpu_neighbors.core.tiling import Tile
from gpu_neighbors.core.topk import TopK, TopKReduction, select_top
from compiled_modules import built

EMPTY = torch.iinfo(torch.int64).max


def _built() -> ModuleType:
    return built("gpu_neighbors.core._compiled")


def test_the_install_built_the_core_loops():
    assert _built() is not None


def _as_set(top: TopK) -> list[list[tuple[int, int]]]:
    """Each row's (index, similarity's bits) entries, sorted: the set a buffer holds, whatever its
    order (bits: 0 and -0 are told apart)."""
    bits = top.similarity.contiguous().view(torch.int64)
    return [sorted(zip(index, similarity)) for index, similarity in zip(top.index.tolist(), bits.tolist())]


def _tiles(similarity: torch.Tensor, chunk: int, block: int, generator: torch.Generator) -> list[Tile]:
    rows, columns = similarity.shape
    tiles = [Tile(similarity[row:row + chunk, column:column + block], row, column)
             for row in range(0, rows, chunk) for column in range(0, columns, block)]
    return [tiles[order] for order in torch.randperm(len(tiles), generator=generator).tolist()]


def _adversarial(rows: int, columns: int, generator: torch.Generator) -> torch.Tensor:
    """Similarities full of ties (5 values, 0 and -0 among them), excluded pairs (-inf), rows all
    equal, all 0, all -inf, rows with a single positive entry, rows of distinct values and rows
    rising to a last quarter that falls (the best all in the last chunks, more above the bound
    than the room holds, and the best first)."""
    similarity = torch.randint(0, 5, (rows, columns), generator=generator).to(torch.float64) / 4
    similarity[(similarity == 0) & (torch.rand((rows, columns), generator=generator) < 0.5)] = -0.0
    similarity[torch.rand((rows, columns), generator=generator) < 0.15] = -torch.inf
    similarity[1::9] = 0.5
    similarity[2::9] = 0.0
    similarity[3::9] = -torch.inf
    similarity[4::9] = 0.0
    similarity[4::9, columns // 2] = 0.25  # fewer than k positive entries
    similarity[5::9] = torch.rand((len(range(5, rows, 9)), columns), generator=generator, dtype=torch.float64)
    ascending = torch.linspace(0.1, 0.9, columns, dtype=torch.float64)
    ascending[-(columns // 4):] = ascending[-(columns // 4):].flip(0)  # the last quarter's best first
    similarity[6::9] = ascending
    return similarity


def _run(tiles: list[Tile], rows: int, k: int, tie_rank: torch.Tensor, native: ModuleType | None,
         monkeypatch: pytest.MonkeyPatch, **settings) -> tuple[list, TopK]:
    """The buffer's set after every tile, and the result, with the compiled merge or without."""
    monkeypatch.setattr(topk, "native", native)
    reduction = TopKReduction(rows, k, tie_rank, **settings)
    sets = []
    for tile in tiles:
        reduction.add(tile)
        sets.append(_as_set(reduction.top))
    return sets, reduction.result()


@pytest.mark.parametrize(("k", "chunk", "block"), [(1, 16, 7), (1, 16, 200), (2, 9, 200), (3, 10, 64), (7, 16, 200),
                                                   (10, 16, 200), (10, 7, 3), (25, 16, 64), (50, 16, 30),
                                                   (300, 16, 200)])
@pytest.mark.parametrize("exclusion", ["none", "leave-one-out", "subset", "both"])
def test_the_compiled_merge_keeps_the_torch_passes_set_after_every_tile(monkeypatch, k, chunk, block, exclusion):
    """Tiles in a shuffled order (a first tile, later training blocks merged into full and part
    full buffers), k below, at and above the tile's width and above the training set, tiles
    wide enough to be gathered above a bound (2k chunks, with columns left over) and to fill the
    room (k 1 and 2 of 200 columns): after
    every tile the buffer holds the same entries (excluded and empty slots included) as the
    torch selections', and the ordered result is the same bits."""
    built = _built()
    generator = torch.Generator().manual_seed(k * 1000 + block)
    rows, size = 45, 200
    tie_rank = torch.randperm(size, generator=generator)
    similarity = _adversarial(rows, size, generator)
    settings: dict = {"leave_one_out": exclusion in ("leave-one-out", "both")}
    if exclusion in ("subset", "both"):
        mask = torch.rand(size, generator=generator) < 0.6
        settings["subset"] = TrainingSubset(mask, int(mask.sum()))
    tiles = _tiles(similarity, chunk, block, generator)
    for ordered in (True, False):
        compiled_sets, compiled_top = _run(tiles, rows, k, tie_rank, built, monkeypatch, ordered=ordered, **settings)
        torch_sets, torch_top = _run(tiles, rows, k, tie_rank, None, monkeypatch, ordered=ordered, **settings)
        assert compiled_sets == torch_sets
        if ordered:
            assert torch.equal(compiled_top.similarity.view(torch.int64), torch_top.similarity.view(torch.int64))
            assert torch.equal(compiled_top.index, torch_top.index)
        else:
            assert _as_set(compiled_top) == _as_set(torch_top)


@pytest.mark.parametrize("k", [1, 4, 16, 40])
def test_merge_top_is_select_top_of_the_buffer_and_the_tile(k):
    """`merge_top` against `select_top` of a held buffer (entries, excluded entries with real
    indices, empty slots) and a tile side by side: the same set in each row."""
    built = _built()
    generator = torch.Generator().manual_seed(k)
    rows, size, first, columns = 36, 120, 50, 40
    tie_rank = torch.randperm(size, generator=generator)
    held = TopK(torch.randint(0, 4, (rows, k), generator=generator).to(torch.float64) / 4,
                torch.randperm(first, generator=generator)[:k].repeat(rows, 1) if k <= first else
                torch.arange(k).repeat(rows, 1))
    held.similarity[torch.rand((rows, k), generator=generator) < 0.2] = -torch.inf
    empty = torch.rand((rows, k), generator=generator) < 0.2
    held.similarity[empty], held.index[empty] = -torch.inf, EMPTY
    tile = _adversarial(rows, columns, generator)
    ranks = torch.where(held.index < size, tie_rank[held.index.clamp(max=size - 1)], size)
    expected = select_top(torch.cat([held.similarity, tile], dim=1),
                          torch.cat([held.index, torch.arange(first, first + columns).expand(rows, columns)], dim=1),
                          k, tie_rank, torch.cat([ranks, tie_rank[first:first + columns].expand(rows, columns)], dim=1))
    merged = TopK(held.similarity.clone(), held.index.clone())
    built.merge_top(tile.numpy(), first, tie_rank.numpy(), merged.similarity.numpy(), merged.index.numpy())
    assert _as_set(merged) == _as_set(expected)


def test_merge_top_refuses_buffers_and_tiles_that_do_not_fit():
    built = _built()
    tile = np.zeros((3, 4))
    tie_rank = np.arange(10, dtype=np.int64)
    with pytest.raises(ValueError, match="buffers"):
        built.merge_top(tile, 0, tie_rank, np.zeros((2, 5)), np.zeros((2, 5), dtype=np.int64))
    with pytest.raises(ValueError, match="past the training set"):
        built.merge_top(tile, 7, tie_rank, np.zeros((3, 5)), np.zeros((3, 5), dtype=np.int64))


def test_the_cpu_reduction_merges_with_the_compiled_loop(monkeypatch):
    """Given the loops, a CPU reduction that may wait merges by `merge_top`, and the token-ids
    path (the host reads nothing) keeps the torch passes."""
    calls = []
    monkeypatch.setattr(topk, "native", type("Spy", (), {"merge_top": staticmethod(lambda *a: calls.append(a))}))
    tile = Tile(torch.zeros((4, 6), dtype=torch.float64), 0, 0)
    TopKReduction(4, 2, torch.arange(6)).add(tile)
    assert len(calls) == 1
    TopKReduction(4, 2, torch.arange(6), host_waits=False).add(tile)
    assert len(calls) == 1


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0, 1.5, 2.0, 3.5])
def test_topk_sums_are_the_torch_passes_integers(power, monkeypatch):
    """`running_sums` by the compiled pass (`topk_sums`) against the torch passes it replaces, on
    top lists made to break it: similarities at 0, below it, above 1, -inf, subnormal and near a
    weight's rounding boundary; empty slots (NO_INDEX) and indices past the training set; several
    ks at once and a k past the list's width. The same integers, so the same estimates."""
    from gpu_neighbors.core.neighbours import Quality
    generator = torch.Generator().manual_seed(int(power * 10))
    rows, width, size = 300, 40, 97
    similarity = torch.rand((rows, width), generator=generator, dtype=torch.float64)
    similarity[::7, ::3] = 0.0
    similarity[1::11, 2::5] = -0.25
    similarity[2::13, 1::4] = 1.5
    similarity[3::17] = -torch.inf
    similarity[4::19, 5] = 5e-324
    similarity[5::23, 6] = (2 * 76 + 1) / 2.0**21  # 76.5 units at power 1: rounds half to even, to 76
    index = torch.randint(0, size, (rows, width), generator=generator)
    index[6::9, 7::6] = topk.NO_INDEX
    index[7::29, 8] = size + 3
    quality = Quality.encode(torch.rand(size, generator=generator, dtype=torch.float64) * 10 - 5)
    top = TopK(similarity, index)
    ks = [1, 3, 17, width, width + 10]
    compiled = topk.running_sums(top, quality, ks, power)
    monkeypatch.setattr(topk, "native", None)
    plain = topk.running_sums(top, quality, ks, power)
    assert all(torch.equal(ours, theirs) for ours, theirs in zip(compiled, plain))
    assert compiled[1].sum() > 0 and compiled[0].abs().sum() > 0


def test_the_estimates_read_the_compiled_sums(monkeypatch):
    """A top-k estimate on the CPU takes its sums from `topk_sums` where the loops were built."""
    from gpu_neighbors.core.neighbours import Quality
    calls = []
    native = _built()
    monkeypatch.setattr(topk, "native", type("Spy", (), {"topk_sums": staticmethod(
        lambda *arguments: (calls.append(1), native.topk_sums(*arguments)))}))
    quality = Quality.encode(torch.linspace(0, 1, 10, dtype=torch.float64))
    top = TopK(torch.rand((4, 5), dtype=torch.float64), torch.randint(0, 10, (4, 5)))
    estimate = topk.estimate_topk(top, quality, 3, 1.0)
    assert calls and estimate.scores.isfinite().all()


def test_rows_times_indicator_is_the_gather_and_multiply_bit_for_bit():
    """`rows_times_indicator` against torch's row gather times the 0/1 indicator, on values that a
    multiply by 0 or 1 keeps apart: -0, NaN, infinities, a subnormal and negatives."""
    built = _built()
    generator = torch.Generator().manual_seed(3)
    table = torch.randn((6, 37), generator=generator, dtype=torch.float64)
    table[0, :5] = torch.tensor([-0.0, float("nan"), float("inf"), -float("inf"), 5e-324], dtype=torch.float64)
    table[1, 3:6] = -1.5
    rows = torch.randint(0, 6, (50,), generator=generator)
    rows[:4] = torch.tensor([0, 0, 1, 5])
    counts = torch.randint(0, 2, (50, 37), generator=generator, dtype=torch.int16)
    counts[0, :6], counts[1, :6], counts[2, :6] = 0, 1, 0
    out = torch.full((50, 37), 7.0, dtype=torch.float64)
    built.rows_times_indicator(table.numpy(), rows.numpy(), counts.numpy(), out.numpy())
    expected = table.index_select(0, rows) * counts.to(torch.float64)
    assert torch.equal(out.view(torch.int64), expected.view(torch.int64))


def test_rows_times_indicator_refuses_what_does_not_fit():
    built = _built()
    table, counts, out = np.zeros((3, 4)), np.zeros((2, 4), dtype=np.int16), np.zeros((2, 4))
    with pytest.raises(ValueError, match="outside the table"):
        built.rows_times_indicator(table, np.array([0, 3]), counts, out)
    with pytest.raises(ValueError, match="differ in shape"):
        built.rows_times_indicator(table, np.array([0, 1]), np.zeros((2, 5), dtype=np.int16), out)


def _entries(generator: torch.Generator, height: int, width: int, first: int) -> tuple[torch.Tensor, ...]:
    """Distinct positions in row-major order (rows from `first`), and counts [3, entries] as a
    column slice of a wider tensor (strided, as a row slice's counts are)."""
    flat = torch.nonzero(torch.rand(height * width, generator=generator) < 0.3)[:, 0]
    counts = torch.randint(0, 9, (3, 2 * flat.numel() + 5), generator=generator)
    return flat // width + first, flat % width, counts[:, 5:5 + flat.numel()]


def test_scale_entries_is_the_gathers_and_the_scatter_bit_for_bit():
    """`scale_entries` against torch's gather, a multiply per order in order and the scatter, on
    factors and values with -0, NaN, infinities and subnormals; the other cells untouched."""
    built = _built()
    generator = torch.Generator().manual_seed(5)
    height, width, first = 40, 33, 200
    matrix = torch.randn((height, width), generator=generator, dtype=torch.float64)
    matrix[0, :4] = torch.tensor([-0.0, float("nan"), float("inf"), 5e-324], dtype=torch.float64)
    factors = torch.rand((3, 9), generator=generator, dtype=torch.float64) * 3
    factors[:, 0] = 1.0
    factors[1, 5], factors[2, 6], factors[0, 7] = -0.0, float("inf"), 1e-310
    rows, cols, counts = _entries(generator, height, width, first)
    expected = matrix.clone()
    flat = (rows - first) * width + cols
    value = expected.view(-1).index_select(0, flat)
    for order in range(3):
        value = value * factors[order].index_select(0, counts[order])
    expected.view(-1).index_put_((flat,), value)
    built.scale_entries(matrix.numpy(), first, rows.numpy(), cols.numpy(), counts.numpy(), factors.numpy())
    assert torch.equal(matrix.view(torch.int64), expected.view(torch.int64))


@pytest.mark.parametrize("broken", ["row above", "row below", "column", "count", "negative count", "shape"])
def test_scale_entries_refuses_entries_outside_and_changes_nothing(broken):
    built = _built()
    generator = torch.Generator().manual_seed(7)
    matrix = torch.rand((10, 8), generator=generator, dtype=torch.float64)
    rows, cols, counts = _entries(generator, 10, 8, 3)
    rows, cols, counts, factors = rows.clone(), cols.clone(), counts.clone(), torch.rand((3, 9), dtype=torch.float64)
    last = rows.numel() - 1
    if broken == "row above":
        rows[last] = 13
    elif broken == "row below":
        rows[last] = 2
    elif broken == "column":
        cols[last] = 8
    elif broken == "count":
        counts[2, last] = 9
    elif broken == "negative count":
        counts[1, last] = -1
    else:
        cols = cols[:-1]
    before = matrix.clone()
    with pytest.raises(ValueError, match="outside|do not fit"):
        built.scale_entries(matrix.numpy(), 3, rows.numpy(), cols.numpy(), counts.numpy(), factors.numpy())
    assert torch.equal(matrix, before)
