"""Timing helpers shared by the kernel benchmarks: medians of interleaved repeats, on one core.

A ratio is per core when both sides use one: torch runs with one thread, and a peer runs with
the process pinned to one CPU (threads it starts inherit the pin, so a peer that spreads its
work over threads, as fast-bleu does, gets one core too). Repeats alternate the sides, so a
burst of load from other work on a shared machine hits both alike; the median is reported.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def one_core() -> Iterator[int | None]:
    """The process pinned to one of the CPUs it may use (restored after); yields the CPU, or
    None where the platform cannot pin."""
    if not hasattr(os, "sched_getaffinity"):
        yield None
        return
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def median(values: list[float]) -> float:
    return float(statistics.median(values))
