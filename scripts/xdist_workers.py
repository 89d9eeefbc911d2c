"""How many pytest-xdist workers `scripts/test.sh` starts: one per CPU this process may run on,
no more than a container's CPU quota allows (a container can see every core of its host while
its quota is two) and one per 3 GiB of available memory (each worker imports torch and the
heaviest tests hold a few hundred MB), at least one."""
from __future__ import annotations

import math
import os
from pathlib import Path

GIB_PER_WORKER = 3


def quota_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cgroup's CPU quota in CPUs (v2's cpu.max, else v1's cfs quota), None where unlimited."""
    try:
        if (cgroup / "cpu.max").exists():
            quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        elif (cgroup / "cpu" / "cpu.cfs_quota_us").exists():
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        else:
            return None
        return None if quota in ("max", "-1") else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def available_gib(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """MemAvailable in GiB, None where the kernel does not say."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return None


def workers(cpus: int, quota: float | None, memory_gib: float | None) -> int:
    count = cpus if quota is None else min(cpus, math.ceil(quota))
    if memory_gib is not None:
        count = min(count, int(memory_gib // GIB_PER_WORKER))
    return max(1, count)


if __name__ == "__main__":
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    print(workers(cpus, quota_cpus(), available_gib()))
