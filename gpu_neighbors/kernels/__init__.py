"""Similarity kernels, one module each, all behind `Kernel` (see `base.py`)."""
from __future__ import annotations

from importlib import import_module

from gpu_neighbors.kernels.base import Kernel

_KERNEL_CLASSES = {
    "bleu": "bleu:BleuKernel",
    "rouge": "rouge:RougeKernel",
    "meteor": "meteor:MeteorKernel",
    "bertscore": "bertscore:BertScoreKernel",
}

KERNEL_NAMES: tuple[str, ...] = tuple(_KERNEL_CLASSES)


def kernel_class(name: str) -> type[Kernel]:
    """The Kernel subclass registered as `name`; modules load on first use (BERTScore pulls in
    transformers, which other kernels should not pay for)."""
    try:
        module_name, class_name = _KERNEL_CLASSES[name].split(":")
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(KERNEL_NAMES)}") from None
    return getattr(import_module(f".{module_name}", __name__), class_name)


__all__ = ["KERNEL_NAMES", "Kernel", "kernel_class"]
