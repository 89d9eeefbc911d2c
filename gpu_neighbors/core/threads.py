"""One intra-op thread for the library's CPU work, unless the caller chose a thread count.

The sparse products, sorts and gathers of the text kernels are small operations; under torch's
default threads each one wakes OpenMP threads that spin when they finish, and on a machine whose
cores are busy (a training process's data-loader workers, other jobs) a spinning thread takes a
core from the thread that has work: measured 1.4x to 12x slower than one thread (see
bench/bench_threads.py). So a library call runs on one thread and restores the caller's count
when it returns, but only where the caller left torch's default alone: no OMP_NUM_THREADS or
MKL_NUM_THREADS in the environment, and the count torch had when this module was first imported
(a count set later with `torch.set_num_threads`, 1 included, is kept as it is). A count set before
gpu_neighbors was imported cannot be told from the default: set it after, or set OMP_NUM_THREADS.
Calls nest (an inner call finds one thread and leaves it). The count is process-wide: a caller
running torch in other threads during a library call sees one thread there too.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import torch

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
TORCH_DEFAULT = torch.get_num_threads()  # the count before any call of ours
_chosen = False  # set_threads was called: the process's owner chose a count

P = ParamSpec("P")
R = TypeVar("R")


def set_threads(count: int) -> None:
    """`torch.set_num_threads(count)` as an explicit choice that library calls then keep, even
    where it equals torch's default (the command line's --threads)."""
    global _chosen
    torch.set_num_threads(count)
    _chosen = True


def caller_left_default() -> bool:
    """Whether the process runs torch's default thread count, untouched by its user."""
    return (not _chosen and not any(name in os.environ for name in THREAD_VARIABLES)
            and torch.get_num_threads() == TORCH_DEFAULT)


@contextmanager
def library_threads(enabled: bool = True) -> Iterator[None]:
    """One intra-op thread inside the block where the caller left the default (see above);
    `enabled=False` (work that is one large dense product, a transformer's forward pass) leaves
    the threads alone."""
    previous = torch.get_num_threads()
    if not enabled or previous == 1 or not caller_left_default():
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def one_thread(function: Callable[P, R]) -> Callable[P, R]:
    """Run `function` inside `library_threads`."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with library_threads():
            return function(*args, **kwargs)

    return wrapper
