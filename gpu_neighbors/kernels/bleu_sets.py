"""BLEU of each text against a set of references, as NLTK's `sentence_bleu(references, text)`
computes it: clipped counts against the largest count over the references, and the brevity
penalty of the closest reference length (the shorter one on a tie).

Self-BLEU (each text against all the others) clips a text's count c_x(g) by the largest count of
g among the other texts, which is the second largest count of g over all texts (the largest,
where two texts share it). So it needs only each n-gram's two largest counts: the work is one
sort of the set's n-grams per order (`shared_matches`), not a comparison of every pair of texts.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch

from gpu_neighbors.kernels.bleu_tables import PrecisionTables, bleu_of_rows, brevity, check_smoothing
from gpu_neighbors.text.compiled import native
from gpu_neighbors.text.tokenizers import Tokenizer
from gpu_neighbors.text.vocabulary import TokenBatch, Vocabulary

BLEU4_WEIGHTS = (0.25, 0.25, 0.25, 0.25)


def check_weights(weights: Sequence[float], *, most_orders: int | None = None, normalised: bool = True) -> tuple[float, ...]:
    """Non-negative weights, one per n-gram order from 1: at least one, at most `most_orders`
    (None: any number, as NLTK allows), summing to 1 where `normalised`. The neighbour kernels
    and Self-BLEU keep weights summing to 1; aligned BLEU takes any sum, as NLTK's `sentence_bleu`
    does."""
    values = tuple(weights)
    if not values or (most_orders is not None and len(values) > most_orders):
        expected = "at least one weight" if most_orders is None else f"1 to {most_orders} weights"
        raise ValueError(f"weights: give {expected} (one per n-gram order), not {len(values)}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"weights must be real numbers, not {value!r} ({type(value).__name__})")
        if not 0 <= value < math.inf:
            raise ValueError(f"weights must be finite and non-negative, not {value!r}")
    if normalised and abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"weights must sum to 1, not {sum(values):g} ({', '.join(map(str, values))})")
    return tuple(float(value) for value in values)


def bleu_from_counts(
    matches: torch.Tensor,
    totals: torch.Tensor,
    lengths: torch.Tensor,
    reference_lengths: torch.Tensor,
    weights: Sequence[float],
    smoothing: str,
) -> torch.Tensor:
    """BLEU per row as NLTK's `corpus_bleu` of one hypothesis: `matches` and `totals` [rows,
    orders] are the clipped n-gram matches and max(1, number of n-grams) per order, `lengths`
    the hypothesis lengths and `reference_lengths` the closest reference lengths [rows].

    Every exp and log comes from host tables (`bleu_tables`), so the result is the same bits on
    every device; sizing them reads the lengths on the host once. A path that must not wait
    for the device (token ids) builds a `PrecisionTables` for its padded width itself and calls
    `bleu_of_rows`."""
    check_smoothing(smoothing)
    device = matches.device
    lengths, reference_lengths = lengths.to(torch.int64), reference_lengths.to(torch.int64)
    totals = totals.to(torch.int64)
    size = int(totals.max()) + 1 if totals.numel() else 1
    tables = PrecisionTables(weights, smoothing, size, device)
    penalty = brevity(lengths.cpu().numpy(), reference_lengths.cpu().numpy())
    return bleu_of_rows(tables, matches.to(torch.int64), totals, lengths, torch.from_numpy(penalty).to(device))


def closest_other_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """For each text, the length among the *other* texts closest to its own (the shorter one
    on a tie), as NLTK's `closest_ref_length` picks it; needs two texts or more."""
    values, counts = torch.unique(lengths, sorted=True, return_counts=True)
    position = torch.searchsorted(values, lengths)
    own_is_shared = counts[position] > 1
    below = torch.where(position > 0, values[(position - 1).clamp(min=0)], -1)
    above_index = (position + 1).clamp(max=values.numel() - 1)
    above = torch.where(position + 1 < values.numel(), values[above_index], -1)
    has_below, has_above = below >= 0, above >= 0
    below_gap = torch.where(has_below, lengths - below, torch.iinfo(lengths.dtype).max)
    above_gap = torch.where(has_above, above - lengths, torch.iinfo(lengths.dtype).max)
    nearest = torch.where(below_gap <= above_gap, below, above)
    return torch.where(own_is_shared, lengths, nearest)


