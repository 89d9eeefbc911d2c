"""Sparse products that never hand the library an operand with no stored entries.

cuSPARSE has no product for an operand with nnz = 0 in some versions (it raises, or returns
garbage), and a chunk of candidates that shares no n-gram with a training block is common (empty
texts, unseen words, a block of another language). The number of stored entries is host metadata
for COO and CSR tensors, so checking it costs no device synchronisation. `row_block` cuts a
contiguous block of training rows out of a CSR matrix at host offsets (no device read either).
Every sparse tensor here is built unchecked (its makers keep it consistent), inside
`unchecked_sparse`: without torch's notes that CSR is in beta and (torch 2.11 on CUDA) that
invariant checks are off, which would otherwise reach the library's callers.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import scipy.sparse
import torch

TORCH_NOTES = ("Sparse CSR tensor support is in beta", "Sparse invariant checks are implicitly disabled")


@contextmanager
def unchecked_sparse() -> Iterator[None]:
    """Building sparse tensors with check_invariants=False, torch's notes about it kept inside."""
    with warnings.catch_warnings():
        for note in TORCH_NOTES:
            warnings.filterwarnings("ignore", message=note)
        yield


def stored_entries(matrix: torch.Tensor) -> int:
    """How many entries a sparse (COO or CSR) or dense matrix stores, read from host metadata."""
    if matrix.layout == torch.sparse_coo:
        return int(matrix._nnz())
    if matrix.layout == torch.sparse_csr:
        return int(matrix.values().numel())
    return int(matrix.numel())


