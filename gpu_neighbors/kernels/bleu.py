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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from gpu_neighbors.text.ngrams import NgramFeatures
from gpu_neighbors.text.vocabulary import TokenBatch, Vocabulary
from gpu_neighbors.kernels.base import Kernel

SMOOTHINGS = ("none", "epsilon", "add1", "exp")
EPSILON = 0.1  # NLTK's SmoothingFunction default epsilon for method1
MAX_ORDER = 4
FIT_SLICE = 65_536  # training texts tokenized at a time
# What sharing order n = 2, 3, 4 divides out of a pair's product of smoothed numerators. Their
# product is the pair's numerator product with m_2 = m_3 = m_4 = 0. For `exp` the zeros are
# numbered k = 1, 2, 3 from order 2; sharing order n leaves zeros only above n, so it removes
# the factor 2^-k of the last zero, k = 5 - n. `none` divides out 1 and is masked apart.
UNMATCHED_NUMERATORS = {
    "none": (1.0, 1.0, 1.0),
    "epsilon": (EPSILON, EPSILON, EPSILON),
    "add1": (1.0, 1.0, 1.0),
    "exp": (1 / 8, 1 / 4, 1 / 2),
}


@dataclass(frozen=True)
class EncodedBleu:
    """A chunk of candidates: occurrence matrices per order and token counts."""

    features: list[torch.Tensor]  # sparse COO [rows x F_n] for n = 1..4
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
        # Token strings as Python lists take ~0.7 GB per million texts: tokenize in slices,
        # once for the vocabulary and once for the ids, and keep only the ids.
        self.vocabulary = Vocabulary(self.tokenizer.tokenize(text) for text in texts)
        slices = [
            self.encode_tokens(texts[first : first + FIT_SLICE])
            for first in range(0, len(texts), FIT_SLICE)
        ]
        batch = TokenBatch(
            ids=torch.cat([part.ids for part in slices]),
            lengths=torch.cat([part.lengths for part in slices]),
        )
        del slices
        self.ngrams = NgramFeatures(MAX_ORDER)
        self._train = self.ngrams.fit(batch, len(self.vocabulary))
        self._train_lengths = batch.lengths.to(torch.float64)

    def encode(self, texts: Sequence[str]) -> EncodedBleu:
        return self.encode_batch(self.encode_tokens(texts))

    def encode_tokens(self, texts: Sequence[str]) -> TokenBatch:
        """Token ids of `texts` in this kernel's vocabulary."""
        return self.vocabulary.batch([self.tokenizer.tokenize(text) for text in texts], self.device)

    def encode_batch(self, batch: TokenBatch) -> EncodedBleu:
        """Encode candidates that are already token ids in this kernel's vocabulary."""
        features = [matrix.to_sparse_coo() for matrix in self.ngrams.transform(batch)]
        return EncodedBleu(features, batch.lengths.to(torch.float64))

    def tile(self, encoded: EncodedBleu, start: int, stop: int) -> torch.Tensor:
        # COO products: torch 2.13's CSR x CSR product on the CPU (MKL) leaks about the size of
        # its result on every call, which a stream of millions of tiles cannot afford.
        matches = (
            torch.sparse.mm(features, row_block(train, start, stop).t().to_sparse_coo())
            for features, train in zip(encoded.features, self._train)
        )
        return bleu_star(matches, encoded.lengths, self._train_lengths[start:stop], self.smoothing)

    def pair_bytes(self) -> int:
        # Worst case, every pair shares every order and every candidate length differs: the
        # float64 tile and its by-length table, one sparse product at a time (its COO result,
        # two int64 indices and a float32 count, after a CSR one inside the product), and per
        # stored pair its table row and about two float64 temporaries.
        return 2 * 8 + (12 + 20) + 8 + 2 * 8

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
        check_invariants=False,
    )


def bleu_star(
    matches: Iterable[torch.Tensor],
    candidate_lengths: torch.Tensor,
    train_lengths: torch.Tensor,
    smoothing: str,
) -> torch.Tensor:
    """BLEU* [rows x cols] (float64) from sparse COO clipped match counts m_1..m_4 [rows x cols].

    Only pairs that share an n-gram are touched, so the work follows the overlap, not the tile.
    A shared n-gram contains shared (n-1)-grams, so the orders a pair does not share are always
    its last ones, and every smoothing factorises over orders: a pair sharing a unigram starts
    from its value with m_2 = m_3 = m_4 = 0, and each higher order n it shares multiplies that
    by (smoothed numerator of m_n / UNMATCHED_NUMERATORS[n])^(1/3). Under `none` only the pairs
    sharing a 4-gram keep a value.
    """
    matches = iter(matches)
    device = candidate_lengths.device
    # A pair sharing unigrams only has a value that depends on the two lengths alone: tabulate
    # it for the distinct candidate lengths of the chunk against every training text.
    lengths, length_index = torch.unique(candidate_lengths, return_inverse=True)
    numerators = torch.tensor(UNMATCHED_NUMERATORS[smoothing], dtype=torch.float64, device=device)
    by_length = unigram_only_bleu(lengths, train_lengths, numerators, smoothing)
    score = torch.zeros((len(candidate_lengths), len(train_lengths)), dtype=torch.float64, device=device)
    rows, cols, _ = _stored_entries(next(matches))
    score.index_put_((rows, cols), by_length[length_index[rows], cols])
    del by_length
    for order, product in enumerate(matches, start=2):
        rows, cols, counts = _stored_entries(product)
        score.index_put_((rows, cols), score[rows, cols] * shared_order_factor(counts, order, smoothing))
    if smoothing == "none":  # rows, cols: the pairs sharing a 4-gram
        kept = score[rows, cols]
        score.zero_()
        score.index_put_((rows, cols), kept)
    return score


def unigram_only_bleu(
    candidate_lengths: torch.Tensor,
    train_lengths: torch.Tensor,
    unmatched_numerators: torch.Tensor,
    smoothing: str,
) -> torch.Tensor:
    """BLEU* [rows x cols] of pairs that share a unigram but no bigram (so no higher order
    either): it depends on the two lengths alone. `unmatched_numerators` is
    UNMATCHED_NUMERATORS[smoothing] as a float64 tensor on the device."""
    add_one = 1.0 if smoothing == "add1" else 0.0
    orders = torch.arange(2, MAX_ORDER + 1, dtype=torch.float64, device=candidate_lengths.device)
    denominators = (candidate_lengths[:, None] - orders + 1).clamp(min=1) + add_one
    value = torch.exp(torch.log(unmatched_numerators / denominators).sum(dim=1) / 3)
    brevity = torch.exp(torch.clamp(1 - train_lengths[None, :] / candidate_lengths[:, None].clamp(min=1), max=0))
    return value[:, None] * brevity


def shared_order_factor(counts: torch.Tensor, order: int, smoothing: str) -> torch.Tensor:
    """What sharing order n >= 2 with m_n = `counts` multiplies a pair's BLEU* by."""
    add_one = 1.0 if smoothing == "add1" else 0.0
    return ((counts.to(torch.float64) + add_one) / UNMATCHED_NUMERATORS[smoothing][order - 2]) ** (1 / 3)


def _stored_entries(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row, column, value) of every stored entry of a sparse COO matrix, each pair once."""
    matrix = matrix.coalesce()
    rows, cols = matrix.indices()
    return rows, cols, matrix.values()
