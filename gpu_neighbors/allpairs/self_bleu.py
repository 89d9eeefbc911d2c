"""Self-BLEU: the diversity of a set of generations, each text's BLEU against all the others.

Exactly NLTK's `sentence_bleu(others, text, weights, smoothing)` for each text (as the Texygen
benchmark computes it), in time linear in the number of n-grams (see `kernels/bleu_sets.py`).
Defaults follow common use: BLEU-4 weights and NLTK's method1 (epsilon) smoothing, as Texygen
and fast-bleu's `SelfBLEU` use them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.threads import one_thread
from gpu_neighbors.core.tiling import resolve_device
from gpu_neighbors.core.validation import check_texts, interval
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS, check_weights
from gpu_neighbors.kernels.bleu_sets import self_bleu as self_bleu_scores
from gpu_neighbors.text.tokenizers import Tokenizer, make_tokenizer

DEFAULT_SMOOTHING = "epsilon"


@dataclass(frozen=True)
class SelfBleu:
    """Per-text Self-BLEU of the texts at `indices` (all texts unless sampled), and their mean."""

    indices: np.ndarray  # int64, positions in the input
    scores: np.ndarray  # float64, one per index
    weights: tuple[float, ...]
    smoothing: str

    @property
    def mean(self) -> float:
        return float(self.scores.mean()) if self.scores.size else float("nan")


@one_thread
def self_bleu(
    texts: Sequence[str],
    *,
    weights: Sequence[float] = BLEU4_WEIGHTS,
    smoothing: str = DEFAULT_SMOOTHING,
    tokenizer: str | Tokenizer = "whitespace",
    lowercase: bool = False,
    sample: int | None = None,
    seed: int = 0,
    device: str | torch.device = "auto",
) -> SelfBleu:
    """Self-BLEU of `texts` (each against all the others). `sample` reports a seeded random
    sample of that many texts, still each against all the others."""
    texts = check_texts(texts, "texts")
    weights = check_weights(weights)
    if sample is not None and not interval(1, integer=True).accepts(sample):
        raise ValueError(f"sample must be a positive number of texts, not {sample!r}")
    if not interval(0, integer=True).accepts(seed):
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    scores = self_bleu_scores(list(texts), make_tokenizer(tokenizer, lowercase), weights, smoothing,
                              resolve_device(device)).cpu().numpy()
    indices = np.arange(len(texts))
    if sample is not None and sample < len(texts):
        indices = np.sort(np.random.default_rng(int(seed)).choice(len(texts), size=int(sample), replace=False))
    return SelfBleu(indices=indices, scores=scores[indices], weights=weights, smoothing=smoothing)
