"""Aligned ROUGE: each candidate against its own reference(s), as rouge-score's
`RougeScorer(rouge_types, use_stemmer).score_multi(references[i], candidates[i])` for every i.

Every (candidate, reference) pair is a row of its own. ROUGE-N's overlap sum_g min(c_x(g), c_r(g))
is aligned BLEU's clipped match count with one reference (`aligned_bleu.count_packed`), and its
n-gram totals max(1, length - n + 1) are rouge-score's denominators. ROUGE-L's LCS is the
bit-parallel LCS of `kernels.rouge` (`lcs_step`), here dense: every pair steps through its
candidate's tokens, with the match masks M of each candidate position read from a table of the
reference's positions per distinct token (`dense_fields` numbers the tokens of a row).

ROUGE-Lsum (texts split into sentences at newlines, as rouge-score) needs one particular LCS of
every (reference sentence, candidate sentence) pair, the one rouge-score's backtrack reads off its
table: the bit vectors after every step are the table's columns (the zero bits of V_j below
position i count LCS(ref[:i], cand[:j])), so all pairs backtrack together, one step at a time.
The union of a reference sentence's LCS positions over the candidate's sentences, clipped by
the token counts, is again a clipped match count: hits = sum_t min(c_candidate(t), c_union(t)),
since the union holds distinct reference positions, so never more of t than the reference has.

Of several references, each type keeps the one with the highest F (the first on a tie), as
`score_multi`. Precision, recall and F are rouge-score's formulas in float64, each a fixed
sequence of IEEE operations: the same bits on every device.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.threads import one_thread
from gpu_neighbors.core.tiling import resolve_device
from gpu_neighbors.kernels.aligned_bleu import (
    Packed, References, check_vocab_size, count_packed, dense_fields, pack_ids, pack_texts, placed, text_list,
)
from gpu_neighbors.kernels.rouge import BITS_PER_WORD, WORD_MASK, lcs_step, num_words, popcount
from gpu_neighbors.text.tokenizers import RougeScoreTokenizer, Tokenizer, make_tokenizer
from gpu_neighbors.text.vocabulary import Vocabulary

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
_NGRAM_TYPE = re.compile("rouge([1-9])")  # rouge-score's rougeN: one digit
MASK_TABLE_ENTRIES = 1 << 22  # int64 words of a chunk's match-mask table (32 MiB)


@dataclass(frozen=True)
class RougeScore:
    """rouge-score's `Score` for a batch: float64 tensors [candidates]."""

    precision: torch.Tensor
    recall: torch.Tensor
    fmeasure: torch.Tensor


@one_thread
def rouge(
    candidates: Sequence[str] | torch.Tensor,
    references: References,
    *,
    rouge_types: Sequence[str] = ROUGE_TYPES,
    use_stemmer: bool = False,
    tokenizer: str | Tokenizer | None = None,
    attention_mask: torch.Tensor | None = None,
    reference_mask: torch.Tensor | None = None,
    reference_counts: torch.Tensor | None = None,
    vocab_size: int | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, RougeScore]:
    """ROUGE of each candidate against its own references, per type in `rouge_types` ("rouge1"
    to "rouge9", "rougeL", "rougeLsum"): equal to rouge-score's `score` (one reference) or
    `score_multi` (several) of every candidate.

    Texts: tokenized as rouge-score does (`use_stemmer`: Porter stemming), or by `tokenizer`
    (any of `sentence_bleu`'s); "rougeLsum" splits texts into sentences at newlines.
    Token ids: the inputs of `sentence_bleu` (masks, `reference_counts`, `vocab_size`), the result
    on their device with no host synchronisation; a candidate with no reference scores 0, and a
    sequence of ids is one sentence, so that "rougeLsum" is "rougeL"."""
    types = check_rouge_types(rouge_types)
    if isinstance(candidates, torch.Tensor):
        if not isinstance(references, torch.Tensor):
            raise TypeError(f"token-id candidates need token-id references (a tensor), not {type(references).__name__}")
        if use_stemmer or tokenizer is not None:
            raise ValueError("use_stemmer and tokenizer apply to texts; token ids are compared as they are")
        packed = pack_ids(candidates, references, attention_mask, reference_mask, reference_counts)
        bound = None if vocab_size is None else check_vocab_size(vocab_size)
        return _scores(packed, types, bound, None)
    if isinstance(references, torch.Tensor):
        raise TypeError("text candidates need text references, not a tensor")
    if any(option is not None for option in (attention_mask, reference_mask, reference_counts, vocab_size)):
        raise ValueError("attention_mask, reference_mask, reference_counts and vocab_size go with token ids, not texts")
    if tokenizer is None:
        split: Tokenizer = RougeScoreTokenizer(use_stemmer)
    elif use_stemmer:
        raise ValueError("use_stemmer applies to rouge-score's tokenizer (tokenizer=None), not to one given")
    else:
        split = make_tokenizer(tokenizer)
    target = resolve_device(device)
    packed, vocabulary_size = pack_texts(candidates, references, split, target)
    sentences = None
    if "rougeLsum" in types and len(packed.lengths):  # no rows: no sentences (rougeL's empty scores)
        sentences = _sentence_hits(text_list(candidates, "candidates"), references, split, target)
    return _scores(packed, types, vocabulary_size, sentences)


