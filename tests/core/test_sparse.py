"""core/sparse.py's product added into a dense matrix against dense arithmetic, on random CSR
matrices with empty rows, and on operands that store nothing: by both of its paths (the CPU's
product into a dense matrix, and the device's CSR product added); and the CPU's path holding no
memory after it returns (torch's CSR x CSR product on the CPU, MKL's, keeps about the size of
its result on every call: a TF-IDF tile of 1,024 x 3,072 leaked 24 MB)."""
from __future__ import annotations

import os

import pytest
import torch

from gpu_neighbors.core import sparse
from gpu_neighbors.core.sparse import add_product


@pytest.fixture(params=["into dense", "csr added", "csr added entry by entry"])
def path(request, monkeypatch):
    if request.param != "into dense":
        monkeypatch.setattr(sparse, "SPARSE_INTO_DENSE", frozenset())
    if request.param == "csr added entry by entry":
        monkeypatch.setattr(sparse, "ENTRY_BY_ENTRY", frozenset({"cpu"}))
    return request.param


def random_csr(rows: int, columns: int, density: float, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(1, 1 << 20, (rows, columns), generator=generator).double()
    kept = torch.rand((rows, columns), generator=generator) < density
    kept[rows // 2 :: 3] = False  # rows that store nothing
    return (values * kept).to_sparse_csr()


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("scale", [1.0, 2.0**-53])
def test_add_product_adds_into_the_dense_matrix(scale):
    """Integers below 2^53 (times a power of two that keeps them normal): every path exact, so
    all give the dense arithmetic's bits; a scale left out or applied twice would not."""
    left, right = random_csr(30, 50, 0.2, seed=1), random_csr(50, 20, 0.2, seed=2)
    start = torch.arange(600, dtype=torch.float64).view(30, 20)
    out = start * scale
    assert add_product(out, left, right, scale) is out
    assert torch.equal(out, (start + left.to_dense() @ right.to_dense()) * scale)


@pytest.mark.usefixtures("path")
def test_add_product_of_an_operand_that_stores_nothing_leaves_it():
    start = torch.ones((4, 3), dtype=torch.float64)
    empty_left, full_right = random_csr(4, 6, 0.0, seed=3), random_csr(6, 3, 0.9, seed=4)
    assert torch.equal(add_product(start.clone(), empty_left, full_right), start)
    assert torch.equal(add_product(start.clone(), random_csr(4, 6, 0.9, seed=5), random_csr(6, 3, 0.0, seed=6)), start)


def resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads resident memory from Linux's /proc")
def test_the_cpu_product_keeps_no_memory():
    """Forty products whose CSR result holds ~250,000 entries: the CSR path grew the process by
    about 3 MB a call (measured: 66 MB in 20), the path taken on the CPU by nothing."""
    left, right = random_csr(512, 4000, 0.01, seed=7), random_csr(4000, 2048, 0.01, seed=8)
    out = torch.zeros((512, 2048), dtype=torch.float64)
    add_product(out, left, right)  # the first call's one-off allocations
    result_bytes = 12 * torch.sparse.mm(left, right).values().numel()  # a leaked CSR result: value and column
    start = resident_bytes()
    for _ in range(40):
        add_product(out, left, right)
    assert resident_bytes() - start < 10 * result_bytes  # leaking every call: 40 results


@pytest.mark.parametrize("step", [1, 7, 1 << 24])
def test_add_entries_in_steps_adds_every_entry_once(monkeypatch, step):
    """The device's path adds the CSR product entry by entry (torch's CUDA dense += CSR loops over
    each row in one thread: 67 ms a TF-IDF tile on an H200), in steps of any size."""
    monkeypatch.setattr(sparse, "ENTRIES_PER_STEP", step)
    matrix = random_csr(30, 20, 0.3, seed=9)
    start = torch.arange(600, dtype=torch.float64).view(30, 20)
    out = start.clone()
    assert sparse.add_entries(out, matrix) is out
    assert torch.equal(out, start + matrix.to_dense())
    assert torch.equal(sparse.add_entries(out, matrix, 0.5), start + 1.5 * matrix.to_dense())


@pytest.mark.parametrize("shape, density", [((30, 50), 0.2), ((7, 1), 0.5), ((0, 4), 0.3), ((5, 6), 0.0)])
def test_transposed_is_torchs_transpose_entry_for_entry(shape, density):
    """The CPU's transpose (scipy's counting sort) holds the same CSR arrays as torch's own:
    row offsets, columns (int64) and values, empty rows and columns included."""
    matrix = random_csr(*shape, density, seed=3)
    ours, torchs = sparse.transposed(matrix), matrix.t().to_sparse_csr()
    assert ours.shape == torchs.shape
    for part in ("crow_indices", "col_indices", "values"):
        mine, theirs = getattr(ours, part)(), getattr(torchs, part)()
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)


@pytest.mark.parametrize("by_scipy", [True, False])
def test_side_by_side_equals_the_dense_concatenation_of_scaled_indicators(monkeypatch, by_scipy):
    """Parts with empty rows, one part storing nothing and parts of different widths, by both
    paths (scipy's on the CPU, torch's elsewhere): each stored entry becomes its part's scale,
    columns shifted past the parts to its left, every row's columns ascending."""
    if not by_scipy:
        monkeypatch.setattr(sparse, "BY_SCIPY_ON_HOST", frozenset())
    parts = [random_csr(9, 5, 0.4, seed=10), random_csr(9, 1, 0.0, seed=11), random_csr(9, 7, 0.5, seed=12)]
    scales = [1.0, 2.0**17, 2.0**34]
    joined = sparse.side_by_side(parts, scales)
    expected = torch.cat([(part.to_dense() != 0).double() * scale for part, scale in zip(parts, scales)], dim=1)
    assert joined.layout == torch.sparse_csr and joined.dtype == torch.float64
    assert joined.crow_indices().dtype == joined.col_indices().dtype == torch.int64
    assert torch.equal(joined.to_dense(), expected)
    crow, columns = joined.crow_indices(), joined.col_indices()
    for row in range(9):
        within = columns[crow[row] : crow[row + 1]]
        assert torch.equal(within, within.sort().values)
