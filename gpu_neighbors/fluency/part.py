"""Fluency as a part of a scorer, beside kernel, estimator and intervals: a language model's
judgment of each text, which the neighbour estimate cannot see (a copy of a good text with words
dropped, replaced or letters swapped overlaps the training set as much as the original).

Two statistics of a text's tokens under the model (each after the start token and the tokens
before it): the mean log-probability, and that mean less the mean of the tokens' unigram
log-probabilities (SLOR, after Pauls and Klein, 2012; among the best such measures of
acceptability for Lau, Clark and Lappin, 2017, and of fluency for Kann, Rothe and Filippova,
2018): a rare word costs the model a low probability wherever it stands, so the mean alone
mistakes rare words for broken text, and the difference keeps what the context explains. The
unigram table is the model's own: its predicted distributions averaged over every token
position of the calibration texts (one pseudo-position of the uniform distribution beside them,
so no token is impossible), on the calibration texts' domain and with no other corpus. Copies
of good texts with 30% of their words dropped were flagged 2-4x as often by it as by the mean;
the mean catches letter swaps (rare tokens) better: both are kept (bench/fluency.md, part 6).

Both are rounded to a grid of 1/ROUNDING nats before anything ranks or weighs them, and the
unigram table too (so its sums are exact, in any order): the model's floats move with device,
dtype and batch (bf16 by a few 1e-3, fp32 by 1e-6), and the rounding keeps those moves from
reaching estimates and flags but where a value sits on a grid line. A text without a token has
none (NaN).

`Fluency(model="auto")` is the offline model where it was fetched (`gpu-neighbors fetch-model`),
else no fluency (said once a process); `Fluency(model=PATH)` a GGUF file or Hugging Face causal
LM folder. `use`: "auto" puts the statistic into the estimate only where leave-one-out on the
training set gains beyond the noise (the rule `auto` follows for kernels, `choice.py`), and runs
no model at all on training texts that are not English (`language.py`); "always" wherever the
model is, whatever the language. A fitted scorer names the model and the SHA-256 of its weights; loaded
with other weights, it is refused by name.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.core.portable import log
from gpu_neighbors.fluency.files import REFETCH, ModelFiles, check_offline, model_files, offline_model
from gpu_neighbors.fluency.model import LanguageModel

AUTO, NONE = "auto", "none"
USES = ("auto", "always")
DTYPES = {"auto": None, "bfloat16": torch.bfloat16, "float32": torch.float32}
# `statistics`' columns: the mean log-probability and SLOR (the first STATISTIC_COLUMNS), then the
# token count (COUNT_COLUMN).
STATISTIC_COLUMNS, COUNT_COLUMN = 2, 2
ROUNDING = 1024  # the statistic's grid: 1/1024 nats, a binary fraction (exact in float64)
# `auto` runs the model from this many training texts: with fewer, a gain in leave-one-out rho is
# rarely beyond noise (the shipped example's 100 headlines: 0.721 -> 0.707, off), and below
# k / level = 100 calibration texts the outlier test is Bonferroni's alone, which the fluency
# column does not join (`outlier.FLUENCY_ALONE`): not worth the model.
AUTO_MIN_TEXTS = 150
_told_missing = False


class Fluency:
    """model: "auto" (the offline model, where fetched), a GGUF file or a Hugging Face causal LM
    folder. use: "auto" (in the estimate where leave-one-out gains beyond noise; no model on
    training texts that are not English) or "always".
    dtype: "auto" (bfloat16 on CUDA and on CPUs with AMX or AVX-512 BF16, else float32),
    "bfloat16" or "float32"."""

    def __init__(self, model: str | os.PathLike[str] = AUTO, use: str = "auto", dtype: str = "auto") -> None:
        if not isinstance(model, (str, os.PathLike)) or not str(model):
            raise ValueError(f"fluency model must be 'auto' or a path, not {model!r}")
        if use not in USES:
            raise ValueError(f"fluency use must be one of {', '.join(USES)}, not {use!r}")
        if not isinstance(dtype, str) or dtype not in DTYPES:  # a list: unhashable
            raise ValueError(f"fluency dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        self.model = str(model) if str(model) == AUTO else str(Path(model).expanduser().resolve())
        self.use, self.dtype = use, dtype

    def settings(self) -> dict[str, Any]:
        return {"model": self.model, "use": self.use, "dtype": self.dtype}

    def files(self) -> ModelFiles | None:
        """The model's files; None where `model` is auto and the offline model is not fetched
        (said once a process), a ValueError saying to fetch it again where it is damaged."""
        global _told_missing
        if self.model != AUTO:
            return model_files(self.model)
        path = offline_model()
        if path is None:
            if not _told_missing:
                _told_missing = True
                warn("fluency auto: the offline language model is not fetched (gpu-neighbors fetch-model), so "
                     "scorers run without fluency")
            return None
        files = model_files(path)
        check_offline(files.sha256, str(path), REFETCH)  # cut short or overwritten: say how to mend it
        return files

    def __repr__(self) -> str:
        return f"Fluency(model={self.model!r}, use={self.use!r}, dtype={self.dtype!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fluency) and other.settings() == self.settings()

    def __hash__(self) -> int:
        return hash(tuple(self.settings().items()))


def fluency_part(fluency: str | os.PathLike[str] | Fluency | None) -> Fluency | None:
    """The part `fluency` stands for: None or "none" for no fluency, "auto" or a path for
    `Fluency(model=...)` (a path is used always: naming a model asks for it)."""
    if fluency is None or isinstance(fluency, Fluency):
        return fluency
    if not isinstance(fluency, (str, os.PathLike)):
        raise ValueError(f"fluency must be 'auto', 'none', a model's path or a Fluency part, not {fluency!r}")
    if str(fluency) == NONE:
        return None
    return Fluency(fluency) if str(fluency) == AUTO else Fluency(fluency, use="always")


def resolved_dtype(dtype: str, device: torch.device) -> torch.dtype:
    chosen = DTYPES[dtype]
    if chosen is not None:
        return chosen
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if device.type == "cpu" and fast_cpu_bfloat16():
        return torch.bfloat16
    return torch.float32


def fast_cpu_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX-512 BF16); elsewhere bfloat16 is
    emulated, slower than float32."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("amx_bf16", "avx512_bf16"))


@dataclass
class FittedFluency:
    """The part's model resolved and loaded on a device: the statistics of texts and token ids.
    `unigram`: the unigram table (float64 [vocabulary], host), learned by `calibrate` or loaded."""

    files: ModelFiles
    dtype: torch.dtype
    device: torch.device
    unigram: torch.Tensor | None = None
    _placed: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)  # (unigram, on the device)

    @property
    def model(self) -> LanguageModel:
        return LanguageModel.load(self.files, self.device, self.dtype)

    def calibrate(self, texts: list[str]) -> torch.Tensor:
        """Learn the unigram table from the calibration `texts` (`unigram_table`), then
        `of_texts` of them: one pass of the model over them."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' notes on loading
            self.unigram = unigram_table(*self.model.token_mass(texts))
        return self.of_texts(texts)

    def check_unigram(self) -> None:
        """Refuse a unigram table (a saved one) that does not cover the model's vocabulary."""
        assert self.unigram is not None
        size = self.model.vocabulary_size
        if self.unigram.numel() != size:
            raise ValueError(f"the fluency unigram table has {self.unigram.numel()} entries, but {self.files.name} "
                             f"has {size} tokens")

    def of_texts(self, texts: list[str]) -> torch.Tensor:
        """float64 [texts, 3] on the device: the rounded mean token log-probability (NaN: no
        token), the rounded SLOR (NaN also before `calibrate`) and the token count."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' notes on loading
            return statistics(*self.model.text_log_probs(texts, self.unigram))

    def of_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """`of_texts` of token ids of the model's own tokenizer, on their device, no host wait
        (the unigram table copied to the model's device once, not every call)."""
        table = None
        if self.unigram is not None:
            if self._placed is None or self._placed[0] is not self.unigram:
                self._placed = (self.unigram, self.unigram.to(self.device))
            table = self._placed[1]
        return statistics(*self.model.id_log_probs(input_ids, attention_mask, table))

    def shares_tokenizer(self, tokenizer: Any) -> bool:
        """Whether a Hugging Face tokenizer's ids are this model's (the same vocabulary)."""
        return tokenizer is not None and dict(tokenizer.get_vocab()) == self.model.vocabulary()

    def signature(self) -> str:
        return f"{self.files.name}@{self.files.sha256[:12]},{str(self.dtype).removeprefix('torch.')}"


def statistics(sums: torch.Tensor, counts: torch.Tensor, unigram_sums: torch.Tensor | None) -> torch.Tensor:
    """[rows, 3]: the mean, sum / count on the grid of 1/ROUNDING (NaN where count is 0); SLOR,
    (sum - unigram sum) / count on the grid (NaN too without unigram sums); and count."""
    counts = counts.to(torch.float64)
    mean = torch.round(sums / counts * ROUNDING) / ROUNDING
    if unigram_sums is None:
        slor = torch.full_like(mean, float("nan"))
    else:
        slor = torch.round((sums - unigram_sums) / counts * ROUNDING) / ROUNDING
    return torch.stack([mean, slor, counts], dim=1)


def unigram_table(mass: torch.Tensor, positions: int) -> torch.Tensor:
    """float64 [vocabulary]: log((mass + 1 / vocabulary) / (positions + 1)) on the grid of
    1/ROUNDING, from the model's distributions summed over `positions` token positions
    (`LanguageModel.token_mass`), with one position's worth of the uniform distribution beside
    them; made with the portable log, so the same table from the same mass on every host."""
    size = mass.numel()
    probabilities = (mass.numpy() + 1.0 / size) / (positions + 1.0)
    return torch.from_numpy(np.round(log(probabilities) * ROUNDING) / ROUNDING)


def check_weights(files: ModelFiles, name: str, sha256: str) -> None:
    """Refuse weights other than those a scorer was fitted with, naming both."""
    if files.sha256 != sha256:
        raise ValueError(f"the scorer was fitted with fluency model {name} (SHA-256 {sha256[:16]}...), but "
                         f"{files.source} is {files.name} (SHA-256 {files.sha256[:16]}...): other weights give "
                         "other numbers")


__all__ = ["AUTO", "NONE", "FittedFluency", "Fluency", "check_weights", "fluency_part", "resolved_dtype", "statistics",
           "unigram_table"]
