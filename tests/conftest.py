"""Shared fixtures: the real HUSE summarization data and adversarial texts; the test device.

GPU_NEIGHBORS_DETERMINISTIC=1 runs the suite under torch.use_deterministic_algorithms(True), so an
operation without a deterministic implementation on the test device raises (on the CPU almost
none does: tests/census.py lists the ones that would on CUDA).

GPU_NEIGHBORS_TEST_DEVICE=cuda runs every scorer and kernel the tests build on that device:
"cpu" and "auto" given to them resolve to it. Tests about the CPU itself carry the `cpu_only`
mark and skip themselves there.
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
import tempfile
from pathlib import Path

import pytest
import torch

TEST_DEVICE = os.environ.get("GPU_NEIGHBORS_TEST_DEVICE", "cpu")

# The fetched offline fluency model, if any (scripts/setup.sh fetches it): tests/fluency loads it
# from here. Every other test runs where `fluency="auto"` finds no model (an empty models folder
# of this run), so a default scorer runs no language model and the suite stays fast.
# pytest-xdist's workers inherit both variables from the process that set them first.
from gpu_neighbors.fluency import offline_model  # noqa: E402

if "GPU_NEIGHBORS_SUITE_MODEL" not in os.environ:
    os.environ["GPU_NEIGHBORS_SUITE_MODEL"] = str(offline_model() or "")
    os.environ["GPU_NEIGHBORS_HOME"] = tempfile.mkdtemp(prefix="gpu-neighbors-tests-")
REAL_FLUENCY_MODEL = Path(os.environ["GPU_NEIGHBORS_SUITE_MODEL"]) if os.environ["GPU_NEIGHBORS_SUITE_MODEL"] else None


def needs(*modules: str) -> pytest.MarkDecorator:
    """Skips a test, naming what is missing, where an optional package it runs is absent (a bare
    device environment: bench/gpu_pack.txt). For a package imported inside the code under test
    (pyarrow for Parquet, matplotlib for figures, scikit-learn for the baseline, lxml under
    sacrebleu), which pytest.importorskip in the test cannot reach."""
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (not installed)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_only: checks the CPU path itself; skipped on another test device")
    if os.environ.get("GPU_NEIGHBORS_DETERMINISTIC") == "1":
        torch.use_deterministic_algorithms(True)
    if TEST_DEVICE != "cpu":
        _resolve_to_test_device()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if TEST_DEVICE == "cpu":
        return
    skip = pytest.mark.skip(reason=f"checks the CPU path; the test device is {TEST_DEVICE}")
    for item in items:
        if "cpu_only" in item.keywords:
            item.add_marker(skip)


def _resolve_to_test_device() -> None:
    """Point every module's `resolve_device` at one that maps "cpu" and "auto" to TEST_DEVICE."""
    import gpu_neighbors
    from gpu_neighbors.core import tiling

    original = tiling.resolve_device

    def resolve(device: str | torch.device) -> torch.device:
        if str(device) in ("cpu", "auto"):
            device = TEST_DEVICE
        return original(device)

    for module in pkgutil.walk_packages(gpu_neighbors.__path__, "gpu_neighbors."):
        if module.name.endswith(".__main__"):  # runs the command line when imported
            continue
        try:
            loaded = importlib.import_module(module.name)
        except ImportError:  # an optional extra that is not installed
            continue
        if getattr(loaded, "resolve_device", None) is original:
            setattr(loaded, "resolve_device", resolve)

# ../shared beside the project, or GPU_NEIGHBORS_SHARED (the GPU check's carried copy, .gpu/shared).
SHARED = Path(os.environ.get("GPU_NEIGHBORS_SHARED") or Path(__file__).resolve().parents[2] / "shared")
SHARED_DATA = SHARED / "data" / "huse_summarization.jsonl"

ADVERSARIAL_TEXTS = [
    "",
    "   ",
    "a",
    "a a a a a a",
    "the the the",
    "a b",
    "a b c",
    "x y z w",
    "the cat sat on the mat",
    "the cat sat",
    "the mat sat on the cat the cat",
    " ".join(f"tok{i % 37}" for i in range(320)),
    " ".join(f"w{i}" for i in range(300)),
    "naïve café 東京 über straße",
    "ÉCOLE école Ecole",
    "emoji 🙂 🙂 text",
]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    """`records` as a JSON Lines file at `path` (the CLI tests' inputs)."""
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def huse_records() -> list[dict]:
    if not SHARED_DATA.exists():
        pytest.fail(f"the shared data is missing: {SHARED_DATA} (CI runs with ../shared beside the repo)")
    with SHARED_DATA.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="session")
def huse_texts(huse_records) -> list[str]:
    return [record["text"] for record in huse_records]


@pytest.fixture(scope="session")
def huse_scores(huse_records) -> list[float]:
    return [record["score"] for record in huse_records]


def allocator_variable(name: str) -> bool:
    """Whether an environment variable is one by which a process's owner chooses how glibc's
    malloc behaves (`core.host_memory` then never asks it)."""
    return name.startswith("MALLOC_") or name in ("GLIBC_TUNABLES", "GPU_NEIGHBORS_KEEP_HOST_MEMORY")


@pytest.fixture()
def unasked_allocator(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """`core.host_memory` as if this process had never asked glibc, in an environment that chose
    nothing, with glibc's call recorded (one True a call) instead of made."""
    from gpu_neighbors.core import host_memory

    asked: list[bool] = []
    monkeypatch.setattr(host_memory, "_asked", False)
    monkeypatch.setattr(host_memory, "_kept", False)
    monkeypatch.setattr(host_memory, "_set_glibc_thresholds", lambda: asked.append(True) or True)
    for name in [name for name in os.environ if allocator_variable(name)]:
        monkeypatch.delenv(name)
    return asked
