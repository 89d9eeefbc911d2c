"""MBR (minimum Bayes risk) selection: each candidate's expected utility is its mean similarity
to the other samples of its group (the pseudo-references), and each group selects its candidate
of highest utility (the first one on a tie).

Candidates are ordered by group (stably) and fitted once; the tile loop then runs over windows
of whole groups, so only pairs within a window are computed and a row-mean reduction keeps a sum
and a count per candidate, never a matrix. Small groups share a window (one tile for many
groups, pairs across groups masked): a tile per group of 64 would cost more in fixed overheads
than the few wasted pairs.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpu_neighbors.allpairs.passes import fitted_kernel, kernel_settings, run_block
from gpu_neighbors.core.validation import check_texts
from gpu_neighbors.core.reductions import GroupMeanReduction
from gpu_neighbors.kernels import threads_by_kernel
from gpu_neighbors.text.tokenizers import Tokenizer

WINDOW_ROWS = 256  # groups are packed into windows of about this many candidates


@dataclass(frozen=True)
class MbrResult:
    """Per candidate (input order): its expected utility, its group (index into `labels`, in
    order of first appearance) and whether its group selected it."""

    utility: np.ndarray  # float64
    group: np.ndarray  # int64
    selected: np.ndarray  # bool
    labels: list[Hashable]

    @property
    def selected_indices(self) -> np.ndarray:
        """The selected candidate of each group, in the order of `labels`."""
        chosen = np.flatnonzero(self.selected)
        return chosen[np.argsort(self.group[chosen], kind="stable")]


@threads_by_kernel
def mbr(
    candidates: Sequence[str],
    groups: Sequence[Hashable] | None = None,
    *,
    kernel: str = "bleu",
    smoothing: str | None = None,
    weights: Sequence[float] | None = None,
    tokenizer: str | Tokenizer = "whitespace",
    lowercase: bool = False,
    kernel_options: Mapping[str, Any] | None = None,
    device: str = "auto",
    memory_budget: int | None = None,
) -> MbrResult:
    """Expected utility of each candidate against the others of its group (`groups`: one label
    per candidate; None: all candidates form one group), and the selection per group. Every
    group needs two candidates or more."""
    texts = check_texts(candidates, "candidates", at_least=2)
    settings = kernel_settings(kernel, smoothing=smoothing, weights=weights, tokenizer=tokenizer,
                               lowercase=lowercase, kernel_options=kernel_options, device=device,
                               memory_budget=memory_budget)
    codes, labels = _group_codes(groups, len(texts))
    sizes = np.bincount(codes, minlength=len(labels))
    if (sizes < 2).any():
        lonely = labels[int(np.flatnonzero(sizes < 2)[0])]
        raise ValueError(f"group {lonely!r} has one candidate ({int((sizes < 2).sum())} such groups): MBR "
                         "compares each candidate with the others of its group, so each needs two or more")
    order = np.argsort(codes, kind="stable")
    fitted = fitted_kernel(settings, [texts[index] for index in order])
    reduction = GroupMeanReduction(torch.as_tensor(codes[order], device=fitted.device))
    for window in _windows(sizes):
        run_block(fitted, fitted.encode_train, window, window, reduction, memory_budget)
    utility = np.empty(len(texts))
    utility[order] = reduction.result().cpu().numpy()
    selected = np.zeros(len(texts), dtype=bool)
    for members in np.split(order, np.cumsum(sizes)[:-1]):
        selected[members[int(np.argmax(utility[members]))]] = True  # members in input order
    return MbrResult(utility=utility, group=codes, selected=selected, labels=labels)


def _group_codes(groups: Sequence[Hashable] | None, count: int) -> tuple[np.ndarray, list[Hashable]]:
    if groups is None:
        return np.zeros(count, dtype=np.int64), [None]
    if isinstance(groups, (str, bytes)):
        raise ValueError(f"groups: give one label per candidate ({count}), not one string")
    groups = list(groups)  # a generator or a pandas Series, as candidates may be
    if len(groups) != count:
        raise ValueError(f"groups: give one label per candidate ({count}), not {len(groups)}")
    # Keyed by type too: Python's True == 1 == 1.0 would join groups a file spells differently.
    index: dict[tuple[type, Hashable], int] = {}
    codes = np.empty(count, dtype=np.int64)
    for position, label in enumerate(groups):
        try:
            codes[position] = index.setdefault((type(label), label), len(index))
        except TypeError:
            raise TypeError(f"groups[{position}]: a group label must be hashable (a string or a number), "
                            f"not {type(label).__name__}") from None
    return codes, [label for _, label in index]


def _windows(sizes: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive spans of whole groups of about WINDOW_ROWS candidates (a bigger group alone)."""
    windows, start, stop = [], 0, 0
    for size in sizes.tolist():
        if stop > start and stop - start + size > WINDOW_ROWS:
            windows.append((start, stop))
            start = stop
        stop += size
    windows.append((start, stop))
    return windows
