"""Seeded subsets of the training set: the same texts on every device (issue 31: on an H200 a
reward subsampled from token ids on the CPU and from texts on the GPU used two devices' random
streams, and differed), exact, fresh per call and even."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu_neighbors.core.subsets import MODULUS, ROUNDS, permuted_positions, round_constants, subset_mask


def python_keys(count: int, seed: int, call: int) -> list[int]:
    """The same permutation in Python's unbounded integers: what every device must compute."""
    keys = list(range(count))
    for round_ in range(ROUNDS):
        scale, shift = round_constants(seed, call, round_)
        keys = [pow((key * scale + shift) % MODULUS, 5, MODULUS) for key in keys]
    return keys


@pytest.mark.parametrize("seed, call", [(0, 0), (7, 3), (-1, 10**6), (2**70 + 5, 1)])
def test_keys_are_the_exact_permutation(seed, call):
    keys = permuted_positions(5000, seed, call, torch.device("cpu"))
    assert keys.tolist() == python_keys(5000, seed, call)
    assert len(set(keys.tolist())) == 5000  # distinct: one subset for any selection order


def test_a_subset_is_the_smallest_keys_whatever_the_selection_order():
    keys = np.array(python_keys(1000, 3, 2))
    mask = subset_mask(1000, 300, 3, 2, torch.device("cpu")).numpy()
    assert mask.sum() == 300 and set(np.flatnonzero(mask)) == set(np.argsort(keys)[:300])


def test_draws_are_fresh_per_call_and_even_over_calls():
    count, size, calls = 400, 100, 400
    masks = torch.stack([subset_mask(count, size, 11, call, torch.device("cpu")) for call in range(calls)])
    assert all(not torch.equal(masks[call], masks[call + 1]) for call in range(calls - 1))
    chosen = masks.sum(dim=0).numpy()  # each position's count: Binomial(400, 1/4), mean 100, sd 8.7
    assert abs(chosen.mean() - 100) < 1e-9 and 70 < chosen.min() and chosen.max() < 130
    overlap = (masks[:-1] & masks[1:]).sum(dim=1).float().mean().item()  # independent: 25 expected
    assert 22 < overlap < 28


def test_impossible_sizes_are_refused():
    with pytest.raises(ValueError, match="cannot draw"):
        subset_mask(10, 11, 0, 0, torch.device("cpu"))
