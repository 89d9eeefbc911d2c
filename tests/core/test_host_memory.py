"""The host allocator keeps what a tile loop frees (glibc), unless its owner chose otherwise.

The pages are counted in a child process (the setting is process-wide and permanent); who is
asked, in this one with glibc's call recorded instead of made. The child frees
four 31 MiB tensors at once, five times over (after four rounds to warm up), and counts its page
faults. With the setting, none: the 124 MiB freed is under KEPT_BYTES. Without it, glibc gives
them back (124 MiB free at the heap's top is over its own trim threshold, at most 64 MiB) and
each round takes fresh pages (31,744 faults) in most runs, but not all: where something else
lands above them on the heap nothing is freed at its top, so the rounds without the setting are
not asserted (the predict of `bench/bench_predict.py` shows the same: 150,000 faults in most of
its runs, 1,600 in some).
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from conftest import allocator_variable

CHILD = """
import resource, sys
import torch
from gpu_neighbors.core import host_memory
from gpu_neighbors.core.tiling import reduce_tiles

if sys.argv[1] == "loop":
    reduce_tiles(lambda first, last: None, lambda encoded, start, stop: None, [], [], type("R", (), {"result": lambda self: 0})())
elif sys.argv[1] == "call":
    host_memory.keep_freed_memory()

def churn():
    arrays = [torch.ones((31 << 20) // 8, dtype=torch.float64) for _ in range(4)]
    del arrays

for _ in range(4):  # glibc's heap settles in three rounds
    churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    churn()
print(host_memory.keep_freed_memory(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
FRESH_ROUND = (124 << 20) // 4096  # pages of one round's arrays


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version
    except (OSError, AttributeError):
        return False
    return True


pytestmark = pytest.mark.skipif(not _glibc(), reason="the setting is glibc's (mallopt); this C library has none")


def _faults(how: str) -> tuple[bool, int]:
    env = {name: value for name, value in os.environ.items() if not allocator_variable(name)}
    done = subprocess.run([sys.executable, "-c", CHILD, how], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    kept, faults = done.stdout.split()
    return kept == "True", int(faults)


@pytest.mark.parametrize("how", ["call", "loop"])
def test_freed_memory_is_kept_for_the_next_round(how: str) -> None:
    kept, faults = _faults(how)
    assert kept and faults < FRESH_ROUND // 10


@pytest.mark.parametrize("environment", [{"GPU_NEIGHBORS_KEEP_HOST_MEMORY": "0"}, {"MALLOC_ARENA_MAX": "2"},
                                         {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}])
def test_an_owner_who_chose_keeps_the_allocator_as_it_was(unasked_allocator: list[bool],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          environment: dict[str, str]) -> None:
    from gpu_neighbors.core import host_memory

    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert not host_memory.keep_freed_memory() and not unasked_allocator


def test_a_process_that_leaves_it_alone_keeps_the_allocator_as_it_was(unasked_allocator: list[bool]) -> None:
    from gpu_neighbors.core import host_memory

    host_memory.leave_allocator_alone()
    assert not host_memory.keep_freed_memory() and not unasked_allocator


def test_an_owner_who_left_it_alone_is_asked_once(unasked_allocator: list[bool]) -> None:
    from gpu_neighbors.core import host_memory

    assert host_memory.keep_freed_memory() and host_memory.keep_freed_memory()
    assert unasked_allocator == [True]


def test_elsewhere_than_linux_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows has no `CDLL(None)` (a TypeError there), macOS and the BSDs no glibc."""
    from gpu_neighbors.core import host_memory

    def refused(name: object) -> None:
        raise AssertionError(f"the C library was opened ({name!r})")

    monkeypatch.setattr(host_memory.sys, "platform", "win32")
    monkeypatch.setattr(host_memory.ctypes, "CDLL", refused)
    assert not host_memory._set_glibc_thresholds()
