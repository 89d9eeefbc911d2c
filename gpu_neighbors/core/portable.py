"""exp and log in float64 that give the same bits on every machine, and a division by a number
that does too.

A GPU's math library, the CPU's vectorised one and glibc's scalar one each round exp and log
their own way, an ulp apart here and there, and a similarity one ulp off flips a neighbour that
sits on a threshold. So no transcendental function runs on the scoring device: kernels gather
factors from tables made on the host by these functions (`kernels/bleu_tables.py`), and the
device only gathers, multiplies and divides, which IEEE 754 rounds the same way everywhere.

Both functions use only operations that IEEE 754 defines exactly (+, -, *, /, scaling by a power
of two, rounding to an integer), one numpy ufunc at a time in a fixed order: no library's exp or
log, no fused multiply-add, nothing a vectorising compiler may reorder across calls. They are
accurate to about one ulp (tested against Python's `math` in the tests), not correctly rounded;
what matters is that they are the same function on every host.

Division is IEEE's on every device, but PyTorch's CUDA kernel for a tensor divided by a host
number multiplies by the number's reciprocal instead (two roundings: an ulp off in about one
result in ten, seen on an H200 in p-values, estimates and intervals); `divided` divides by a
tensor on the values' device, which every device rounds once. And PyTorch's float64 square root
is not the nearest float everywhere: CUDA's is (IEEE's correctly rounded root), torch 2.13's on
the CPU misses it by an ulp in about 1 value of 150 (1,368 of 200,000 uniform values, against
Python's `math.sqrt`); on the H200 the spreads of 1 text in 80 differed that way. `rounded_sqrt`
moves any result within an ulp to the nearest with exact products (Dekker), on every device.
"""
from __future__ import annotations

import math

import numpy as np
import torch

# ln 2 split so that k * LN2_HIGH is exact for |k| < 2^11 (LN2_HIGH has 21 trailing zero bits):
# the Cody-Waite reduction. Both halves are the float64 values nearest to the digits of ln 2.
LN2_HIGH = 6.93147180369123816490e-01
LN2_LOW = 1.90821492927058770002e-10
LOG2_E = 1.4426950408889634
# Below this exp underflows to 0 in float64 (the smallest subnormal is 2^-1074).
EXP_UNDERFLOW = -745.2
# Taylor terms of exp(r) for |r| <= ln(2)/2: r^14/14! < 2^-60, so 13 terms suffice.
EXP_TERMS = 13
# Terms of log(m) = 2 atanh(s), s = (m - 1)/(m + 1), |s| <= 0.1716 for m in [sqrt(1/2), sqrt(2)):
# s^25/25 < 2^-66.
ATANH_TERMS = 12
SQRT_HALF = 0.7071067811865476


def exp(values: np.ndarray | float) -> np.ndarray:
    """e^x for float64 x <= 709 (what BLEU needs: x <= 0), the same bits on every machine."""
    given = np.asarray(values, dtype=np.float64)
    x = np.where(given < EXP_UNDERFLOW, 0.0, given)  # -inf and the like: 0 below, no nan on the way
    k = np.rint(x * LOG2_E)
    r = (x - k * LN2_HIGH) - k * LN2_LOW
    total = np.ones_like(r)
    for n in range(EXP_TERMS, 0, -1):  # Horner: 1 + r/1 (1 + r/2 (1 + ... (1 + r/13)))
        total = 1.0 + (r / n) * total
    result = np.ldexp(total, k.astype(np.int64))
    return np.where(given < EXP_UNDERFLOW, 0.0, result)


def log(values: np.ndarray | float) -> np.ndarray:
    """Natural log of float64 x > 0 (-inf at 0), the same bits on every machine."""
    x = np.asarray(values, dtype=np.float64)
    mantissa, exponent = np.frexp(np.where(x > 0, x, 1.0))  # exact: x = mantissa * 2^exponent
    low = mantissa < SQRT_HALF
    mantissa = np.where(low, mantissa * 2.0, mantissa)
    exponent = np.where(low, exponent - 1, exponent).astype(np.float64)
    s = (mantissa - 1.0) / (mantissa + 1.0)
    s2 = s * s
    series = np.full_like(s, 1.0 / (2 * ATANH_TERMS - 1))
    for n in range(ATANH_TERMS - 2, -1, -1):  # 1 + s^2/3 + s^4/5 + ... by Horner
        series = 1.0 / (2 * n + 1) + s2 * series
    log_mantissa = 2.0 * s * series
    result = exponent * LN2_HIGH + (log_mantissa + exponent * LN2_LOW)
    return np.where(x > 0, result, -np.inf)