def check_rouge_types(rouge_types: Sequence[str]) -> tuple[str, ...]:
    if isinstance(rouge_types, str):
        raise TypeError(f"rouge_types: give a list of types, e.g. [{rouge_types!r}], not a string")
    types = tuple(rouge_types)
    if not types:
        raise ValueError("rouge_types: give at least one type")
    for name in types:
        if not (name in ("rougeL", "rougeLsum") or isinstance(name, str) and _NGRAM_TYPE.fullmatch(name)):
            raise ValueError(f"rouge_types: unknown type {name!r} (rouge1 to rouge9, rougeL, rougeLsum)")
    return types


def _scores(packed: Packed, types: tuple[str, ...], id_bound: int | None,
            sentences: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None) -> dict[str, RougeScore]:
    """Every type per (candidate, reference slot), then the slot of the highest F per candidate."""
    rows, slots = packed.valid.shape
    pairs = _one_reference_per_row(packed)
    lengths, reference_lengths = pairs.lengths, pairs.reference_lengths[:, 0]
    orders = max((int(name[5:]) for name in types if _NGRAM_TYPE.fullmatch(name)), default=0)
    matches = count_packed(pairs, orders, id_bound).matches if orders else None
    lcs = _lcs_lengths(pairs, id_bound) if {"rougeL", "rougeLsum"} & set(types) else None
    result = {}
    for name in types:
        if name == "rougeLsum" and sentences is not None:
            hits, total, reference_total = sentences
        elif name.startswith("rougeL"):
            assert lcs is not None
            hits, total, reference_total = lcs, lengths, reference_lengths
        else:
            assert matches is not None
            n = int(name[5:])
            hits, total, reference_total = matches[:, n - 1], lengths - n + 1, reference_lengths - n + 1
        precision, recall, fmeasure = _formulas(hits, total, reference_total)
        fmeasure = torch.where(pairs.valid[:, 0], fmeasure, -1.0).view(rows, slots)  # no reference: never kept
        best = fmeasure.argmax(dim=1, keepdim=True)  # the first of equal maxima, as numpy's argmax
        result[name] = RougeScore(*(values.view(rows, slots).gather(1, best)[:, 0].clamp(min=0.0)
                                    for values in (precision, recall, fmeasure)))
    return result


