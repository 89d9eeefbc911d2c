"""What the all-pairs jobs share: a kernel fitted with the scorer's settings (the parameter table
checks them), and runs of the one tile loop over a block of rows against a block of columns."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpu_neighbors.core.tiling import Reduction, Result, Span, TilePlan, reduce_tiles, resolve_device
from gpu_neighbors.kernels import KERNEL_NAMES, Kernel
from gpu_neighbors.kernels.parts import KernelPart, kernel_part
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.text.tokenizers import Tokenizer

Settings = Mapping[str, Any]


def kernel_settings(
    kernel: str,
    *,
    smoothing: str | None,
    weights: Sequence[float] | None,
    tokenizer: str | Tokenizer,
    lowercase: bool,
    kernel_options: Mapping[str, Any] | None,
    device: str,
    memory_budget: int | None,
) -> NeighborsScorer:
    """The settings as an unfitted scorer (its kernel part checks them; a setting the kernel does
    not have is refused by name). One kernel runs every pair: not `auto` or `combined`, which
    choose among kernels on a scored training set."""
    if kernel not in KERNEL_NAMES:
        raise ValueError(f"kernel {kernel!r}: the all-pairs jobs run one kernel, one of {', '.join(KERNEL_NAMES)}")
    try:
        part = kernel_part(kernel, smoothing=smoothing, weights=None if weights is None else tuple(weights),
                           tokenizer=tokenizer, lowercase=lowercase, **(kernel_options or {}))
    except TypeError as error:
        raise ValueError(f"kernel {kernel!r}: {error}") from None
    return NeighborsScorer(kernel=part, device=device, memory_budget=memory_budget)


def fitted_kernel(settings: NeighborsScorer, texts: list[str]) -> Kernel[Any]:
    assert isinstance(settings.kernel, KernelPart)  # kernel_part of one name
    kernel = settings.kernel.build(resolve_device(settings.device))
    kernel.fit(texts)
    return kernel


def run_block(
    kernel: Kernel[Any],
    encode: Callable[[int, int], Any],
    rows: Span,
    columns: Span,
    reduction: Reduction[Result],
    memory_budget: int | None,
) -> Result:
    """The tile loop over candidate rows rows[0]..rows[1]-1 against the fitted texts
    columns[0]..columns[1]-1, in tiles sized for the kernel and the device."""
    plan = TilePlan.for_device(kernel.device, kernel.pair_bytes(), columns[1] - columns[0], memory_budget)
    chunks = [(rows[0] + first, rows[0] + last) for first, last in plan.chunks(rows[1] - rows[0])]
    blocks = [(columns[0] + first, columns[0] + last) for first, last in plan.blocks(columns[1] - columns[0])]
    return reduce_tiles(encode, kernel.tile, chunks, blocks, reduction)
