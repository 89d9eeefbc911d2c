"""Aligned BLEU: each candidate against its own reference(s) only, as NLTK's
`sentence_bleu(references[i], candidates[i], weights, smoothing_function)` for every i.

These are the diagonal of the all-pairs statistics: per order n, the clipped matches
sum_g min(c_x(g), max_r c_r(g)), which is `bleu_sets`' occurrence-feature count
sum_{(g,k)} [c_x(g) >= k][some reference holds (g, k)], here summed per n-gram; then the one
formula of `bleu_tables` (`bleu_of_rows`; corpus BLEU through `bleu_sets.bleu_from_counts`).

A candidate and its references form one row [candidate | reference 1 | ... | reference R],
each segment padded to a width known on the host, tokens packed to the front. Every n-gram of
orders 1..K starting at a position is one int64 key: K fields of b bits, field j the token at
position + j (plus 1), or 0 past the end of its segment. One sort of each row by that key puts
equal n-grams together for every order at once (equal n-grams share the top n fields), so per
order a cumulative sum of "top n fields changed" numbers the row's distinct n-grams, one
scatter-add counts each n-gram per segment, and min(candidate, max over references) summed
gives the clipped matches. Where K fields of the token ids do not fit in 62 bits, a first sort
renumbers each row's tokens densely (ids < row width). Every exp and power is gathered from host
tables sized by the padded widths (`bleu_tables`), kept per setting and device.

Every shape comes from the inputs' shapes, and nothing reads device data on the host: no
`.item()`, `nonzero`, `unique`, boolean-mask indexing or data-sized output, so on the token-id
path a CUDA caller never waits (the text path tokenizes on the host, then runs the same code).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from gpu_neighbors.core.threads import one_thread
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS, bleu_from_counts, check_weights
from gpu_neighbors.kernels.bleu_tables import PrecisionTables, bleu_of_rows, brevity, check_smoothing, table_size
from gpu_neighbors.text.tokenizers import Tokenizer, make_tokenizer
from gpu_neighbors.text.vocabulary import Vocabulary

KEY_BITS = 62  # bits of a non-negative int64 key that the fields may use
CHUNK_ELEMENTS = 1 << 24  # rows per chunk: at most this many n-gram x segment counters at once

References = Sequence[str] | Sequence[Sequence[str]] | torch.Tensor


@dataclass(frozen=True)
class AlignedCounts:
    """Sufficient statistics of aligned BLEU per candidate (int64, on the inputs' device):
    clipped `matches` and `totals` = max(1, n-grams) [rows, orders], `lengths` and the closest
    `reference_lengths` (the shorter one on a tie, as NLTK) [rows]; `width` and
    `reference_width`, known on the host, bound every length."""

    matches: torch.Tensor
    totals: torch.Tensor
    lengths: torch.Tensor
    reference_lengths: torch.Tensor
    width: int
    reference_width: int

    def sentence_bleu(self, weights: tuple[float, ...], smoothing: str) -> torch.Tensor:
        """NLTK's sentence BLEU per row, from tables sized by the widths (no host read)."""
        device = self.matches.device
        tables = precision_tables(weights, smoothing, table_size(self.width + 1), device)
        penalties = brevity_table(table_size(self.width + 1), table_size(self.reference_width + 1), device)
        return bleu_of_rows(tables, self.matches, self.totals, self.lengths,
                            penalties[self.lengths, self.reference_lengths])

    def corpus_bleu(self, weights: tuple[float, ...], smoothing: str) -> torch.Tensor:
        """NLTK's `corpus_bleu`: every statistic summed over the candidates first."""
        return bleu_from_counts(self.matches.sum(0, keepdim=True), self.totals.sum(0, keepdim=True),
                                self.lengths.sum().reshape(1), self.reference_lengths.sum().reshape(1),
                                weights, smoothing)[0]


@lru_cache(maxsize=32)
def precision_tables(weights: tuple[float, ...], smoothing: str, size: int, device: torch.device) -> PrecisionTables:
    """`PrecisionTables` for counts below `size`, made once per device: a copy from the host on
    every call would make a CUDA caller wait."""
    return PrecisionTables(weights, smoothing, size, device)


@lru_cache(maxsize=4)
def brevity_table(candidate_size: int, reference_size: int, device: torch.device) -> torch.Tensor:
    """NLTK's brevity penalty [candidate length, reference length] for lengths below the sizes
    (float64: 13 MB at 1,280 x 1,280, so only the last few sizes are kept)."""
    table = brevity(np.arange(candidate_size)[:, None], np.arange(reference_size)[None, :])
    return torch.from_numpy(np.ascontiguousarray(table)).to(device)


@one_thread
def sentence_bleu(
    candidates: Sequence[str] | torch.Tensor,
    references: References,
    *,
    weights: Sequence[float] = BLEU4_WEIGHTS,
    smoothing: str = "none",
    tokenizer: str | Tokenizer = "whitespace",
    attention_mask: torch.Tensor | None = None,
    reference_mask: torch.Tensor | None = None,
    reference_counts: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """BLEU of each candidate against its own references: float64 [candidates], equal to NLTK
    `sentence_bleu(references[i], candidates[i], weights, smoothing_function)`.

    Texts: `candidates` a list of strings, `references` one string or a list of strings per
    candidate (ragged), split by `tokenizer` ("whitespace", "13a", "chars", a Hugging Face
    tokenizer or a `Tokenizer`); the result is on `device`.
    Token ids: `candidates` [batch, length] and `references` [batch, length'] (one each) or
    [batch, R, length'] (up to R each; `reference_counts` [batch] says how many, the rest are
    ignored), with optional masks of the same shapes; positions with mask 0 or a negative id are
    dropped. The result is on the ids' device, with no host synchronisation; a candidate with no
    reference scores 0.
    `smoothing`: "none" (NLTK method0), "epsilon" (method1), "add1" (method2), "exp" (method3).
    """
    weights, smoothing = check_weights(weights), check_smoothing(smoothing)
    counts = aligned_counts(candidates, references, len(weights), tokenizer=tokenizer,
                            attention_mask=attention_mask, reference_mask=reference_mask,
                            reference_counts=reference_counts, device=device)
    return counts.sentence_bleu(weights, smoothing)


@one_thread
def corpus_bleu(
    candidates: Sequence[str] | torch.Tensor,
    references: References,
    *,
    weights: Sequence[float] = BLEU4_WEIGHTS,
    smoothing: str = "none",
    tokenizer: str | Tokenizer = "whitespace",
    attention_mask: torch.Tensor | None = None,
    reference_mask: torch.Tensor | None = None,
    reference_counts: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Corpus BLEU (a float64 scalar tensor) of the same inputs as `sentence_bleu`, equal to
    NLTK's `corpus_bleu`, and to sacrebleu's BLEU / 100 where the tokenizers agree and every
    candidate has at least as many tokens as the highest order."""
    weights, smoothing = check_weights(weights), check_smoothing(smoothing)
    counts = aligned_counts(candidates, references, len(weights), tokenizer=tokenizer,
                            attention_mask=attention_mask, reference_mask=reference_mask,
                            reference_counts=reference_counts, device=device)
    return counts.corpus_bleu(weights, smoothing)


def aligned_counts(
    candidates: Sequence[str] | torch.Tensor,
    references: References,
    orders: int,
    *,
    tokenizer: str | Tokenizer = "whitespace",
    attention_mask: torch.Tensor | None = None,
    reference_mask: torch.Tensor | None = None,
    reference_counts: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
) -> AlignedCounts:
    """`AlignedCounts` of texts or token ids (see `sentence_bleu` for the two input forms)."""
    if isinstance(candidates, torch.Tensor):
        if not isinstance(references, torch.Tensor):
            raise TypeError("token-id candidates need token-id references (a tensor), not "
                            f"{type(references).__name__}")
        packed = pack_ids(candidates, references, attention_mask, reference_mask, reference_counts)
        return count_packed(packed, orders, id_bound=None)
    if isinstance(references, torch.Tensor):
        raise TypeError("text candidates need text references, not a tensor")
    if attention_mask is not None or reference_mask is not None or reference_counts is not None:
        raise ValueError("attention_mask, reference_mask and reference_counts go with token ids, not texts")
    packed, vocabulary_size = pack_texts(candidates, references, make_tokenizer(tokenizer), torch.device(device))
    return count_packed(packed, orders, id_bound=vocabulary_size)


@dataclass(frozen=True)
class Packed:
    """Candidates [rows, Lc] and references [rows, R, Lr] as non-negative ids packed to the
    front, with their lengths; `valid` [rows, R] says which references exist."""

    candidates: torch.Tensor
    lengths: torch.Tensor
    references: torch.Tensor
    reference_lengths: torch.Tensor
    valid: torch.Tensor


def pack_texts(
    candidates: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
    tokenizer: Tokenizer, device: torch.device,
) -> tuple[Packed, int]:
    """Tokenize, number the tokens over this batch, and pad; also the number of distinct tokens."""
    candidates = _texts(candidates, "candidates")
    if isinstance(references, str) or len(references) != len(candidates):
        count = "a string" if isinstance(references, str) else len(references)
        raise ValueError(f"references: give one entry per candidate ({len(candidates)}), got {count}")
    groups = [[item] if isinstance(item, str) else _texts(item, f"references[{index}]")
              for index, item in enumerate(references)]
    for index, group in enumerate(groups):
        if not group:
            raise ValueError(f"references[{index}]: candidate {index} has no reference "
                             "(BLEU needs at least one)")
    flat = [text for group in groups for text in group]
    tokenized_candidates = tokenizer.tokenize_many(candidates)
    tokenized_references = tokenizer.tokenize_many(flat)
    vocabulary = Vocabulary(tokenized_candidates)
    vocabulary.add(tokenized_references)
    cpu = torch.device("cpu")
    candidate_ids = vocabulary.batch(tokenized_candidates, cpu)
    reference_ids = vocabulary.batch(tokenized_references, cpu)
    per_row = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
    width = int(per_row.max()) if len(groups) else 1
    slots = np.arange(width)[None, :] < per_row[:, None]  # [rows, R]: which references exist
    reference_lengths = np.zeros((len(groups), width), dtype=np.int64)
    reference_lengths[slots] = reference_ids.lengths.numpy()
    padded_references = _pad(reference_ids.ids.numpy(), reference_lengths[slots])
    references_3d = np.zeros((len(groups), width, padded_references.shape[1]), dtype=np.int64)
    references_3d[slots] = padded_references
    lengths = candidate_ids.lengths.numpy()
    packed = Packed(
        candidates=torch.from_numpy(_pad(candidate_ids.ids.numpy(), lengths)).to(device),
        lengths=candidate_ids.lengths.to(device),
        references=torch.from_numpy(references_3d).to(device),
        reference_lengths=torch.from_numpy(reference_lengths).to(device),
        valid=torch.from_numpy(slots).to(device),
    )
    return packed, len(vocabulary)


def _texts(items: object, what: str) -> list[str]:
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise TypeError(f"{what}: expected a list of strings, got {type(items).__name__}")
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"{what}[{index}]: expected a string, got {type(item).__name__}")
    return list(items)


def _pad(ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Ragged ids (concatenated) -> [len(lengths), max length] padded with 0 (at least 1 wide)."""
    width = max(int(lengths.max()) if len(lengths) else 0, 1)
    out = np.zeros((len(lengths), width), dtype=np.int64)
    out[np.arange(width)[None, :] < lengths[:, None]] = ids
    return out


def pack_ids(
    candidates: torch.Tensor, references: torch.Tensor, attention_mask: torch.Tensor | None,
    reference_mask: torch.Tensor | None, reference_counts: torch.Tensor | None,
) -> Packed:
    """Token-id inputs checked (shapes, dtypes, devices: host metadata only) and packed."""
    if candidates.dim() != 2 or candidates.dtype.is_floating_point or candidates.dtype == torch.bool:
        raise ValueError(f"candidates: token ids must be an integer tensor [batch, length], "
                         f"got {candidates.dtype} {tuple(candidates.shape)}")
    rows = candidates.shape[0]
    if references.dim() == 2:
        references = references[:, None, :]
        reference_mask = None if reference_mask is None else reference_mask[:, None, :]
    if (references.dim() != 3 or references.shape[0] != rows or references.dtype.is_floating_point
            or references.dtype == torch.bool):
        raise ValueError(f"references: token ids must be an integer tensor [batch, length] or "
                         f"[batch, references, length] with batch = {rows}, got {references.dtype} "
                         f"{tuple(references.shape)}")
    for name, mask, ids in (("attention_mask", attention_mask, candidates),
                            ("reference_mask", reference_mask, references)):
        if mask is not None and mask.shape != ids.shape:
            raise ValueError(f"{name}: shape {tuple(mask.shape)} differs from its ids' {tuple(ids.shape)}")
    slots = references.shape[1]
    if reference_counts is None:
        valid = torch.ones((rows, slots), dtype=torch.bool, device=candidates.device)
    else:
        if reference_counts.shape != (rows,):
            raise ValueError(f"reference_counts: expected shape ({rows},), got {tuple(reference_counts.shape)}")
        valid = torch.arange(slots, device=candidates.device)[None, :] < reference_counts[:, None].to(candidates.device)
    for tensor in (references, attention_mask, reference_mask):
        if tensor is not None and tensor.device != candidates.device:
            raise ValueError(f"every tensor must be on the candidates' device {candidates.device}, "
                             f"found one on {tensor.device}")
    packed_candidates, lengths = _pack(candidates.long(), attention_mask)
    flat, flat_lengths = _pack(references.long().reshape(rows * slots, -1),
                               None if reference_mask is None else reference_mask.reshape(rows * slots, -1))
    reference_lengths = torch.where(valid, flat_lengths.view(rows, slots), 0)
    return Packed(packed_candidates, lengths, flat.view(rows, slots, -1), reference_lengths, valid)


def _pack(ids: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Kept ids (mask not 0, id >= 0) moved to the front of each row in order, dropped ones after
    them, by a scatter to positions counted with cumulative sums (no sort); and how many each row
    keeps."""
    kept = ids >= 0
    if mask is not None:
        kept &= mask != 0
    flags = kept.to(torch.int64)
    kept_before = torch.cumsum(flags, dim=1) - flags
    counts = kept_before[:, -1] + flags[:, -1] if ids.shape[1] else flags.sum(dim=1)
    dropped_before = torch.arange(ids.shape[1], device=ids.device) - kept_before
    target = torch.where(kept, kept_before, counts[:, None] + dropped_before)
    return torch.empty_like(ids).scatter_(1, target, ids.clamp(min=0)), counts


def count_packed(packed: Packed, orders: int, id_bound: int | None) -> AlignedCounts:
    """Clipped matches per order, chunk by chunk of rows (the chunks are sized from shapes)."""
    rows = packed.candidates.shape[0]
    width = packed.candidates.shape[1] + packed.references.shape[1] * packed.references.shape[2]
    segments = packed.references.shape[1] + 1
    step = max(1, CHUNK_ELEMENTS // (width * segments))
    matches = torch.cat([
        _clipped_matches(packed, first, min(first + step, rows), orders, id_bound)
        for first in range(0, rows, step)
    ]) if rows else torch.zeros((0, orders), dtype=torch.int64, device=packed.candidates.device)
    order_numbers = torch.arange(1, orders + 1, device=packed.lengths.device)
    totals = (packed.lengths[:, None] - order_numbers + 1).clamp(min=1)
    return AlignedCounts(matches, totals, packed.lengths, closest_lengths(packed),
                         packed.candidates.shape[1], packed.references.shape[2])


def closest_lengths(packed: Packed) -> torch.Tensor:
    """Per row, the existing reference length closest to the candidate's (the shorter on a tie)."""
    lengths, references = packed.lengths[:, None], packed.reference_lengths
    span = packed.references.shape[2] + 1
    key = (references - lengths).abs() * span + references
    key = torch.where(packed.valid, key, torch.iinfo(torch.int64).max)
    return torch.gather(references, 1, key.argmin(dim=1, keepdim=True))[:, 0]


def _clipped_matches(packed: Packed, first: int, last: int, orders: int, id_bound: int | None) -> torch.Tensor:
    """int64 [last - first, orders]: sum over n-grams of min(candidate count, max reference count)."""
    device = packed.candidates.device
    candidates, references = packed.candidates[first:last], packed.references[first:last]
    rows, slots = candidates.shape[0], references.shape[1]
    candidate_width, reference_width = candidates.shape[1], references.shape[2]
    tokens = torch.cat([candidates, references.reshape(rows, -1)], dim=1)  # [rows, W]
    width = tokens.shape[1]
    # Per position: its segment (0 the candidate, r the r-th reference), place in it, its length.
    segment = torch.cat([torch.zeros(candidate_width, dtype=torch.int64, device=device),
                         torch.arange(1, slots + 1, device=device)[:, None].expand(slots, reference_width).reshape(-1)])
    place = torch.cat([torch.arange(candidate_width, device=device),
                       torch.arange(reference_width, device=device).repeat(slots)])
    segment_lengths = torch.cat([packed.lengths[first:last, None].expand(rows, candidate_width),
                                 packed.reference_lengths[first:last, :, None].expand(rows, slots, reference_width).reshape(rows, -1)],
                                dim=1)
    inside = place[None, :] < segment_lengths
    fields = torch.where(inside, tokens + 1, 0)
    bits = int(id_bound).bit_length() if id_bound is not None else KEY_BITS
    if bits * orders > KEY_BITS:
        fields, bits = _dense_fields(fields), width.bit_length()
        if bits * orders > KEY_BITS:
            raise ValueError(f"a candidate with its references spans {width} token positions; "
                             f"{orders}-gram keys fit at most {(1 << (KEY_BITS // orders)) - 1}")
    key = torch.zeros_like(fields)
    for offset in range(orders):  # field `offset`: the token offset places further on, 0 past the segment
        shifted = torch.zeros_like(fields)
        if offset < width:
            shifted[:, : width - offset] = fields[:, offset:]
        shifted = torch.where(place[None, :] + offset < segment_lengths, shifted, 0)
        key = key | (shifted << (bits * (orders - 1 - offset)))
    key, position = torch.sort(key, dim=1)
    owner = segment[position].to(torch.int32)  # [rows, W]: the segment of each sorted n-gram
    field_mask = (1 << bits) - 1
    counts = torch.zeros((rows, width * (slots + 1)), dtype=torch.int32, device=device)
    changed = torch.ones((rows, width), dtype=torch.int32, device=device)
    result = []
    for order in range(1, orders + 1):
        top = key >> (bits * (orders - order))
        present = ((top & field_mask) != 0).to(torch.int32)  # a whole n-gram starts here
        torch.ne(top[:, 1:], top[:, :-1], out=changed[:, 1:])
        gram = torch.cumsum(changed, dim=1, dtype=torch.int32) - 1  # the row's n-grams numbered 0, 1, ...
        counts.zero_()
        counts.scatter_add_(1, (gram * (slots + 1) + owner).long(), present)
        per_segment = counts.view(rows, width, slots + 1)
        clipped = torch.minimum(per_segment[:, :, 0], per_segment[:, :, 1:].amax(dim=2))
        result.append(clipped.sum(dim=1, dtype=torch.int64))
    return torch.stack(result, dim=1)


def _dense_fields(fields: torch.Tensor) -> torch.Tensor:
    """Each row's tokens renumbered 1, 2, ... in sorted order (0 stays 0): ids below the row width."""
    values, position = torch.sort(fields, dim=1)
    changed = torch.ones_like(values)
    changed[:, 1:] = (values[:, 1:] != values[:, :-1]).to(torch.int64)
    dense = torch.cumsum(changed, dim=1)
    dense = torch.where(values == 0, 0, dense)
    return torch.empty_like(fields).scatter_(1, position, dense)
