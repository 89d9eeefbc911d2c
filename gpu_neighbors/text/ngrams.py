"""Token ids -> n-gram occurrence features -> sparse binary matrices.

Clipped n-gram overlap is a dot product once the k-th occurrence of n-gram g in a text is its
own feature (g, k): min(c_x(g), c_s(g)) = sum_k [c_x(g) >= k][c_s(g) >= k]. N-grams get exact
dense ids order by order: an n-gram is the pair ((n-1)-gram id, last token id), and pairs are
numbered through sorted tables of the training set (`torch.unique`, `torch.searchsorted`), so
no id is a hash, nothing collides and no Python runs per n-gram. A candidate n-gram absent from
the training set gets id -1: it can match nothing, but still counts in the candidate's n-gram
total. On the CPU, `transform` runs each order as one compiled pass per text
(`_compiled.ngram_order`, the same ids, found by hash indexes over the same sorted tables) where
the compiled loops were built.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from gpu_neighbors.text.compiled import native
from gpu_neighbors.text.key_index import KeyIndex, concatenated
from gpu_neighbors.text.vocabulary import TokenBatch


def lookup_sorted(table: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Position of each key in the sorted 1-D `table`, or -1 where it is absent."""
    if table.numel() == 0:
        return torch.full_like(keys, -1)
    position = torch.searchsorted(table, keys).clamp(max=table.numel() - 1)
    return torch.where(table[position] == keys, position, torch.full_like(position, -1))


def occurrence_rank(groups: torch.Tensor) -> torch.Tensor:
    """For each element, how many earlier elements share its group key (0 for the first)."""
    if groups.numel() == 0:
        return groups.clone()
    order = torch.argsort(groups, stable=True)
    sorted_groups = groups[order]
    index = torch.arange(groups.numel(), device=groups.device)
    starts = torch.ones_like(sorted_groups, dtype=torch.bool)
    starts[1:] = sorted_groups[1:] != sorted_groups[:-1]
    run_start = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=0).values
    rank = torch.empty_like(index)
    rank[order] = index - run_start
    return rank


