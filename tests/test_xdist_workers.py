"""scripts/xdist_workers.py: the suite's worker count follows the CPUs, a container's quota and
the memory, whichever allows fewest."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "xdist_workers.py"
spec = importlib.util.spec_from_file_location("xdist_workers", SCRIPT)
assert spec is not None and spec.loader is not None
xdist_workers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(xdist_workers)


@pytest.mark.parametrize("cpus, quota, memory, expected", [
    (2, None, 23.0, 2),     # this machine
    (64, 2.0, 200.0, 2),    # a container on a large host, quota of two CPUs
    (64, 1.5, 200.0, 2),    # a part of a CPU counts as one
    (16, None, 7.0, 2),     # memory for two
    (16, None, 1.0, 1),     # never none
    (1, 0.5, None, 1),
])
def test_the_fewest_of_cpus_quota_and_memory(cpus, quota, memory, expected):
    assert xdist_workers.workers(cpus, quota, memory) == expected


@pytest.mark.parametrize("files, expected", [
    ({"cpu.max": "200000 100000\n"}, 2.0),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
    ({"cpu.max": "garbage\n"}, None),
])
def test_the_quota_is_read_from_either_cgroup_version(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert xdist_workers.quota_cpus(tmp_path) == expected


def test_available_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   6291456 kB\n")
    assert xdist_workers.available_gib(meminfo) == 6.0
    assert xdist_workers.available_gib(tmp_path / "absent") is None
