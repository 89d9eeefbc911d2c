"""The `gpu-neighbors` command line. `main` imports the commands (and with them torch) inside
its own body, so a Ctrl-C while they load is an interruption message, not a traceback.

While those native libraries load, SIGINT is held back and delivered once they are loaded: a
KeyboardInterrupt raised inside a Python callback of a C++ extension (torch's pybind11 code)
cannot unwind through it and aborts the process ("terminate called ..."), where after the load
it is the usual interruption."""
from __future__ import annotations

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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        with interrupts_held():
            from gpu_neighbors.cli.run import run
    except KeyboardInterrupt:
        print("gpu-neighbors: interrupted", file=sys.stderr)
        return INTERRUPTED
    return run(argv)


__all__ = ["main"]
