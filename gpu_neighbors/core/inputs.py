"""What the scorer accepts from callers, checked at the boundary: texts, known scores, token ids,
and candidates encoded ahead. Each refusal names the argument (and the index) so a caller
reading a file can name the line."""
from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from gpu_neighbors.core.tiling import TilePlan
from gpu_neighbors.core.validation import check_texts, first_not_a_number, interval, unordered

# A lone surrogate (JSON's "\ud800" escape): a code point of a Python string with no UTF-8, which
# the kernels read as a code point, files refuse, and Rust tokenizers cannot take.
SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class PreparedCandidates:
    """Candidates encoded ahead (`NeighborsScorer.prepare`): each chunk of `plan` mapped to the
    kernel's encoding of it. `encoder`: the fitted kernel that encoded them; an encoding is only
    meaningful to that kernel (its vocabulary, its tables), so only it may score them."""

    size: int
    plan: TilePlan
    chunks: dict[tuple[int, int], Any]
    statistics: torch.Tensor  # `Typicality.of_texts` of the texts
    encoder: object = field(repr=False, compare=False)

    def encoded(self, first: int, last: int) -> Any:
        return self.chunks[first, last]

    def __len__(self) -> int:
        return self.size



def validate_texts(texts: Sequence[str], what: str, allow_empty: bool = False) -> list[str]:
    texts = check_texts(texts, what)
    if not texts and not allow_empty:
        raise ValueError(f"{what}: empty training set; give at least one scored text")
    if not allow_empty and not any(text.split() for text in texts):
        raise ValueError(f"{what}: every text is empty or whitespace, so there is nothing to learn from; give at "
                         "least one text with words")
    return texts


def validate_ids(input_ids: object, attention_mask: object) -> None:
    """Shape and dtype checks only (host metadata), so validation never waits on the device."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, not {type(input_ids).__name__}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must hold integer token ids, not {input_ids.dtype}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        return
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, not {type(attention_mask).__name__}")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids "
            f"{tuple(input_ids.shape)}: they must match"
        )
    if attention_mask.device != input_ids.device:
        raise ValueError(
            f"attention_mask is on {attention_mask.device}, input_ids on {input_ids.device}"
        )


def finite(value: object, name: str) -> float:
    if not interval().accepts(value):
        raise ValueError(f"{name} must be a finite number or None, not {value!r}")
    return float(cast(numbers.Real, value))  # a real number: `accepts` said so


class ScoreError(ValueError):
    """A training score that cannot be used; `index` says which, so callers reading files can
    name the line, and `setting` the parameter that would admit it, named by `explain`."""

    def __init__(self, index: int, reason: str, setting: str | None = None) -> None:
        self.index = index
        self.reason = reason
        self.setting = setting
        super().__init__(f"scores[{index}]: {self.explain(setting)}")

    def explain(self, setting_name: str | None) -> str:
        """The reason, naming `setting` as the caller knows it (the CLI: by its flag)."""
        return self.reason if self.setting is None else f"{self.reason} or set {setting_name}"


def validate_scores(
    scores: Sequence[float] | np.ndarray, count: int, score_range: tuple[float, float] | None
) -> np.ndarray:
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu()
        # numpy has no bfloat16; every float dtype is exact in float64
        scores = (scores.to(torch.float64) if scores.dtype.is_floating_point else scores).numpy()
    if isinstance(scores, (str, bytes)) or not isinstance(scores, (np.ndarray, Iterable)):
        raise TypeError(f"scores must be a sequence of numbers, not {type(scores).__name__}")
    if unordered(scores):
        raise TypeError(f"scores must be a sequence of numbers in order, not a {type(scores).__name__}")
    if not isinstance(scores, np.ndarray):
        scores = list(scores)  # once: a generator is read here, not by the checks and then np.array
    if not (isinstance(scores, np.ndarray) and scores.dtype.kind in "iuf"):
        wrong = first_not_a_number(scores)
        if wrong is not None:
            index, value = wrong
            raise ScoreError(index, f"{value!r} ({type(value).__name__}) is not a number")
    # A copy: contiguous whatever the caller's strides (torch takes no negative ones), and
    # the caller's array may change after fit without changing the scorer.
    quality = np.array(scores, dtype=np.float64, order="C")
    if quality.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {quality.shape}")
    if quality.size != count:
        raise ValueError(f"{count} training texts but {quality.size} scores: lengths must match")
    bad = np.flatnonzero(~np.isfinite(quality))
    if bad.size:
        raise ScoreError(int(bad[0]), f"{quality[bad[0]]} is not a finite number")
    if score_range is not None:
        low, high = score_range
        outside = np.flatnonzero((quality < low) | (quality > high))
        if outside.size:
            raise ScoreError(
                int(outside[0]),
                f"{quality[outside[0]]:g} is outside the score range [{low:g}, {high:g}]: "
                "rescale the scores (the paper maps them to [0, 1])",
                setting="score_range",
            )
    return quality
