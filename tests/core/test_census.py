"""The operation census (tests/census.py): every aten operation of every kernel and pass is on
the committed list with the CUDA kernel native_functions.yaml declares for it, and no tile
makes the host wait for the device more often than its kernel's budget.

A new operation fails here until it is checked: `python tests/census.py --write` rewrites the
list (and prints what changed), then the diff is reviewed like code."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from census import (
    BUDGET_FILE,
    KNOWN_NONDETERMINISTIC,
    OPS_FILE,
    Census,
    OpUse,
    census_run,
    cuda_entry,
    most_per_tile,
    nondeterministic_on_cuda,
    read_allowed,
    risky,
)

pytestmark = pytest.mark.cpu_only  # the census is of the CPU run; on a GPU the list would differ in nothing but time


def test_every_operation_is_on_the_list():
    census, _ = census_run()
    unlisted = sorted(census.uses - set(read_allowed()))
    assert not unlisted, (f"{len(unlisted)} operations are not on {OPS_FILE.name}; check each one's CUDA kernel and "
                          "dtypes, then run `python tests/census.py --write`:\n"
                          + "\n".join(use.line() for use in unlisted))


def test_every_listed_operation_has_a_cuda_kernel():
    allowed = read_allowed()
    stale = {use: entry for use, entry in allowed.items() if cuda_entry(use.op, use.layouts) != entry}
    assert not stale, f"entries that native_functions.yaml no longer confirms: {stale}"
    missing = [use.line() for use in allowed if "MISSING" in allowed[use] or risky(use)]
    assert not missing, f"operations without a CUDA kernel for their layout or dtype: {missing}"


def test_nothing_raises_under_deterministic_algorithms_on_cuda():
    census, _ = census_run()
    found = {f"{use.op} {use.layouts} {use.dtypes}" for use in census.uses if nondeterministic_on_cuda(use)}
    assert found == set(KNOWN_NONDETERMINISTIC), (
        f"operations that raise on CUDA under torch.use_deterministic_algorithms(True): {sorted(found)}; "
        f"known ones (remove an entry once it is gone): {KNOWN_NONDETERMINISTIC}")


def test_host_syncs_per_tile_within_budget():
    _, tiles = census_run()
    budget = json.loads(BUDGET_FILE.read_text(encoding="utf-8"))
    measured = most_per_tile(tiles)
    assert set(measured) == set(budget), f"every kernel tiles in the census and has a budget: {measured}"
    over = {kernel: (count, budget[kernel]) for kernel, count in measured.items() if count > budget[kernel]}
    assert not over, f"host syncs in one tile over the budget (measured, budget): {over}"


def test_the_census_sees_syncs_and_unlisted_operations():
    """The detector itself: each kind of sync counts once, and what does not sync counts nothing."""
    census = Census(scope="probe")
    x, index = torch.arange(6), torch.tensor([0, 1])
    with census, census.host_copies():
        int(x[2])  # _local_scalar_dense
        x.nonzero()
        x[x > 2]  # boolean-mask index
        x.tolist()
        torch.repeat_interleave(x[:3], x[:3])  # its output size comes from the data
        torch.unique(x)
        quiet = torch.repeat_interleave(x[:3], x[:3], output_size=3)
        x.nonzero_static(size=3)
        torch.searchsorted(x, x)
        x[index]  # integer index: no sync
        torch.tensor([1.0])  # lift_fresh: a blocking copy to the device
        x.to("cpu")  # blocking copies to a device, each counted once
        x.to(device=torch.device("cpu"), dtype=torch.float64)
        torch.as_tensor(np.arange(2), device="cpu")  # lift_fresh too
        x.to(torch.float64)  # a dtype alone, and a copy that does not block: none counted
        x.to("cpu", non_blocking=True)
    assert census.syncs["probe"] == 10, census.sync_ops
    assert quiet.tolist() == [1, 2, 2]
    assert OpUse("aten::nonzero_static.default", "strided", "int64") in census.uses
    assert OpUse("aten::nonzero_static.default", "strided", "int64") not in read_allowed()


@pytest.mark.parametrize(("op", "layouts", "entry"), [
    ("aten::nonzero.default", "strided", "CUDA"),
    ("aten::add.Tensor", "strided", "CUDA (ufunc codegen) via add.out"),
    ("aten::add.Tensor", "sparse_csr,strided", "SparseCsrCUDA"),
    ("aten::_sparse_sparse_matmul.default", "sparse_coo", "SparseCUDA"),
    ("aten::zeros.default", "strided", "CompositeExplicitAutograd"),
    ("aten::mkldnn_reorder_conv2d_weight.default", "strided", "MISSING"),  # MkldnnCPU only
])
def test_cuda_entries_read_from_native_functions(op, layouts, entry):
    assert cuda_entry(op, layouts) == entry
