"""The `gpu-neighbors` command line. `main` imports the commands (and with them torch) inside
its own body, so a Ctrl-C while they load is an interruption message, not a traceback."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from gpu_neighbors.cli.codes import INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from gpu_neighbors.cli.main import run
    except KeyboardInterrupt:
        print("gpu-neighbors: interrupted", file=sys.stderr)
        return INTERRUPTED
    return run(argv)


__all__ = ["main"]