def power(base: np.ndarray | float, exponent: float) -> np.ndarray:
    """base^exponent for base >= 0 as exp(exponent log base) (0^0 = 1, 0^e = 0 for e > 0)."""
    base = np.asarray(base, dtype=np.float64)
    if exponent == 0:
        return np.ones_like(base)
    return np.where(base > 0, exp(exponent * log(np.where(base > 0, base, 1.0))), 0.0)


def divided(values: torch.Tensor, divisor: float) -> torch.Tensor:
    """values / divisor, rounded once on every device (see the module's note on CUDA)."""
    return values / torch.full_like(values, divisor)


# Veltkamp's splitter for float64: c * (2^27 + 1) cuts c into two halves of 26 bits, whose products
# are exact (Dekker, 1971, "A floating-point technique for extending the available precision").
SPLITTER = 134217729.0


# rounded_sqrt works through this many values at a time: its dozen float64 temporaries then stay
# near 100 MiB, also for a whole tile (half-power weights, `neighbours.quantised_weights`).
ROOT_CHUNK = 1 << 20


def rounded_sqrt(values: torch.Tensor) -> torch.Tensor:
    """The float64 square root rounded to nearest, the same bits on every device: the device's
    root of the mantissa (scaled into [1/2, 2) by an even power of two, exactly) is moved to the
    neighbouring float while that one is nearer, which exact residuals decide."""
    x = values.to(torch.float64)
    if x.numel() <= ROOT_CHUNK:
        return _rounded_sqrt(x)
    flat, out = x.reshape(-1), torch.empty_like(x).reshape(-1)
    for start in range(0, flat.numel(), ROOT_CHUNK):
        out[start : start + ROOT_CHUNK] = _rounded_sqrt(flat[start : start + ROOT_CHUNK])
    return out.view(x.shape)


def _rounded_sqrt(x: torch.Tensor) -> torch.Tensor:
    mantissa, exponent = torch.frexp(x)  # x = mantissa 2^exponent, mantissa in [1/2, 1)
    odd = (exponent & 1).bool()
    scaled = torch.where(odd, mantissa * 2.0, mantissa)  # in [1/2, 2), x = scaled 4^half
    half = torch.div(exponent.to(torch.int64) - odd.to(torch.int64), 2, rounding_mode="floor")
    root = torch.sqrt(scaled)
    for _ in range(2):  # a device's root within an ulp needs one step; the second only checks
        root = _nearer_root(scaled, root)
    power_of_two = torch.bitwise_left_shift(half + 1023, 52).view(torch.float64)  # 2^half, exactly
    return torch.where((x > 0) & torch.isfinite(x), root * power_of_two, torch.sqrt(x))


def _nearer_root(square: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
    """`root`, or its neighbour nearer the square root of `square` (both in [1/2, 2)).

    root is the nearest float to sqrt(square) iff the residual R = square - root^2 satisfies
    -root * gap_below < R <= root * gap_above (the squares of the midpoints, whose last term
    can never tie). root^2 = product + error exactly (Dekker's product: every operation below is
    exact, in this order, on any IEEE device), square - product is exact (Sterbenz), and each
    comparison of (square - product) -/+ root * gap with error keeps its order when rounded."""
    above = torch.nextafter(root, torch.full_like(root, math.inf))
    below = torch.nextafter(root, torch.zeros_like(root))
    split = root * SPLITTER
    high = split - (split - root)
    low = root - high
    product = root * root
    error = (((high * high - product) + high * low) + low * high) + low * low
    difference = square - product
    too_small = difference - root * (above - root) > error
    too_large = difference + root * (root - below) <= error
    return torch.where(too_small, above, torch.where(too_large, below, root))
