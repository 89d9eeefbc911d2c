"""The one switch and loader of the package's optional compiled modules (`core._compiled`,
`text._compiled`: Cython, built at install where a C compiler is found). Each layer's
`compiled` module asks here for its own, so both obey the same environment variable, and this
module sits below every layer (core and text may not import each other)."""
from __future__ import annotations

import importlib
import os
from types import ModuleType


def load(name: str) -> ModuleType | None:
    """The compiled module `name`, or None where it was not built (no C compiler at install, or
    a source tree never built) or GPU_NEIGHBORS_COMPILED=0 in the environment turns the compiled
    loops off (to compare, or to rule them out): then the callers run their numpy or torch
    passes, which give the same answers."""
    if os.environ.get("GPU_NEIGHBORS_COMPILED", "1") == "0":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