@dataclass(frozen=True)
class OrderTable:
    """The training set's n-grams of one order (sorted keys; position = n-gram id) and its
    occurrence features (sorted keys gram_id * max_rank + k)."""

    gram_keys: torch.Tensor
    feature_keys: torch.Tensor
    max_rank: int

    @cached_property
    def host_indexes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The gram keys' and the feature keys' `KeyIndex`, joined for the compiled pass (a slot
        or two a key where a binary search reads ~15): made on first use, from CPU tables."""
        return concatenated([KeyIndex(self.gram_keys.numpy()), KeyIndex(self.feature_keys.numpy())])


class NgramFeatures:
    """Builds, for orders 1..max_order, the sparse binary occurrence matrices of a training set
    (`fit`) and of candidate batches (`transform`) over the same feature columns."""

    def __init__(self, max_order: int = 4) -> None:
        self.max_order = max_order
        self.tables: list[OrderTable] = []
        self.vocab_size = 0

    def fit(self, batch: TokenBatch, vocab_size: int) -> list[torch.Tensor]:
        """Number the training n-grams and features; return the training matrices [S x F_n]."""
        self.vocab_size = max(vocab_size, 1)
        self.tables = []
        matrices = []
        gram_ids = batch.ids
        for order in range(1, self.max_order + 1):
            keys, valid = self._gram_keys(batch, gram_ids, order)
            gram_keys, inverse = torch.unique(keys[valid], sorted=True, return_inverse=True)
            gram_ids = torch.full_like(keys, -1)
            gram_ids[valid] = inverse
            rows, grams = batch.rows[valid], inverse
            rank = occurrence_rank(rows * gram_keys.numel() + grams)
            max_rank = int(rank.max()) + 1 if rank.numel() else 1
            feature_keys = torch.unique(grams * max_rank + rank, sorted=True)
            self.tables.append(OrderTable(gram_keys, feature_keys, max_rank))
            columns = lookup_sorted(feature_keys, grams * max_rank + rank)
            matrices.append(self._matrix(rows, columns, len(batch), feature_keys.numel()))
        return matrices

    def transform(self, batch: TokenBatch) -> list[torch.Tensor]:
        """Candidate matrices [rows x F_n] over the training features; unmatched features are
        dropped (they cannot contribute to any clipped count). Only an n-gram whose first n-1
        tokens are a training (n-1)-gram can be a training n-gram, so each order looks only at
        the starts that survived the order below."""
        if native is not None and batch.ids.device.type == "cpu":
            return self._compiled_transform(batch)
        matrices = []
        starts = torch.arange(batch.ids.numel(), device=batch.ids.device)
        rows, gram_ids = batch.rows, batch.ids
        ends = (batch.offsets + batch.lengths)[rows]  # one past the last token of each token's text
        for order, table in enumerate(self.tables, start=1):
            if order > 1:
                last = starts + order - 1
                inside = last < ends[starts]
                starts, gram_ids, last_token = starts[inside], gram_ids[inside], batch.ids[last[inside]]
                gram_ids = torch.where(last_token >= 0, gram_ids * self.vocab_size + last_token, -1)
            gram_ids = lookup_sorted(table.gram_keys, gram_ids)
            known = gram_ids >= 0
            starts, gram_ids = starts[known], gram_ids[known]
            rows = batch.rows[starts]
            rank = occurrence_rank(rows * table.gram_keys.numel() + gram_ids)
            within = rank < table.max_rank
            columns = lookup_sorted(
                table.feature_keys, gram_ids[within] * table.max_rank + rank[within]
            )
            kept = columns >= 0
            matrices.append(
                self._matrix(
                    rows[within][kept], columns[kept], len(batch), table.feature_keys.numel()
                )
            )
        return matrices

    def _compiled_transform(self, batch: TokenBatch) -> list[torch.Tensor]:
        """`transform` on the CPU, each order one compiled pass per text (`ngram_order`): a
        text's n-gram ids by hash index, its occurrence features counted from their sort."""
        assert native is not None
        ids = np.ascontiguousarray(batch.ids.numpy(), dtype=np.int64)
        lengths = np.ascontiguousarray(batch.lengths.numpy(), dtype=np.int64)
        offsets = np.cumsum(lengths) - lengths
        grams = ids.copy()
        matrices = []
        for order, table in enumerate(self.tables, start=1):
            crow = np.empty(lengths.size + 1, dtype=np.int64)
            columns = np.empty(ids.size, dtype=np.int64)
            entries = native.ngram_order(
                ids, offsets, lengths, order, self.vocab_size, *table.host_indexes, table.max_rank, grams, crow,
                columns,
            )
            matrices.append(self._csr(torch.from_numpy(crow), torch.from_numpy(columns[:entries]),
                                      len(batch), table.feature_keys.numel()))
        return matrices

    def _gram_keys(
        self, batch: TokenBatch, previous_ids: torch.Tensor, order: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Key of the n-gram starting at every token (previous (n-1)-gram id, last token) and
        whether it is a real, fully known n-gram."""
        if order == 1:
            return batch.ids, batch.ids >= 0
        total = batch.ids.numel()
        last = torch.arange(total, device=batch.ids.device) + order - 1
        inside = batch.positions + order <= batch.lengths[batch.rows]
        last_token = batch.ids[last.clamp(max=max(total - 1, 0))]
        valid = inside & (previous_ids >= 0) & (last_token >= 0)
        return previous_ids * self.vocab_size + last_token, valid

    @staticmethod
    def _matrix(rows: torch.Tensor, columns: torch.Tensor, num_rows: int, num_columns: int):
        """Binary CSR matrix with ones at (rows, columns); rows arrive sorted."""
        order = torch.argsort(rows * max(num_columns, 1) + columns)
        rows, columns = rows[order], columns[order]
        crow = torch.zeros(num_rows + 1, dtype=torch.int64, device=rows.device)
        crow[1:] = torch.cumsum(torch.bincount(rows, minlength=num_rows), 0)
        return NgramFeatures._csr(crow, columns, num_rows, num_columns)

    @staticmethod
    def _csr(crow: torch.Tensor, columns: torch.Tensor, num_rows: int, num_columns: int) -> torch.Tensor:
        """Binary CSR matrix of row offsets `crow` and, within each row, ascending `columns`."""
        values = torch.ones(columns.numel(), dtype=torch.float32, device=crow.device)
        with warnings.catch_warnings():
            # the notes core.sparse.unchecked_sparse keeps in too (text cannot import core)
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
            return torch.sparse_csr_tensor(
                crow, columns, values, (num_rows, max(num_columns, 1)), check_invariants=False
            )
