"""One loader and one switch (GPU_NEIGHBORS_COMPILED) for every layer's compiled module
(`gpu_neighbors._extensions`)."""
from __future__ import annotations

import pytest

from gpu_neighbors import _extensions
from compiled_modules import built


@pytest.mark.parametrize("name", ["gpu_neighbors.core._compiled", "gpu_neighbors.text._compiled"])
def test_one_switch_turns_both_layers_loops_off(monkeypatch, name):
    module = built(name)
    monkeypatch.setenv("GPU_NEIGHBORS_COMPILED", "0")
    assert _extensions.load(name) is None
    monkeypatch.setenv("GPU_NEIGHBORS_COMPILED", "1")
    assert _extensions.load(name) is module


def test_a_module_never_built_loads_as_none():
    """Built without a C compiler, or a source tree never built: the numpy and torch passes run."""
    assert _extensions.load("gpu_neighbors.core._never_built") is None
