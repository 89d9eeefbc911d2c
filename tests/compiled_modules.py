"""The package's compiled modules as the install built them, whatever GPU_NEIGHBORS_COMPILED says
(the suite may run with it 0, to test the numpy and torch passes), for the tests that hold each
compiled function to its twin."""
from __future__ import annotations

import importlib
import shutil
from types import ModuleType

import pytest


def built(name: str) -> ModuleType:
    """The compiled module `name`; the test skips where no C compiler could build it (there the
    install leaves the numpy and torch passes, tested by the rest of the suite)."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the install leaves the numpy and torch passes")
    return importlib.import_module(name)
