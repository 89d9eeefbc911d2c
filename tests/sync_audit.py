"""A CPU stand-in for `torch.cuda.set_sync_debug_mode`: a dispatch mode that records every aten
op which would make the host wait for a CUDA device."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that size their output from device data or read it on the host: each one makes the
# host wait for a CUDA device.
SYNCING_OPS = {
    "aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.bincount",
    "aten.unique_dim", "aten._unique", "aten._unique2", "aten.unique_consecutive",
    "aten.repeat_interleave", "aten.is_nonzero", "aten.equal", "aten.lift_fresh",
    "aten.item",
}


class SyncAudit(TorchDispatchMode):
    """Records every aten op that would synchronise with the host, and sparse x sparse products
    (cuSPARSE sizes their output on the host)."""

    def __init__(self) -> None:
        super().__init__()
        self.syncing: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket._qualified_op_name.replace("::", ".")
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        indices = args[1] if name == "aten.index" else []
        if (
            name in SYNCING_OPS
            or any(i is not None and i.dtype == torch.bool for i in indices)
            or (name in {"aten.mm", "aten.addmm", "aten._sparse_sparse_matmul"}
                and sum(t.layout != torch.strided for t in tensors) > 1)
        ):
            self.syncing.append(str(func))
        return func(*args, **(kwargs or {}))