def self_bleu(
    texts: Sequence[str],
    tokenizer: Tokenizer,
    weights: Sequence[float] = BLEU4_WEIGHTS,
    smoothing: str = "none",
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Self-BLEU of every text: its BLEU with all the other texts as references (float64 on
    `device`), equal to NLTK `sentence_bleu(others, text, weights, smoothing)`."""
    weights = check_weights(weights)
    if len(texts) < 2:
        raise ValueError(f"Self-BLEU needs at least two texts (each is scored against the others), got {len(texts)}")
    device = torch.device(device)
    tokenized = tokenizer.tokenize_many(texts)
    vocabulary = Vocabulary(tokenized)
    batch = vocabulary.batch(tokenized, device)
    order_count = len(weights)
    matches = shared_matches(batch, len(vocabulary), order_count)
    orders = torch.arange(1, order_count + 1, device=device)
    totals = (batch.lengths[:, None] - orders + 1).clamp(min=1)
    return bleu_from_counts(matches, totals, batch.lengths, closest_other_lengths(batch.lengths),
                            weights, smoothing)


def shared_matches(batch: TokenBatch, vocab_size: int, orders: int) -> torch.Tensor:
    """int64 [texts, orders]: per text and order, sum_g min(c_x(g), max over the other texts of
    c(g)), which is min(c_x(g), second(g)) with second(g) the second largest count of g over the
    texts (the largest, where two texts share it): a text's own count is the largest at most once.

    Per order, one sort of the n-grams' keys with their text beside them ((previous (n-1)-gram
    id, last token), text) numbers the n-grams (runs of equal keys) and counts each (n-gram,
    text) pair (runs of equal key and text) at once; where key and text do not fit one int64, the
    keys are numbered by a sort of their own first. Gathers are `index_select`s: on the CPU,
    advanced indexing took 16 ns an element, half the function's time. On the CPU, where the
    compiled loops were built, one compiled pass per order does the same (`shared_counts`)."""
    texts, device = len(batch), batch.ids.device
    matches = torch.zeros((texts, orders), dtype=torch.int64, device=device)
    if native is not None and device.type == "cpu" and native.shared_counts(
            np.ascontiguousarray(batch.ids.numpy(), dtype=np.int64),
            np.ascontiguousarray(batch.lengths.numpy(), dtype=np.int64), vocab_size, matches.numpy()):
        return matches
    total = batch.ids.numel()
    ends = (batch.offsets + batch.lengths).index_select(0, batch.rows)  # one past each token's text
    positions = torch.arange(total, device=device)
    grams, bound = batch.ids, max(vocab_size, 1)  # the n-gram id starting at each position (-1: none)
    for order in range(1, orders + 1):
        if order > 1:
            last = positions + order - 1
            valid = (grams >= 0) & (last < ends)
            keys = grams * vocab_size + batch.ids.index_select(0, last.clamp(max=max(total - 1, 0)))
            bound = bound * vocab_size
        else:
            valid, keys = grams >= 0, grams
        where = torch.nonzero(valid)[:, 0]
        keys, rows = keys.index_select(0, where), batch.rows.index_select(0, where)
        if bound * texts >= 1 << 62:  # renumber the keys first, so that key and text fit
            keys = torch.unique(keys, return_inverse=True)[1]
            bound = max(int(keys.max()) + 1 if keys.numel() else 1, 1)
        composite = keys * texts + rows
        if bound * texts < 1 << 31:
            composite = composite.to(torch.int32)  # a radix sort of int32 takes half the time
        ordered, permutation = torch.sort(composite)
        keys, rows = keys.index_select(0, permutation), rows.index_select(0, permutation)
        new_gram = torch.ones_like(keys, dtype=torch.bool)
        torch.ne(keys[1:], keys[:-1], out=new_gram[1:])
        gram_of = torch.cumsum(new_gram, 0) - 1
        grams = torch.full_like(batch.ids, -1)
        grams.scatter_(0, where.index_select(0, permutation), gram_of)  # distinct positions
        bound = int(gram_of[-1]) + 1 if gram_of.numel() else 1
        if not ordered.numel():
            continue
        new_pair = new_gram.clone()
        new_pair[1:] |= rows[1:] != rows[:-1]
        pair_start = torch.nonzero(new_pair)[:, 0]
        counts = torch.diff(pair_start, append=torch.full((1,), ordered.numel(), device=device))
        pair_gram, pair_row = gram_of.index_select(0, pair_start), rows.index_select(0, pair_start)
        top = torch.zeros(bound, dtype=torch.int64, device=device).scatter_reduce_(0, pair_gram, counts, "amax")
        is_top = counts == top.index_select(0, pair_gram)
        tops = torch.zeros(bound, dtype=torch.int64, device=device).index_add_(0, pair_gram, is_top.long())
        below = torch.zeros(bound, dtype=torch.int64, device=device).scatter_reduce_(
            0, pair_gram, torch.where(is_top, 0, counts), "amax")
        second = torch.where(tops >= 2, top, below)
        matches[:, order - 1].index_add_(0, pair_row, torch.minimum(counts, second.index_select(0, pair_gram)))
    return matches
