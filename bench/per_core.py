"""Timing helpers shared by the kernel benchmarks: medians of interleaved repeats, on one core.

A ratio is per core when both sides use one: torch runs with one thread, and a peer runs with
the process pinned to one CPU (threads it starts inherit the pin, so a peer that spreads its
work over threads, as fast-bleu does, gets one core too). Repeats alternate the sides, so a
burst of load from other work on a shared machine hits both alike; the median is reported.
"""
from __future__ import annotations

import argparse
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


def time_all_pairs(kernel: Any, train: list[str], candidates: list[str]) -> tuple[float, Any]:
    """(seconds, [candidates x train] scores) of a kernel fitted on `train` and run over every
    pair, in the tiles NeighborsScorer plans for its default memory budget on the kernel's
    device: fitting, tokenizing, encoding and copying the scores to the CPU included."""
    from gpu_neighbors.core.tiling import MatrixReduction, TilePlan, default_memory_budget, reduce_tiles

    start = time.perf_counter()
    kernel.fit(train)
    plan = TilePlan.from_budget(default_memory_budget(kernel.device), kernel.pair_bytes(), len(train), chunk_rows=None)
    scores = reduce_tiles(
        lambda first, last: kernel.encode(candidates[first:last]), kernel.tile,
        plan.chunks(len(candidates)), plan.blocks(len(train)), MatrixReduction(len(candidates), len(train)),
    )
    return time.perf_counter() - start, scores


def kernel_arguments(doc: str, pairs: int) -> argparse.ArgumentParser:
    """The options every all-pairs kernel benchmark takes: sizes (`pairs` x `pairs` by default),
    torch threads and the device."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--train", type=int, default=pairs, help="training texts")
    parser.add_argument("--candidates", type=int, default=pairs, help="candidate texts")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="auto")
    return parser


def measured(args: argparse.Namespace, measure: Callable[..., dict], **settings: Any) -> dict:
    """`measure` run with the `kernel_arguments` options given on the command line (and `settings`)."""
    return measure(train_size=args.train, candidate_size=args.candidates, device=args.device,
                   threads=args.threads or None, **settings)
