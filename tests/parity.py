"""The parity harness of the kernels: all pairs through the core tile loop, against a pair-by-pair
reference, and the same matrix however candidates and the training set are cut.

Texts: the HUSE fixtures and `conftest.ADVERSARIAL_TEXTS`, which each kernel's tests mix into
their candidates and training sets.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from gpu_neighbors.core.tiling import MatrixReduction, Span, reduce_tiles
from gpu_neighbors.kernels import Kernel

Cuts = Iterable[int]  # inner edges: where a range is cut, e.g. [17, 40]


def spans_at(total: int, cuts: Cuts) -> list[Span]:
    edges = [0, *cuts, total]
    return list(zip(edges, edges[1:]))


def all_pairs(
    kernel: Kernel[Any], candidates: Sequence[str] | None, blocks: Cuts = (), chunks: Cuts = ()
) -> torch.Tensor:
    """k(candidate, training text) [len(candidates), |S|], float64 on the CPU, through the tile
    loop: candidates encoded chunk by chunk (cut at `chunks`; None: the training set itself,
    through `encode_train`), the training set cut into blocks at `blocks`."""
    if candidates is None:
        rows, encode = kernel.num_train, kernel.encode_train
    else:
        texts = candidates
        rows, encode = len(texts), lambda first, last: kernel.encode(texts[first:last])
    return reduce_tiles(
        encode,
        kernel.tile,
        spans_at(rows, chunks),
        spans_at(kernel.num_train, blocks),
        MatrixReduction(rows, kernel.num_train),
    )


def reference_matrix(score: Callable[[str, str], float], candidates: Sequence[str], train: Sequence[str]) -> np.ndarray:
    """score(candidate, training text) pair by pair, [len(candidates), len(train)]."""
    return np.array([[score(c, s) for s in train] for c in candidates], dtype=np.float64)


def assert_matches_reference(
    kernel: Kernel[Any],
    candidates: Sequence[str],
    train: Sequence[str],
    score: Callable[[str, str], float],
    atol: float,
    blocks: Cuts = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Our matrix equals the reference to `atol` (rtol 0); both are returned for more checks."""
    ours = all_pairs(kernel, candidates, blocks).numpy()
    reference = reference_matrix(score, candidates, train)
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours, reference, rtol=0, atol=atol)
    return ours, reference


def assert_tiling_invariant(
    kernel: Kernel[Any], candidates: Sequence[str], cuts: Iterable[tuple[Cuts, Cuts]], atol: float = 0.0
) -> torch.Tensor:
    """The matrix of one tile per pass equals the matrix under every (blocks, chunks) cut: bit
    for bit when `atol` is 0. Returns the uncut matrix."""
    whole = all_pairs(kernel, candidates)
    for blocks, chunks in cuts:
        cut = all_pairs(kernel, candidates, blocks, chunks)
        if atol == 0:
            assert torch.equal(cut, whole), (list(blocks), list(chunks))
        else:
            assert torch.allclose(cut, whole, rtol=0, atol=atol), (list(blocks), list(chunks))
    return whole


# (chunk_size, memory_budget) pairs: one candidate per chunk, small uneven tiles, the defaults.
SCORER_TILINGS = ((1, None), (7, 20_000), (33, 200_000), (None, None))


def assert_scorer_tiling_invariant(kernel: str, train: Sequence[str], scores: Sequence[float],
                                   candidates: Sequence[str], leave_one_out: bool) -> None:
    """A scorer with `kernel` gives the same similarities and estimates, bit for bit, whatever
    its chunk size and memory budget: on `candidates`, or on the training set left one out."""
    from gpu_neighbors import NeighborsScorer

    results = []
    for chunk_size, budget in SCORER_TILINGS:
        scorer = NeighborsScorer(kernel=kernel, device="cpu", memory_budget=budget, chunk_size=chunk_size)
        scorer.fit(train, scores)
        similarity = scorer.train_similarity() if leave_one_out else scorer.similarity(candidates)
        results.append((similarity, scorer.leave_one_out() if leave_one_out else scorer.predict(candidates)))
    first_similarity, first = results[0]
    assert np.isfinite(first.scores).sum() >= 10, "the test must find some neighbourhoods"
    for similarity, other in results[1:]:
        assert torch.equal(similarity, first_similarity)
        np.testing.assert_array_equal(other.scores, first.scores)
        np.testing.assert_array_equal(other.num_neighbors, first.num_neighbors)
        np.testing.assert_array_equal(other.nearest, first.nearest)
        np.testing.assert_array_equal(other.outside, first.outside)
