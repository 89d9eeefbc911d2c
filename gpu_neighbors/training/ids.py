"""Score token ids straight from a model's `generate`: no decode, no host round trip.

A training or RL loop holds its samples as a LongTensor [batch, length] on the GPU. Decoding
them to text, re-tokenizing on the host and copying back costs more than the scoring. When the
scorer's tokenizer is the model's Hugging Face tokenizer, the ids already are the tokens:
`predict_ids` maps them through a device table (Hugging Face id -> training vocabulary id) and
runs the BLEU* kernel and the neighbour model on the ids' device.

Equal to `predict(tokenizer.batch_decode(ids, skip_special_tokens=True))` whenever re-tokenizing
the decoded text gives the same tokens back, which holds for ids that came from tokenizing text.
Padding (attention mask 0), special tokens ([CLS], [SEP], [PAD], [UNK], ...), negative ids and
ids past the tokenizer's vocabulary are dropped, as that decode drops them. Ids a model samples
freely can form non-canonical segmentations that decode -> tokenize changes (WordPiece: a
leading "##ing", or "un" + "##able" where the tokenizer would pick "unable"); the id path scores
the tokens the model produced, the text path the re-segmented ones. See docs/training_loop.md.

No host synchronisation: there is no `.item()`, boolean-mask indexing, `nonzero`, `unique`,
`bincount` or sparse-sparse product in a call. Those ops size their output from device data,
which the ragged text path (`ngrams.NgramFeatures.transform`, CSR building, CSR x CSR products)
does freely; here every tensor has a shape known on the host:
  * tokens stay a padded [rows, length] matrix; dropped tokens are moved to the end of their
    row by a stable sort instead of being removed;
  * n-gram and occurrence-feature ids are looked up position by position (-1 = none), with
    `ngrams.lookup_sorted` and `ngrams.occurrence_rank`, both sort/search only;
  * clipped matches per order are one sparse x dense product: the training CSR block
    [texts, F_n] times a dense 0/1 matrix [F_n, rows] of the candidates' features.
The first call for a (fitted scorer, device) builds the tables (one pass over the tokenizer's
vocabulary, with syncs); later calls reuse them until the scorer is refitted.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from gpu_neighbors.kernels.bleu import (
    UNMATCHED_NUMERATORS,
    BleuKernel,
    row_block,
    shared_order_factor,
    unigram_only_bleu,
)
from gpu_neighbors.core.neighbours import NeighborStats, Quality, TensorPrediction, TrainingSubset, estimate_tensors
from gpu_neighbors.text.ngrams import OrderTable, lookup_sorted, occurrence_rank
from gpu_neighbors.scorer import default_memory_budget
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer

if TYPE_CHECKING:
    from gpu_neighbors.scorer import NeighborsScorer

DROPPED = -2  # lookup value of ids that decode would drop (special tokens, holes in the vocabulary)
FEATURE_BYTES = 4  # one float32 entry of the dense candidate-feature matrix
FEATURE_SHARE = 2  # at most 1/FEATURE_SHARE of the memory budget goes to candidate features


@dataclass(frozen=True)
class TrainingBlock:
    """Training texts start..stop-1: their occurrence matrices per order (CSR) and lengths."""

    start: int
    stop: int
    features: list[torch.Tensor]
    lengths: torch.Tensor


@dataclass(frozen=True)
class IdTables:
    """Everything the id path needs from a fitted bleu scorer, on one device."""

    lookup: torch.Tensor  # int64 [tokenizer size]: vocabulary id, -1 unseen in training, DROPPED
    tables: list[OrderTable]
    vocab_size: int
    feature_widths: list[int]  # columns of the training matrices per order
    blocks: list[TrainingBlock]
    quality: Quality
    smoothing: str
    unmatched_numerators: torch.Tensor  # float64 [3]: UNMATCHED_NUMERATORS of the smoothing

    @classmethod
    def build(cls, scorer: NeighborsScorer, device: torch.device) -> IdTables:
        kernel: BleuKernel = scorer.kernel_
        hf = kernel.tokenizer.hf
        size = len(hf)
        names = hf.convert_ids_to_tokens(list(range(size)))
        vocabulary_ids = kernel.vocabulary.batch(
            [[name] if isinstance(name, str) else [] for name in names], torch.device("cpu")
        )
        lookup = torch.full((size,), DROPPED, dtype=torch.int64)
        present = vocabulary_ids.lengths == 1
        lookup[present] = vocabulary_ids.ids
        special = torch.tensor(sorted(set(hf.all_special_ids)), dtype=torch.int64)
        lookup[special[special < size]] = DROPPED

        train = kernel._train  # CSR [|S| x F_n] per order, cached by the kernel at fit
        lengths = kernel._train_lengths
        plan = scorer._plan()
        blocks = []
        for start in range(0, scorer.num_train, plan.block_columns):
            stop = min(start + plan.block_columns, scorer.num_train)
            features = [row_block(matrix, start, stop).to(device) for matrix in train]
            blocks.append(TrainingBlock(start, stop, features, lengths[start:stop].to(device)))
        return cls(
            lookup=lookup.to(device),
            tables=[
                OrderTable(t.gram_keys.to(device), t.feature_keys.to(device), t.max_rank)
                for t in kernel.ngrams.tables
            ],
            vocab_size=kernel.ngrams.vocab_size,
            feature_widths=[matrix.shape[1] for matrix in train],
            blocks=blocks,
            quality=Quality.encode(
                torch.as_tensor(scorer.train_scores_, dtype=torch.float64, device=device)
            ),
            smoothing=kernel.smoothing,
            unmatched_numerators=torch.tensor(
                UNMATCHED_NUMERATORS[kernel.smoothing], dtype=torch.float64, device=device
            ),
        )

    def tokens(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Vocabulary ids [rows, length] with kept tokens first in each row (-1 = unseen in
        training), and the number kept per row."""
        in_range = (input_ids >= 0) & (input_ids < self.lookup.numel())
        mapped = self.lookup[input_ids.clamp(0, self.lookup.numel() - 1)]
        kept = in_range & (mapped != DROPPED)
        if attention_mask is not None:
            kept &= attention_mask != 0
        order = torch.argsort((~kept).to(torch.uint8), dim=1, stable=True)
        return torch.gather(mapped, 1, order), kept.sum(dim=1)

    def candidate_features(self, tokens: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """Per order, the dense 0/1 matrix [F_n, rows] of the rows' occurrence features that the
        training set has (the transpose of `ngrams.NgramFeatures.transform`'s matrices)."""
        rows, width = tokens.shape
        device = tokens.device
        position = torch.arange(width, device=device)
        row_index = torch.arange(rows, device=device)[:, None].expand(rows, width)
        unique_sentinel = -1 - torch.arange(rows * width, device=device).view(rows, width)
        matrices = []
        grams = tokens
        for order, (table, columns) in enumerate(zip(self.tables, self.feature_widths), start=1):
            inside = position[None, :] + order <= lengths[:, None]
            if order == 1:
                keys, valid = tokens, inside & (tokens >= 0)
            else:
                last = torch.full_like(tokens, -1)
                last[:, : width - order + 1] = tokens[:, order - 1 :]
                keys = grams * self.vocab_size + last
                valid = inside & (grams >= 0) & (last >= 0)
            grams = torch.where(valid, lookup_sorted(table.gram_keys, keys), -1)
            known = grams >= 0
            groups = torch.where(known, row_index * table.gram_keys.numel() + grams, unique_sentinel)
            rank = occurrence_rank(groups.reshape(-1)).view(rows, width)
            feature = lookup_sorted(table.feature_keys, grams * table.max_rank + rank)
            feature = torch.where(known & (rank < table.max_rank) & (feature >= 0), feature, columns)
            dense = torch.zeros((columns + 1, rows), dtype=torch.float32, device=device)
            dense.index_put_((feature, row_index), torch.ones_like(feature, dtype=torch.float32))
            matrices.append(dense[:columns])
        return matrices

    def chunk_rows(self, budget: int, plan_rows: int) -> int:
        """Candidate rows per chunk so the dense feature matrices fit their share of the budget."""
        per_row = FEATURE_BYTES * sum(width + 1 for width in self.feature_widths)
        return max(1, min(plan_rows, budget // (FEATURE_SHARE * per_row)))


def dense_bleu_star(
    matches: list[torch.Tensor],
    candidate_lengths: torch.Tensor,
    train_lengths: torch.Tensor,
    smoothing: str,
    unmatched_numerators: torch.Tensor,
) -> torch.Tensor:
    """`kernels.bleu.bleu_star` for dense match counts m_1..m_4 [rows x cols]: the same
    factorisation over orders, elementwise in the same operation order (so the same bits), with
    masks where the sparse form skips pairs, so no shape depends on the data.
    `unmatched_numerators` is UNMATCHED_NUMERATORS[smoothing] already on the device."""
    unigram_only = unigram_only_bleu(candidate_lengths, train_lengths, unmatched_numerators, smoothing)
    score = torch.where(matches[0] > 0, unigram_only, 0.0)
    for order, counts in enumerate(matches[1:], start=2):
        score = torch.where(counts > 0, score * shared_order_factor(counts, order, smoothing), score)
    if smoothing == "none":
        score = torch.where(matches[-1] > 0, score, 0.0)
    return score


_TABLES: weakref.WeakKeyDictionary[BleuKernel, dict[torch.device, IdTables]] = (
    weakref.WeakKeyDictionary()
)


def id_tables(scorer: NeighborsScorer, device: torch.device) -> IdTables:
    """The scorer's tables on `device`, built on first use; a refit makes a new kernel, so stale
    tables are never reused (and are dropped with the old kernel)."""
    per_device = _TABLES.setdefault(scorer.kernel_, {})
    if device not in per_device:
        per_device[device] = IdTables.build(scorer, device)
    return per_device[device]


def check_ids_supported(scorer: NeighborsScorer) -> None:
    """Ids make sense only where the scorer's tokens are the ids' tokenizer's tokens."""
    scorer._check_fitted()
    if not isinstance(scorer.kernel_, BleuKernel):
        raise ValueError(
            f"predict_ids supports the bleu kernel; the {scorer.kernel_.name!r} kernel takes texts: "
            "decode the ids and call predict"
        )
    tokenizer = scorer.kernel_.tokenizer
    if not isinstance(tokenizer, HuggingFaceTokenizer):
        raise ValueError(
            f"predict_ids needs a Hugging Face tokenizer (the one that made the ids); this scorer "
            f"tokenizes with {tokenizer.signature!r}"
        )
    if tokenizer.lowercase:
        raise ValueError(
            "predict_ids cannot apply lowercase=True: it folds case in the text before "
            "tokenizing, and ids have no text; use an uncased tokenizer instead"
        )


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


def predict_ids(
    scorer: NeighborsScorer,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    subset: TrainingSubset | None = None,
) -> TensorPrediction:
    """Estimates for token-id rows, as tensors on the ids' device (see the module docstring).
    `subset` restricts the neighbours to some training texts (subsampled rewards)."""
    check_ids_supported(scorer)
    validate_ids(input_ids, attention_mask)
    device = input_ids.device
    tables = id_tables(scorer, device)
    tokens, lengths = tables.tokens(input_ids.long(), attention_mask)
    num_rows = tokens.shape[0]
    plan = scorer._plan()
    budget = scorer.memory_budget or default_memory_budget(device)
    rows_per_chunk = tables.chunk_rows(budget, plan.chunk_rows)
    stats = NeighborStats.zeros(num_rows, device)
    for first in range(0, num_rows, rows_per_chunk):
        chunk_tokens = tokens[first : first + rows_per_chunk]
        chunk_lengths = lengths[first : first + rows_per_chunk]
        features = tables.candidate_features(chunk_tokens, chunk_lengths)
        candidate_lengths = chunk_lengths.to(torch.float64)
        chunk = NeighborStats.zeros(chunk_tokens.shape[0], device)
        for block in tables.blocks:
            matches = [
                (train @ candidates).t() for train, candidates in zip(block.features, features)
            ]
            tile = dense_bleu_star(
                matches, candidate_lengths, block.lengths, tables.smoothing,
                tables.unmatched_numerators,
            )
            excluded = None if subset is None else ~subset.mask[None, block.start : block.stop]
            chunk.add_tile(tile, tables.quality.block(block.start, block.stop), scorer.tau_, excluded)
        stats.assign(first, chunk)
    num_train = scorer.num_train if subset is None else subset.size
    return estimate_tensors(
        stats, tables.quality, num_train, scorer.min_neighbors_, scorer.max_fraction_
    )


def predict_tensors(
    scorer: NeighborsScorer,
    inputs: torch.Tensor | Sequence[str],
    attention_mask: torch.Tensor | None = None,
    subset: TrainingSubset | None = None,
) -> TensorPrediction:
    """Estimates as tensors for what a training loop holds: token ids (on their device) or
    texts (on the scorer's device, through the kernel's text path)."""
    if isinstance(inputs, torch.Tensor):
        return predict_ids(scorer, inputs, attention_mask, subset)
    if attention_mask is not None:
        raise ValueError("attention_mask goes with token ids, not with texts")
    return scorer.predict_tensors(inputs, subset)
