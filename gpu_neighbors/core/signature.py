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
    estimator: str = "threshold"
    power: float = 0.0
    top_k: int | None = None
    penalty: float | None = None
    tuned: bool = False
    selection: tuple[tuple[str, float], ...] | None = None  # kernel="auto": inner rho per kernel
    level: float | None = None  # of the intervals (low, high), which change with it
    outside: str | None = None  # the outlier test's level, the negative evidence's rule, the word list's language
    fluency: str | None = None  # the fluency model (name@sha256 prefix,dtype) and whether it is in use

    def fields(self) -> dict[str, str]:
        """The settings as printed, in order; a and b are the paper's names. The estimator, p, k
        (or the ridge penalty),
        whether the settings were tuned and the automatic kernel choice appear where used."""
        fields = {"kernel": self.kernel, **dict(self.kernel_settings)}
        if self.estimator == "topk":
            fields.update(estimator="topk", k=str(self.top_k))
        elif self.estimator == "ridge":
            fields.update(estimator="ridge", penalty="loo" if self.penalty is None else f"{self.penalty:.4g}")
        else:
            fields.update(tau=f"{self.tau:g}", a=str(self.min_neighbors), b=f"{self.max_fraction:g}")
        if self.power:
            fields["p"] = f"{self.power:g}"
        if self.tuned:
            fields["tuned"] = "loo"
        if self.selection is not None:
            fields["auto"] = ",".join(f"{name}={rho:.3f}" for name, rho in self.selection)
        fields.update(n=str(self.num_train), version=self.version)
        if self.level is not None:
            fields["level"] = f"{self.level:g}"
        if self.outside is not None:
            fields["outside"] = self.outside
        if self.fluency is not None:
            fields["fluency"] = self.fluency
        return fields

    def __str__(self) -> str:
        return "|".join(f"{key}:{value}" for key, value in self.fields().items())
