"""The host's allocator asked to keep the memory a tile loop frees, for its next tile.

glibc's malloc gives freed memory back to the kernel once more than its trim threshold of it lies
free at the top of the heap (dynamic: twice the largest block it has mapped, at most 64 MiB),
and serves blocks over its mmap threshold from fresh mappings. A CPU tile loop allocates and
frees a tile (up to 24 MiB, `tiling.CPU_TILE_PAIRS`) and its reductions' masks and indices every
tile, so each tile's memory came back as fresh pages: a page fault and a zeroed page each 4 KiB.
Measured on 20,000 spliced HUSE texts against 2,000, one thread: the default predict took
160,000 page faults and 0.3 s of system time of its 1.7 s; BLEU* 0.2-0.3 s of 1.7 s; ROUGE-L
1.0-1.3 s of 3.4-3.9 s (and the fresh pages slowed its own work too).

`keep_freed_memory` sets glibc's mmap threshold to its largest value (32 MiB: every CPU tile is
served from the heap) and its trim threshold to KEPT_BYTES, so memory the loop frees stays in
the process for the next tile; the process's resident size can stay up to KEPT_BYTES above what
it holds. Process-wide and permanent (glibc has no way back to its dynamic thresholds), as
`core.threads` is, so only where the process's owner left the allocator alone: not where the
environment sets a glibc malloc tunable (MALLOC_*_ variables, glibc.malloc in GLIBC_TUNABLES)
nor where GPU_NEIGHBORS_KEEP_HOST_MEMORY=0, nor in the command line's `score`
(`leave_allocator_alone`); elsewhere than glibc (musl, macOS, Windows) nothing.
"""
from __future__ import annotations

import ctypes
import os
import sys

KEPT_BYTES = 256 << 20
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest mmap threshold on 64-bit systems
OPT_OUT = "GPU_NEIGHBORS_KEEP_HOST_MEMORY"
# mallopt's parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_GLIBC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                    "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST")

_asked = False  # keep_freed_memory has run in this process: its answer holds for good
_kept = False


def _owner_left_allocator_alone() -> bool:
    """Whether neither the environment nor the user chose how glibc's malloc behaves."""
    if os.environ.get(OPT_OUT, "1") == "0":
        return False
    if any(name in os.environ for name in _GLIBC_VARIABLES):
        return False
    return "glibc.malloc." not in os.environ.get("GLIBC_TUNABLES", "")


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory (see above), once a process; whether it now does."""
    global _asked, _kept
    if not _asked:
        _asked = True
        _kept = _owner_left_allocator_alone() and _set_glibc_thresholds()
    return _kept


def leave_allocator_alone() -> None:
    """Never ask glibc in this process (before any tile loop: once asked, the setting stays).
    For a process whose tiles run in threads while the host bounds its speed: the command
    line's `score`, where keeping freed memory left the time the same and raised the peak
    resident size by 12-20% (100,000 x 2,000, one and two workers)."""
    global _asked
    _asked = True


def _set_glibc_thresholds() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # only glibc has it: its mallopt numbers are the ones above
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, KEPT_BYTES))
