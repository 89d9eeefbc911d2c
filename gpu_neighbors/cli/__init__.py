"""The `gpu-neighbors` command line. `main` imports the commands (and with them torch) inside
its own body, so a Ctrl-C while they load is an interruption message, not a traceback.

While those native libraries load, SIGINT is held back and delivered once they are loaded: a
KeyboardInterrupt raised inside a Python callback of a C++ extension (torch's pybind11 code)
cannot unwind through it and aborts the process ("terminate called ..."), where after the load
it is the usual interruption."""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gpu_neighbors.cli.codes import INTERRUPTED


@contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT blocked inside, delivered (as KeyboardInterrupt) on leaving; a no-op where the
    platform has no signal masks."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


# Where the user chose no thread count, numpy's BLAS (the kernel ridge solves of the baselines and
# the ridge estimator) runs on one thread, as torch does (`core/threads.py`): OpenBLAS's threads
# spin when a busy machine takes their cores, and an eigendecomposition of 900 x 900 took 9x the
# CPU time (0.14 against 1.23 s) on two loaded cores. It reads this once, as numpy loads.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS")


def one_blas_thread() -> None:
    """OPENBLAS_NUM_THREADS=1 unless a thread count is set (before numpy is imported: no effect after)."""
    if not any(name in os.environ for name in BLAS_THREAD_VARIABLES) and "numpy" not in sys.modules:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def main(argv: Sequence[str] | None = None) -> int:
    one_blas_thread()
    try:
        with interrupts_held():
            from gpu_neighbors.cli.run import run
    except KeyboardInterrupt:
        print("gpu-neighbors: interrupted", file=sys.stderr)
        return INTERRUPTED
    return run(argv)


__all__ = ["main"]