def _formulas(hits: torch.Tensor, total: torch.Tensor, reference_total: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """rouge-score's P = hits / max(candidate units, 1), R = hits / max(reference units, 1) and
    F = 2PR / (P + R) (0 where P + R = 0), in float64."""
    hits = hits.to(torch.float64)
    precision = hits / total.clamp(min=1).to(torch.float64)
    recall = hits / reference_total.clamp(min=1).to(torch.float64)
    total_rate = precision + recall
    fmeasure = torch.where(total_rate > 0, 2 * precision * recall / torch.where(total_rate > 0, total_rate, 1.0), 0.0)
    return precision, recall, fmeasure


def _one_reference_per_row(packed: Packed) -> Packed:
    """[rows, R] pairs as [rows * R, 1]: each candidate repeated beside each of its reference slots."""
    rows, slots, width = packed.references.shape
    repeat = lambda tensor: tensor.repeat_interleave(slots, dim=0)  # noqa: E731
    return Packed(repeat(packed.candidates), repeat(packed.candidate_columns), repeat(packed.lengths),
                  packed.references.reshape(rows * slots, 1, width),
                  packed.reference_columns.reshape(rows * slots, 1, width),
                  packed.reference_lengths.reshape(rows * slots, 1), packed.valid.reshape(rows * slots, 1))


def _compacted(pairs: Packed) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's kept candidate ids and reference ids at the front, -1 and -2 after them."""
    device = pairs.candidates.device
    candidates = placed(pairs.candidates, pairs.candidate_columns, 0, torch.full((), -1, device=device))
    references = placed(pairs.references[:, 0], pairs.reference_columns[:, 0], 0, torch.full((), -2, device=device))
    return candidates, references


def _lcs_lengths(pairs: Packed, id_bound: int | None) -> torch.Tensor:
    """int64 [rows]: the LCS of each row's candidate and reference."""
    candidates, references = _compacted(pairs)
    chunks = [popcount(_lcs_vectors(masks, steps=False).bitwise_xor_(WORD_MASK)).sum(1)
              for masks in _match_masks(candidates, references, pairs.reference_lengths[:, 0], id_bound)]
    return torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.int64, device=candidates.device)


