"""Seeded random subsets of the training set that are the same texts on every device.

A generator's stream depends on its device (CUDA's Philox is not the CPU's Mersenne Twister), so
subsampled rewards drawn with `torch.randperm` differed between a CPU and a GPU for the same seed.
Here each training position gets a key from a seeded permutation of the residues modulo the prime
2^31 - 1, computed with integer products below 2^63 (exact on every device), and a subset is the
positions with the smallest keys: distinct keys, so one set, whatever the device or the selection
kernel's order. The permutation is `ROUNDS` rounds of x -> (a x + b) mod p and x -> x^5 mod p
(5 is prime to p - 1, so both are bijections), a, b from the seed, the call and the round
through SplitMix64 (Steele, Lea and Flood, 2014, "Fast splittable pseudorandom number generators").
"""
from __future__ import annotations

import torch

MODULUS = 2**31 - 1  # prime; products of two residues stay below 2^62
ROUNDS = 3
MASK64 = 2**64 - 1


def subset_mask(count: int, size: int, seed: int, call: int, device: torch.device) -> torch.Tensor:
    """bool [count] on `device`: the `size` positions of draw number `call` with `seed`."""
    if not 0 < size <= count < MODULUS:
        raise ValueError(f"cannot draw {size} of {count} positions (at most {MODULUS - 1})")
    keys = permuted_positions(count, seed, call, device)
    chosen = torch.topk(keys, size, largest=False, sorted=False).indices
    return torch.zeros(count, dtype=torch.bool, device=device).index_fill_(0, chosen, True)


def permuted_positions(count: int, seed: int, call: int, device: torch.device) -> torch.Tensor:
    """int64 [count]: distinct keys of positions 0..count-1 (their images under the seeded
    permutation of the residues modulo MODULUS)."""
    keys = torch.arange(count, dtype=torch.int64, device=device)
    for round_ in range(ROUNDS):
        scale, shift = round_constants(seed, call, round_)
        keys = (keys * scale + shift) % MODULUS
        square = keys * keys % MODULUS
        keys = square * square % MODULUS * keys % MODULUS
    return keys


def round_constants(seed: int, call: int, round_: int) -> tuple[int, int]:
    """(a, b) with 1 <= a < MODULUS and 0 <= b < MODULUS, from SplitMix64 over the three numbers."""
    state = splitmix64(splitmix64(splitmix64(seed & MASK64) ^ (call & MASK64)) ^ round_)
    return 1 + state % (MODULUS - 1), splitmix64(state) % MODULUS


def splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)
