"""The scorer's signature: every setting that changes the numbers, as sacrebleu signs its scores.

Code reads the fields; `str()` is the one-line `key:value|key:value` form printed and stored
beside outputs, which resumed runs compare. Nothing parses that line back.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    """`kernel_settings` are the kernel's own (tokenizer, smoothing, model, ...), in its order."""

    kernel: str
    kernel_settings: tuple[tuple[str, str], ...]
    tau: float
    min_neighbors: int
    max_fraction: float
    num_train: int
    version: str

    def fields(self) -> dict[str, str]:
        """The settings as printed, in order; a and b are the paper's names."""
        return {
            "kernel": self.kernel,
            **dict(self.kernel_settings),
            "tau": f"{self.tau:g}",
            "a": str(self.min_neighbors),
            "b": f"{self.max_fraction:g}",
            "n": str(self.num_train),
            "version": self.version,
        }

    def __str__(self) -> str:
        return "|".join(f"{key}:{value}" for key, value in self.fields().items())
