"""The kernel protocol: the only thing a kernel does is produce similarity tiles.

A kernel caches its view of the training set once (`fit`), turns a chunk of candidates into its
own representation (`encode`), and returns the similarity of those candidates to a contiguous
block of training texts (`tile`) as a float64 tensor on the scorer's device. Chunking, memory
budgets, thresholds, aggregation and leave-one-out all live outside, in the scorer and the
neighbour model, so every kernel gets them for free.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from gpu_neighbors.text.tokenizers import Tokenizer


class Kernel(ABC):
    """Similarity k(candidate, training text) in [0, 1] for all pairs, tile by tile."""

    name: ClassVar[str]
    default_tau: ClassVar[float]

    def __init__(self, *, tokenizer: Tokenizer, device: torch.device) -> None:
        self.tokenizer = tokenizer
        self.device = device
        self.train_texts: list[str] = []

    def fit(self, texts: Sequence[str]) -> None:
        """Encode the training set once; a later call replaces it."""
        self.train_texts = list(texts)
        self._fit(self.train_texts)

    @abstractmethod
    def _fit(self, texts: list[str]) -> None:
        """Build and cache the training-side representation (on `self.device`)."""

    @property
    def num_train(self) -> int:
        return len(self.train_texts)

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> Any:
        """Candidate-side representation of a chunk of texts, reused for every training block."""

    def encode_train(self, start: int, stop: int) -> Any:
        """`encode` of training texts start..stop-1 (leave-one-out); override to reuse the cache."""
        return self.encode(self.train_texts[start:stop])

    @abstractmethod
    def tile(self, encoded: Any, start: int, stop: int) -> torch.Tensor:
        """Similarities [len(chunk), stop - start], float64 on `self.device`, against training
        texts start..stop-1."""

    @abstractmethod
    def pair_bytes(self) -> int:
        """Peak working memory of `tile` per (candidate, training text) pair, in bytes; the
        scorer sizes tiles from it and its memory budget."""

    @property
    def depends_on_training_set(self) -> bool:
        """Whether k(x, s) changes with the rest of the training set (e.g. idf weights), so
        that a sub-matrix of one all-pairs pass is not exactly what a refit on a split gives."""
        return False

    def settings(self) -> dict[str, str]:
        """Every setting that changes the numbers, for the scorer's signature."""
        return {"tok": self.tokenizer.signature}
