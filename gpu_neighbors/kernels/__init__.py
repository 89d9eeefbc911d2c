"""Similarity kernels, one module each, all behind `Kernel` (see `base.py`)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from importlib import import_module
from typing import ParamSpec, TypeVar

from gpu_neighbors.core.threads import library_threads
from gpu_neighbors.kernels.base import Kernel

P = ParamSpec("P")
R = TypeVar("R")

_KERNEL_CLASSES = {
    "bleu": "bleu:BleuKernel",
    "rouge": "rouge:RougeKernel",
    "meteor": "meteor:MeteorKernel",
    "bertscore": "bertscore:BertScoreKernel",
    "tfidf": "tfidf:TfidfKernel",
}

KERNEL_NAMES: tuple[str, ...] = tuple(_KERNEL_CLASSES)
# Kernels whose work is a transformer's dense forward pass, which more threads speed up; the
# others are many small sparse operations, faster on one thread (core/threads.py).
MODEL_KERNELS = ("bertscore",)


def kernel_threads(*names: str) -> AbstractContextManager[None]:
    """`library_threads` for work with these kernels: one thread unless one of them is a model."""
    return library_threads(enabled=not any(name in MODEL_KERNELS for name in names))


def threads_by_kernel(function: Callable[P, R]) -> Callable[P, R]:
    """Run `function` inside `kernel_threads` of its keyword argument `kernel` (default bleu)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with kernel_threads(str(kwargs.get("kernel", "bleu"))):
            return function(*args, **kwargs)

    return wrapper


def kernel_class(name: str) -> type[Kernel]:
    """The Kernel subclass registered as `name`; modules load on first use (BERTScore pulls in
    transformers, which other kernels should not pay for)."""
    try:
        module_name, class_name = _KERNEL_CLASSES[name].split(":")
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(KERNEL_NAMES)}") from None
    return getattr(import_module(f".{module_name}", __name__), class_name)


__all__ = ["KERNEL_NAMES", "MODEL_KERNELS", "Kernel", "kernel_class", "kernel_threads", "threads_by_kernel"]
