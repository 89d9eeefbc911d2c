"""The host's per-position loops compiled (`_compiled`, Cython, built at install where a C
compiler is found), or None: then each caller runs its numpy passes, which give the same
answers (the tests hold every compiled function to its numpy twin). GPU_NEIGHBORS_COMPILED=0 in
the environment turns the compiled loops off (to compare, or to rule them out)."""
from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("GPU_NEIGHBORS_COMPILED", "1") == "0":
        return None
    try:
        from gpu_neighbors.text import _compiled
    except ImportError:  # built without a C compiler, or run from a source tree never built
        return None
    return _compiled


native = _load()
