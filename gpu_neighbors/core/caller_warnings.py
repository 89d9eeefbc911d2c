"""Warnings that point at the user's line: the first frame outside this package.

A fixed `stacklevel` is right for one call path only (`fit` called directly, but not `fit`
inside `fit_pairwise`, `kernel="auto"` or an evaluation protocol); walking the stack to the
first frame whose file is not in gpu_neighbors is right for all of them. Python 3.12's
`skip_file_prefixes` does the same; this package supports 3.11.
"""
from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np

P = ParamSpec("P")
R = TypeVar("R")

PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message, category)` attributed to the caller's line."""
    level, frame = 2, sys._getframe(1)  # level 1 is this function, 2 its caller
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_ROOT):
        level, frame = level + 1, frame.f_back  # type: ignore[assignment]
    warnings.warn(message, category, stacklevel=level)


def beyond_float_is_inf(function: Callable[P, R]) -> Callable[P, R]:
    """`function` with numpy's overflow, division and invalid-value warnings off: statistics of
    scores near the float64 limit overflow to inf (or NaN) honestly, and the value says so; a
    warning printed from inside the package would only point at numpy."""
    @functools.wraps(function)
    def quiet(*args: P.args, **kwargs: P.kwargs) -> R:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return function(*args, **kwargs)

    return quiet