def _match_masks(candidates: torch.Tensor, references: torch.Tensor, reference_lengths: torch.Tensor,
                 id_bound: int | None, whole: bool = False) -> list[torch.Tensor]:
    """Per chunk of rows, M [rows, Lc, words]: the positions of the row's reference that hold the
    token at each candidate position (padding, -1, holds none: the reference's is -2). Each
    row's tokens are numbered below its width (`dense_fields`); each reference position ORs its
    bit into its number's mask (an add: distinct positions are distinct bits), and each
    candidate position reads its number's mask. `whole`: one chunk (the caller sized it)."""
    rows, candidate_width = candidates.shape
    reference_width = references.shape[1]
    width, words = candidate_width + reference_width, num_words(reference_width)
    device = candidates.device
    position = torch.arange(reference_width, device=device)
    bit = torch.bitwise_left_shift(torch.ones_like(position), position % BITS_PER_WORD)
    step = rows if whole else max(1, MASK_TABLE_ENTRIES // max(width * words, 1))
    out = []
    for first in range(0, rows, step):
        last = min(first + step, rows)
        count = last - first
        fields = torch.cat([candidates[first:last], references[first:last]], dim=1)
        numbers = dense_fields(fields, None if id_bound is None else id_bound + 2, 2).long()
        base = torch.arange(count, device=device)[:, None] * width
        table = torch.zeros((count * width, words), dtype=torch.int64, device=device)
        cells = (base + numbers[:, candidate_width:]) * words + position // BITS_PER_WORD
        kept = position < reference_lengths[first:last, None]
        table.view(-1).index_put_((cells.reshape(-1),), torch.where(kept, bit, 0).reshape(-1), accumulate=True)
        out.append(table[base + numbers[:, :candidate_width]])
    return out


def _lcs_vectors(masks: torch.Tensor, *, steps: bool) -> torch.Tensor:
    """The bit vectors V [rows, words] after every candidate position (`steps`: [rows, Lc + 1,
    words], V_0 all ones first), by `lcs_step`; zero bits count the LCS."""
    rows, candidate_width, words = masks.shape
    vector = torch.full((rows, words), WORD_MASK, dtype=torch.int64, device=masks.device)
    every = [vector]
    for column in range(candidate_width):
        vector = lcs_step(vector, masks[:, column])
        every.append(vector)
    return torch.stack(every, dim=1) if steps else vector


def _lcs_table(vectors: torch.Tensor, reference_width: int) -> torch.Tensor:
    """int16 [rows, Lr + 1, Lc + 1]: rouge-score's LCS table t[i][j] from the bit vectors after
    every step [rows, Lc + 1, words]: the zero bits of V_j below position i."""
    bit = torch.arange(BITS_PER_WORD, device=vectors.device)
    zeros = ((vectors[..., None] >> bit) & 1).eq_(0).flatten(2)[..., :reference_width].to(torch.int16)
    table = torch.zeros((vectors.shape[0], reference_width + 1, vectors.shape[1]), dtype=torch.int16,
                        device=vectors.device)
    torch.cumsum(zeros.transpose(1, 2), dim=1, out=table[:, 1:])
    return table


def _lcs_positions(ids: torch.Tensor, candidates: np.ndarray, references: np.ndarray, lengths: np.ndarray,
                   id_bound: int) -> torch.Tensor:
    """bool [pairs, width of `ids`]: for each pair of sentences (rows of `ids`, padded with -1;
    `lengths` on the host), the reference positions of the LCS that rouge-score's
    `_backtrack_norec` reads (`_backtrack`). Pairs go in groups of similar lengths, each cut to
    its own widths and stepped only as far as its longest pair needs."""
    out = torch.zeros((len(candidates), ids.shape[1]), dtype=torch.bool, device=ids.device)
    steps = lengths[candidates] + lengths[references]
    order = np.argsort(steps, kind="stable")
    for group in _length_groups(order, lengths[candidates], lengths[references]):
        pair_candidates, pair_references = candidates[group], references[group]
        candidate_width = max(int(lengths[pair_candidates].max()), 1)
        reference_width = max(int(lengths[pair_references].max()), 1)
        device_group = torch.from_numpy(group).to(ids.device)
        candidate_ids = ids[torch.from_numpy(pair_candidates).to(ids.device), :candidate_width]
        reference_ids = ids[torch.from_numpy(pair_references).to(ids.device), :reference_width]
        reference_ids = torch.where(reference_ids >= 0, reference_ids, -2)  # matches no candidate padding
        candidate_lengths = torch.from_numpy(lengths[pair_candidates]).to(ids.device)
        reference_lengths = torch.from_numpy(lengths[pair_references]).to(ids.device)
        (masks,) = _match_masks(candidate_ids, reference_ids, reference_lengths, id_bound, whole=True)
        table = _lcs_table(_lcs_vectors(masks, steps=True), reference_width)
        out[device_group, :reference_width] = _backtrack(table, candidate_ids,
                                                         reference_ids, candidate_lengths, reference_lengths,
                                                         int(steps[group].max()))
    return out


def _length_groups(order: np.ndarray, candidate_lengths: np.ndarray, reference_lengths: np.ndarray) -> list[np.ndarray]:
    """`order` (pairs by ascending candidate + reference length) cut into groups whose summed
    lengths lie within a factor of 2 (so no pair waits for more than twice its own steps), and
    whose LCS tables [pairs, Lr + 1, Lc + 1] (int16, from vectors of `words`) stay within
    MASK_TABLE_ENTRIES int64 words. No pairs (no sentence on one side of every row), no groups."""
    total = candidate_lengths[order] + reference_lengths[order]
    cuts = np.flatnonzero(np.diff(np.floor(np.log2(np.maximum(total, 1))))) + 1
    groups: list[np.ndarray] = []
    for part in np.split(order, cuts) if order.size else []:
        widest = int(reference_lengths[part].max())
        cell = (int(candidate_lengths[part].max()) + 1) * (num_words(widest) * BITS_PER_WORD + widest + 1)
        step = max(1, MASK_TABLE_ENTRIES // cell)
        groups.extend(part[first : first + step] for first in range(0, len(part), step))
    return groups


def _backtrack(table: torch.Tensor, candidates: torch.Tensor, references: torch.Tensor,
               candidate_lengths: torch.Tensor, reference_lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """bool [rows, Lr]: rouge-score's `_backtrack_norec` of every row at once, one step at a time
    from (len(ref), len(cand)): a match where the tokens are equal, else left (j - 1) where
    t[i][j-1] > t[i-1][j], else up (i - 1); `table` is t (`_lcs_table`)."""
    rows, reference_width = references.shape
    row = torch.arange(rows, device=references.device)
    out = torch.zeros(rows * reference_width, dtype=torch.int64, device=references.device)
    i, j = reference_lengths.clone(), candidate_lengths.clone()
    for _ in range(steps):
        active = (i > 0) & (j > 0)
        up_i, left_j = (i - 1).clamp(min=0), (j - 1).clamp(min=0)
        equal = active & (references[row, up_i] == candidates[row, left_j])
        go_left = active & ~equal & (table[row, i, left_j] > table[row, up_i, j])
        go_up = active & ~equal & ~go_left
        out.index_put_((row * reference_width + up_i,), equal.long(), accumulate=True)
        i = i - (equal | go_up).long()
        j = j - (equal | go_left).long()
    return out.view(rows, reference_width) > 0


def _sentence_hits(candidates: list[str], references: References, tokenizer: Tokenizer,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ROUGE-Lsum's hits, candidate tokens and reference tokens [rows * R] (R the most references
    of a candidate; a missing slot 0), as rouge-score's `_summary_level_lcs`."""
    groups = [[item] if isinstance(item, str) else list(item) for item in references]  # checked by pack_texts
    slots = max(map(len, groups), default=1)
    texts = candidates + [text for group in groups for text in group]
    sentences = [[line for line in text.split("\n") if line] for text in texts]
    counts = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    tokenized = tokenizer.tokenize_many([line for lines in sentences for line in lines])
    vocabulary = Vocabulary(tokenized)
    batch = vocabulary.batch(tokenized, torch.device("cpu"))
    lengths = batch.lengths.numpy()
    padded = np.full((len(lengths) + 1, max(int(lengths.max(initial=0)), 1)), -1, dtype=np.int64)  # a last row
    padded[:-1][np.arange(padded.shape[1])[None, :] < lengths[:, None]] = batch.ids.numpy()  # of padding: -1
    first = np.cumsum(counts) - counts  # each text's first sentence
    text_tokens = np.bincount(np.repeat(np.arange(len(texts)), counts), weights=lengths,
                              minlength=len(texts)).astype(np.int64)

    # The rows (candidate, reference) that exist, each reference sentence of a row (a union), and
    # every (reference sentence, candidate sentence) pair of a row.
    per_row = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
    row_slot = np.repeat(np.arange(len(groups)) * slots, per_row) + _ranges(per_row)
    candidate_text = np.repeat(np.arange(len(groups)), per_row)
    reference_text = len(candidates) + np.arange(int(per_row.sum()))
    union_sentence = _ranges(counts[reference_text]) + np.repeat(first[reference_text], counts[reference_text])
    union_candidate = np.repeat(candidate_text, counts[reference_text])
    pair_union = np.repeat(np.arange(len(union_sentence)), counts[union_candidate])
    pair_candidate = _ranges(counts[union_candidate]) + np.repeat(first[union_candidate], counts[union_candidate])

    def tensor(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device)

    ids = tensor(padded)
    positions = _lcs_positions(ids, pair_candidate, union_sentence[pair_union], lengths, max(len(vocabulary), 1))
    unions = torch.zeros((len(union_sentence) + 1, ids.shape[1]), dtype=torch.int64, device=device)  # + none
    unions.index_add_(0, tensor(pair_union), positions.long())

    # Per row: every token of its candidate's sentences against its reference's union positions.
    rows = len(row_slot)
    candidate_sentences = _sentence_table(first[candidate_text], counts[candidate_text])
    reference_sentences = _sentence_table(first[reference_text], counts[reference_text])
    union_of = np.full(reference_sentences.shape, -1, dtype=np.int64)
    union_of[reference_sentences >= 0] = np.arange(len(union_sentence))
    in_union = unions[tensor(union_of)].reshape(rows, -1) > 0
    candidate_ids = ids[tensor(candidate_sentences)].reshape(rows, -1)
    reference_ids = torch.where(in_union, ids[tensor(reference_sentences)].reshape(rows, -1), -1)
    hits = count_packed(pack_ids(candidate_ids, reference_ids, None, None, None), 1,
                        max(len(vocabulary), 1)).matches[:, 0]
    candidate_tokens, reference_tokens = tensor(text_tokens[candidate_text]), tensor(text_tokens[reference_text])
    hits = torch.where((candidate_tokens > 0) & (reference_tokens > 0), hits, 0)
    out = torch.zeros((3, len(groups) * slots), dtype=torch.int64, device=device)
    out[:, tensor(row_slot)] = torch.stack([hits, candidate_tokens, reference_tokens])
    return out[0], out[1], out[2]


def _ranges(counts: np.ndarray) -> np.ndarray:
    """0, 1, ..., count - 1 for each count, concatenated."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def _sentence_table(first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[texts, most sentences]: each text's sentence indices, -1 past its last (index -1 reads
    the last row: padding)."""
    most = max(int(counts.max(initial=0)), 1)
    offsets = np.arange(most)[None, :]
    return np.where(offsets < counts[:, None], first[:, None] + offsets, -1)
