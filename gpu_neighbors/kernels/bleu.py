"""BLEU*: BLEU-4 without the unigram precision (the paper's Definition 3.1), as sparse products.

For a candidate x and a training text s, with m_n the clipped n-gram matches and
t_n = max(len(x) - n + 1, 1):
    BLEU*(x, s) = BP * (P_2 P_3 P_4)^(1/3),  P_n = m_n / t_n,  BP = exp(min(0, 1 - len(s)/len(x))),
and BLEU* = 0 when x is empty or shares no unigram with s. A zero m_n is smoothed as NLTK's
`SmoothingFunction` methods 0-3 do, so the numbers equal
`sentence_bleu([s], x, weights=(0, 1/3, 1/3, 1/3), smoothing_function=...)`:
    none    (method0) BLEU* = 0 (NLTK returns ~1e-103, the cube root of the smallest float)
    epsilon (method1) P_n = 0.1 / t_n
    add1    (method2) P_n = (m_n + 1) / (t_n + 1) for every n >= 2, zero or not
    exp     (method3) P_n = 1 / (2^k t_n) for the k-th order with m_n = 0
Per order, one sparse product of the candidates' occurrence features with the training set's
gives every clipped count of a tile at once (see `ngrams.py`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..ngrams import NgramFeatures
from ..tokenize import TokenBatch, Vocabulary
from .base import Kernel

SMOOTHINGS = ("none", "epsilon", "add1", "exp")
EPSILON = 0.1  # NLTK's SmoothingFunction default epsilon for method1
MAX_ORDER = 4


@dataclass(frozen=True)
class EncodedBleu:
    """A chunk of candidates: occurrence matrices per order and token counts."""

    features: list[torch.Tensor]  # CSR [rows x F_n] for n = 1..4
    lengths: torch.Tensor  # float64 [rows]

    def __len__(self) -> int:
        return int(self.lengths.numel())


class BleuKernel(Kernel):
    name = "bleu"
    default_tau = 0.08

    def __init__(self, *, tokenizer, device, smoothing: str = "add1") -> None:
        super().__init__(tokenizer=tokenizer, device=device)
        if smoothing not in SMOOTHINGS:
            raise ValueError(f"smoothing must be one of {', '.join(SMOOTHINGS)}, not {smoothing!r}")
        self.smoothing = smoothing

    def _fit(self, texts: list[str]) -> None:
        token_lists = [self.tokenizer.tokenize(text) for text in texts]
        self.vocabulary = Vocabulary(token_lists)
        batch = self.vocabulary.batch(token_lists, self.device)
        self.ngrams = NgramFeatures(MAX_ORDER)
        self._train = self.ngrams.fit(batch, len(self.vocabulary))
        self._train_lengths = batch.lengths.to(torch.float64)

    def encode(self, texts: Sequence[str]) -> EncodedBleu:
        return self.encode_batch(
            self.vocabulary.batch([self.tokenizer.tokenize(text) for text in texts], self.device)
        )

    def encode_batch(self, batch: TokenBatch) -> EncodedBleu:
        """Encode candidates that are already token ids in this kernel's vocabulary."""
        return EncodedBleu(self.ngrams.transform(batch), batch.lengths.to(torch.float64))

    def tile(self, encoded: EncodedBleu, start: int, stop: int) -> torch.Tensor:
        matches = [
            (features @ row_block(train, start, stop).t()).to_dense().to(torch.float64)
            for features, train in zip(encoded.features, self._train)
        ]
        return bleu_star(matches, encoded.lengths, self._train_lengths[start:stop], self.smoothing)

    def pair_bytes(self) -> int:
        # Four dense float32 count products, their float64 copies, and about six float64
        # temporaries in `bleu_star`.
        return MAX_ORDER * (4 + 8) + 6 * 8

    def settings(self) -> dict[str, str]:
        return {**super().settings(), "smooth": self.smoothing}


def row_block(matrix: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows start..stop-1 of a CSR matrix, without copying the rest."""
    crow = matrix.crow_indices()
    first, last = int(crow[start]), int(crow[stop])
    return torch.sparse_csr_tensor(
        crow[start : stop + 1] - first,
        matrix.col_indices()[first:last],
        matrix.values()[first:last],
        (stop - start, matrix.shape[1]),
    )


def bleu_star(
    matches: list[torch.Tensor],
    candidate_lengths: torch.Tensor,
    train_lengths: torch.Tensor,
    smoothing: str,
) -> torch.Tensor:
    """BLEU* for all pairs from clipped match counts m_1..m_4 [rows x cols] (float64)."""
    lengths = candidate_lengths[:, None]
    log_precision = torch.zeros_like(matches[0])
    zeros_so_far = torch.zeros_like(matches[0])
    any_zero = torch.zeros_like(matches[0], dtype=torch.bool)
    for order in range(2, MAX_ORDER + 1):
        m = matches[order - 1]
        t = (lengths - order + 1).clamp(min=1)
        is_zero = m == 0
        any_zero |= is_zero
        if smoothing == "add1":
            precision = (m + 1) / (t + 1)
        elif smoothing == "epsilon":
            precision = torch.where(is_zero, EPSILON / t, m / t)
        elif smoothing == "exp":
            zeros_so_far += is_zero
            precision = torch.where(is_zero, 1 / (torch.exp2(zeros_so_far) * t), m / t)
        else:
            precision = torch.where(is_zero, torch.ones_like(m), m / t)
        log_precision += torch.log(precision)
    brevity = torch.exp(torch.clamp(1 - train_lengths[None, :] / lengths.clamp(min=1), max=0))
    score = brevity * torch.exp(log_precision / 3)
    undefined = matches[0] == 0
    if smoothing == "none":
        undefined |= any_zero
    return score.masked_fill(undefined, 0.0)