def sparse_mm(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """`torch.sparse.mm(left, right)` (left sparse COO; right sparse COO or dense), or its
    all-zero result made directly when either operand stores nothing."""
    if stored_entries(left) and stored_entries(right):
        return torch.sparse.mm(left, right)
    shape = (left.shape[0], right.shape[1])
    if right.layout == torch.strided:
        return torch.zeros(shape, dtype=right.dtype, device=right.device)
    empty = torch.zeros((2, 0), dtype=torch.int64, device=left.device)
    return coo_matrix(empty, torch.zeros(0, dtype=left.dtype, device=left.device), shape)


# Devices on which torch multiplies two CSR matrices straight into a dense one: the CPU, where
# torch has MKL (MKL's sparse x sparse -> dense product; a build without it, on ARM for one, has
# none). CUDA's `addmm` has no CSR @ CSR -> dense: there, and on a CPU without MKL, the product is
# made as CSR and added. The operation census switches this off to see the device's path
# (tests/census.py).
SPARSE_INTO_DENSE = frozenset({"cpu"} if torch.backends.mkl.is_available() else ())
# Devices whose torch adds a CSR matrix into a dense one with one thread a row (CUDA's
# `add_out_dense_sparse_csr_cuda`): there the product is added entry by entry (`add_entries`);
# elsewhere torch's loop is the faster (5x on this CPU). The census adds the CPU to see that path.
ENTRY_BY_ENTRY = frozenset({"cuda"})
# Devices whose CSR matrices `transposed` and `side_by_side` rearrange by scipy on the host (the
# CPU's tensors are host memory); elsewhere torch does it on the device. The census switches it
# off (tests/census.py).
BY_SCIPY_ON_HOST = frozenset({"cpu"})
ENTRIES_PER_STEP = 1 << 24  # add_entries' working arrays: 24 bytes an entry, 384 MiB a step


def add_product(out: torch.Tensor, left: torch.Tensor, right: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """out += scale (left @ right), in place, for dense `out` and sparse CSR `left` [m x f] and `right`
    [f x n]. On the CPU one product written straight into `out` (TF-IDF tiles of 1,024 x 3,072,
    one thread: 17 ms, against 53 ms for a CSR product and 9 ms more to add it); and torch's CSR
    x CSR product on the CPU (MKL's) keeps about the size of its result on every call (24 MB
    such a tile: 400 of them grew the process by 9.6 GB, measured), the product into a dense matrix
    nothing. Elsewhere the CSR product, added (entry by entry on CUDA: `add_entries`). A caller
    that multiplies by the same right side again transposes its rows into it once
    (`TfidfKernel`: each training block). Sums in an order of its own: callers that need the same
    bits on every device make every sum exact, and `scale` a power of two that keeps every scaled
    product and sum a normal float (each path scales at its own step: the bits agree only when
    no step rounds). Scaling inside the product spares the caller a pass over `out`."""
    if not (stored_entries(left) and stored_entries(right)):
        return out
    if out.device.type in SPARSE_INTO_DENSE:
        return out.addmm_(left, right, alpha=scale)
    product = torch.sparse.mm(left, right)
    return add_entries(out, product, scale) if out.device.type in ENTRY_BY_ENTRY else out.add_(product, alpha=scale)


def add_entries(out: torch.Tensor, matrix: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """out += scale matrix (sparse CSR; `out` dense and contiguous, as torch's own addition needs), in
    place, as gathers, adds and scatters over the matrix's entries (distinct, so no two writes
    meet), ENTRIES_PER_STEP at a time, with no host read. torch's CUDA kernel for dense += CSR
    gives each row one thread that loops over the row's entries: a TF-IDF tile's product took it
    67 ms on an H200, 74% of the tile's GPU time (bench/profiles/gpu_h200.md); this one is not
    measured on a GPU yet."""
    crow, columns, values = matrix.crow_indices(), matrix.col_indices(), matrix.values()
    flat_out = out.view(-1)
    width = out.shape[1]
    for start in range(0, values.numel(), ENTRIES_PER_STEP):
        stop = min(start + ENTRIES_PER_STEP, values.numel())
        positions = torch.arange(start, stop, dtype=crow.dtype, device=crow.device)
        rows = torch.searchsorted(crow, positions, right=True).sub_(1)  # the row holding each entry
        cells = rows.to(torch.int64).mul_(width).add_(columns[start:stop])
        flat_out.index_put_((cells,), flat_out[cells].add_(values[start:stop], alpha=scale))
    return out


def csr_matrix(crow: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A sparse CSR tensor of these parts, unchecked (its callers make them consistent)."""
    with unchecked_sparse():
        return torch.sparse_csr_tensor(crow, columns, values, shape, check_invariants=False)


def coo_matrix(indices: torch.Tensor, values: torch.Tensor, shape: tuple[int, int],
               coalesced: bool = False) -> torch.Tensor:
    """A sparse COO tensor of these parts, unchecked (its callers make them consistent);
    `coalesced`: the caller's entries are distinct and in row-major order."""
    with unchecked_sparse():
        return torch.sparse_coo_tensor(indices, values, shape, check_invariants=False,
                                       is_coalesced=coalesced or None)


def row_block(matrix: torch.Tensor, start: int, stop: int, offsets: np.ndarray) -> torch.Tensor:
    """Rows start..stop-1 of a CSR matrix, without copying the rest; `offsets` are its row
    offsets on the host (so no device read)."""
    crow = matrix.crow_indices()
    first, last = int(offsets[start]), int(offsets[stop])
    return csr_matrix(crow[start : stop + 1] - first, matrix.col_indices()[first:last], matrix.values()[first:last],
                      (stop - start, matrix.shape[1]))


def side_by_side(parts: list[torch.Tensor], scales: list[float]) -> torch.Tensor:
    """CSR matrices of the same rows side by side ([rows x sum of columns], float64), each
    part's stored entries replaced by its scale: a row's entries of part 0, then of part 1 (its
    columns shifted past part 0's), and so on, so every row keeps ascending columns. On the CPU
    by scipy's compiled join (BLEU*'s orders 2-4 of 1,540 candidates: 0.09 ms against 0.9 ms
    for the torch ops, one thread); elsewhere by torch on the device, sizes read from host
    metadata only."""
    rows, device = parts[0].shape[0], parts[0].device
    width = sum(part.shape[1] for part in parts)
    if device.type in BY_SCIPY_ON_HOST:
        joined = scipy.sparse.hstack([
            scipy.sparse.csr_matrix((np.full(stored_entries(part), scale), part.col_indices().numpy(),
                                     part.crow_indices().numpy()), shape=part.shape)
            for part, scale in zip(parts, scales)
        ], format="csr")
        return csr_matrix(torch.from_numpy(joined.indptr.astype(np.int64, copy=False)),
                          torch.from_numpy(joined.indices.astype(np.int64, copy=False)),
                          torch.from_numpy(joined.data), (rows, width))
    crows = [part.crow_indices() for part in parts]
    counts = torch.stack([crow[1:] - crow[:-1] for crow in crows])  # [parts, rows]
    before = counts.cumsum(0) - counts  # each row's entries in the parts to its left
    crow = torch.zeros(rows + 1, dtype=torch.int64, device=device)
    crow[1:] = counts.sum(0).cumsum(0)
    columns = torch.empty(sum(stored_entries(part) for part in parts), dtype=torch.int64, device=device)
    values = torch.empty(columns.shape, dtype=torch.float64, device=device)
    shift = 0
    for part, part_crow, part_counts, part_before, scale in zip(parts, crows, counts, before, scales):
        entries = stored_entries(part)
        row = torch.repeat_interleave(torch.arange(rows, device=device), part_counts, output_size=entries)
        place = crow[row] + part_before[row] + torch.arange(entries, device=device) - part_crow[row]
        columns[place] = part.col_indices() + shift
        values.index_fill_(0, place, scale)
        shift += part.shape[1]
    return csr_matrix(crow, columns, values, (rows, width))


def transposed(matrix: torch.Tensor) -> torch.Tensor:
    """The transpose of a CSR matrix, as CSR (the same entries, each column's in row order). On
    the CPU by scipy's counting sort, linear in the entries (a TF-IDF training block of 2,500 x
    26,506, 365,232 entries: 4 ms against 28 ms for torch's `t().to_sparse_csr()`, one
    thread); elsewhere by torch on the device."""
    if matrix.device.type not in BY_SCIPY_ON_HOST:
        return matrix.t().to_sparse_csr()
    rows, columns = matrix.shape
    columnwise = scipy.sparse.csr_matrix((matrix.values().numpy(), matrix.col_indices().numpy(),
                                          matrix.crow_indices().numpy()), shape=(rows, columns)).tocsc()
    return csr_matrix(torch.from_numpy(columnwise.indptr.astype(np.int64, copy=False)),
                      torch.from_numpy(columnwise.indices.astype(np.int64, copy=False)),
                      torch.from_numpy(columnwise.data), (columns, rows))
