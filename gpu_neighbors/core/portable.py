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
tensor on the values' device, which every device rounds once.
"""
from __future__ import annotations

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
