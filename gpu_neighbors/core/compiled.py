"""The core's per-row host loops compiled (`_compiled`, Cython, built at install where a C
compiler is found), or None: then each caller runs its torch passes, which give the same
answers (the tests hold every compiled function to its torch twin). GPU_NEIGHBORS_COMPILED=0 in
the environment turns the compiled loops off (`gpu_neighbors._extensions`)."""
from __future__ import annotations

from gpu_neighbors._extensions import load

native = load("gpu_neighbors.core._compiled")
