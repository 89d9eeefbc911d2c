"""Aligned BLEU: each candidate against its own reference(s) only, as NLTK's
`sentence_bleu(references[i], candidates[i], weights, smoothing_function)` for every i.

These are the diagonal of the all-pairs statistics: per order n, the clipped matches
sum_g min(c_x(g), max_r c_r(g)), which is `bleu_sets`' occurrence-feature count
sum_{(g,k)} [c_x(g) >= k][some reference holds (g, k)], here summed per n-gram; then the one
formula of `bleu_tables` (`bleu_of_rows`; corpus BLEU through `bleu_sets.bleu_from_counts`).

A candidate and its references form one row [candidate | reference 1 | ... | reference R],
each segment padded to a width known on the host plus `orders` - 1 columns, its kept tokens
scattered to the front; the rest of segment s holds a filler of its own, so an n-gram that runs
past its segment matches no n-gram of another segment and adds nothing. Every n-gram of orders
1..K starting at a column is one int64 key of K fields of b bits (field j: the value j columns
on), with the column's segment in the lowest bits. One sort of each row by that key puts equal
n-grams together for every order at once (equal n-grams share the top n fields), so per order a
cumulative sum of "top n fields changed" numbers the row's distinct n-grams, one scatter-add
counts each n-gram per segment, and min(candidate, max over references) summed gives the
clipped matches.

Sorting is the largest cost, and PyTorch sorts a flat integer tensor (radix sort) about twice
as fast as the rows of a matrix, int32 twice as fast again; so where row * 2^(K b) + key fits
an int64, the rows are sorted as one flat tensor (the row rides in with the first field). Fields
get few bits by renumbering each row's values below the row width (about 12 bits). Where the ids
are known to be below a bound (`vocab_size`, or the text path's vocabulary) that needs no sort:
every column writes itself into a table [row, id] and reads back the column that stayed, so equal
ids get equal columns and distinct ids distinct ones (`_occurrence_columns`: one scatter, one
gather; the table is never cleared, as only written cells are read). Without a bound, one flat
sort ranks the whole chunk first (ranks below rows x width), and the ranks go through the same
table. Every exp and power is gathered from host tables sized by the padded widths
(`bleu_tables`), kept per setting and device.

Every shape comes from the inputs' shapes, and nothing reads device data on the host: no
`.item()`, `nonzero`, `unique`, boolean-mask indexing or data-sized output, so on the token-id
path a CUDA caller never waits (the text path tokenizes on the host, then runs the same code) --
but for inputs so wide that a brevity table of every length pair would pass
BREVITY_TABLE_CELLS (candidate and reference widths of about 2,000 tokens each), whose penalties
come from each row's own lengths read on the host.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from gpu_neighbors._version import __version__
from gpu_neighbors.core.threads import one_thread
from gpu_neighbors.core.tiling import resolve_device
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS, bleu_from_counts, check_weights
from gpu_neighbors.kernels.bleu_settings import BleuSetting, check_setting, nltk_bleu, sacrebleu_bleu
from gpu_neighbors.kernels.bleu_tables import PrecisionTables, bleu_of_rows, brevity, check_smoothing, table_size
from gpu_neighbors.text.tokenizers import Tokenizer, WhitespaceTokenizer, make_tokenizer
from gpu_neighbors.text.vocabulary import Vocabulary
from gpu_neighbors.text.word_ids import word_ids

KEY_BITS = 62  # bits of a non-negative int64 key that the fields may use
# Rows per chunk: at most this many token positions at once (each row's segments included), so
# that a chunk's flat sorts stay in cache: one thread radix-sorts 2^18 int64 at 15 ns each, 2^20
# at 23 ns, 2^21 at 57 ns (2^18 int32 at 7 ns, 2^21 at 12 ns).
CHUNK_ELEMENTS = 1 << 18
TABLE_ENTRIES = 1 << 21  # cells of `_occurrence_columns`' table at once (4 MiB in int16)
# Largest brevity table [candidate length, reference length] (float64: 32 MiB, widths of about
# 2,000 tokens each); past it each row's penalty is computed from its own lengths on the host.
BREVITY_TABLE_CELLS = 1 << 22

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
        """NLTK's sentence BLEU per row, from tables sized by the widths (no host read), but for
        the brevity penalty of inputs over BREVITY_TABLE_CELLS (`brevity_penalties`)."""
        device = self.matches.device
        tables = precision_tables(weights, smoothing, table_size(self.width + 1), device)
        return bleu_of_rows(tables, self.matches, self.totals, self.lengths, self.brevity_penalties())

    def brevity_penalties(self) -> torch.Tensor:
        """NLTK's brevity penalty per row, the same bits either way: gathered from a table of
        every length pair the widths allow where that table is at most BREVITY_TABLE_CELLS, else
        computed for each row's own pair on the host (a table grows with the square of the
        widths: 6 GB at 10,000 tokens), which makes a CUDA caller wait for the lengths."""
        sizes = table_size(self.width + 1), table_size(self.reference_width + 1)
        if sizes[0] * sizes[1] <= BREVITY_TABLE_CELLS:
            return brevity_table(*sizes, self.lengths.device)[self.lengths, self.reference_lengths]
        penalties = brevity(self.lengths.cpu().numpy(), self.reference_lengths.cpu().numpy())
        return torch.from_numpy(np.ascontiguousarray(penalties)).to(self.lengths.device)

    def bleu_of_setting(self, setting: BleuSetting, *, corpus: bool) -> torch.Tensor:
        """BLEU under a setting the tables do not hold (`bleu_settings`), on the host: [rows]
        (corpus: a scalar), or [rows, tuples] ([tuples]) for several weight tuples."""
        matches, denominators = self.matches.cpu().numpy(), self.totals.cpu().numpy()
        lengths, reference_lengths = self.lengths.cpu().numpy(), self.reference_lengths.cpu().numpy()
        totals = np.maximum(lengths[:, None] - np.arange(matches.shape[1])[None, :], 0)  # n-grams as they are
        last_matches, last_lengths = matches[-1:], lengths[-1:]
        if corpus:
            if not len(lengths):
                last_matches, last_lengths = np.zeros((1, matches.shape[1]), dtype=np.int64), np.zeros(1, np.int64)
            matches, denominators, totals = (values.sum(0, keepdims=True) for values in (matches, denominators, totals))
            lengths, reference_lengths = lengths.sum(keepdims=True), reference_lengths.sum(keepdims=True)
        else:
            last_matches, last_lengths = matches, lengths
        if setting.sacrebleu:
            scores = sacrebleu_bleu(setting, matches, totals, lengths, reference_lengths)
        else:
            scores = nltk_bleu(setting, matches, denominators, lengths, reference_lengths, last_matches, last_lengths)
        out = torch.from_numpy(np.ascontiguousarray(scores)).to(self.matches.device)
        out = out[0] if corpus else out
        return out if setting.several else out[..., 0]

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
    (float64: 13 MB at 1,280 x 1,280, at most 32 MiB, so only the last few sizes are kept)."""
    table = brevity(np.arange(candidate_size)[:, None], np.arange(reference_size)[None, :])
    return torch.from_numpy(np.ascontiguousarray(table)).to(device)


@one_thread
def sentence_bleu(
    candidates: Sequence[str] | torch.Tensor,
    references: References,
    *,
    weights: Sequence[float] | Sequence[Sequence[float]] = BLEU4_WEIGHTS,
    smoothing: str | None = None,
    smooth_value: float | None = None,
    auto_reweigh: bool = False,
    effective_order: bool | None = None,
    tokenizer: str | Tokenizer | None = None,
    lowercase: bool = False,
    attention_mask: torch.Tensor | None = None,
    reference_mask: torch.Tensor | None = None,
    reference_counts: torch.Tensor | None = None,
    vocab_size: int | None = None,
    device: torch.device | str = "cpu",
    preset: str | None = None,
) -> torch.Tensor:
    """BLEU of each candidate against its own references: float64 [candidates], equal to NLTK
    `sentence_bleu(references[i], candidates[i], weights, smoothing_function, auto_reweigh)`, or
    with `effective_order`, floor or add-k smoothing to sacrebleu's `sentence_bleu(...).score / 100`.

    Texts: `candidates` a list of strings, `references` one string or a list of strings per
    candidate (ragged), split by `tokenizer` ("whitespace", the default, "13a", "chars", sacrebleu's
    "intl", "zh" and "char", a Hugging Face tokenizer or a `Tokenizer`), after case folding where
    `lowercase`; the result is on `device`.
    Token ids: `candidates` [batch, length] and `references` [batch, length'] (one each) or
    [batch, R, length'] (up to R each; `reference_counts` [batch] says how many, the rest are
    ignored), with optional masks of the same shapes; positions with mask 0 or a negative id are
    dropped. The result is on the ids' device, with no host synchronisation (but for the
    settings of `bleu_settings`); a candidate with no reference scores 0. `vocab_size` (the
    tokenizer's, optional): every kept id is below it (checked on the device, asynchronously); it
    renumbers the ids per row through a table instead of two sorts (bench/results.md: 0.022 s
    against 0.035 s at 256 x 1,024).
    `weights`: one per order, or a list of such tuples (one score each: [candidates, tuples], as
    NLTK 3.8 returns a list). `smoothing`: "none" (NLTK method0, the default), "epsilon" (method1), "add1"
    (method2), "exp" (method3), NLTK's "method0" to "method7", or sacrebleu's "floor" and "add-k";
    `smooth_value`: method1's epsilon, method4's k, method6's alpha, floor's or add-k's value
    (their defaults: 0.1, 5, 5, 0.1, 1). `effective_order` (sacrebleu's `use_effective_order`,
    its `sentence_bleu`'s default; here off by default) averages over the orders the candidate
    reaches. `preset="sacrebleu"`: sacrebleu's settings (`PRESETS`) for those not given, so that
    the result is sacrebleu's `sentence_bleu(...).score / 100` with nothing else to know; a
    setting it fixes may not be given otherwise (None: not given).
    """
    smoothing, tokenizer, effective_order = preset_settings(preset, smoothing, tokenizer, effective_order)
    setting = check_setting(weights, smoothing, smooth_value, auto_reweigh, effective_order)
    counts = aligned_counts(candidates, references, setting.counted_orders, tokenizer=tokenizer, lowercase=lowercase,
                            attention_mask=attention_mask, reference_mask=reference_mask,
                            reference_counts=reference_counts, vocab_size=vocab_size, device=device)
    if setting.on_tables:
        return counts.sentence_bleu(setting.weights[0], setting.smoothing)
    return counts.bleu_of_setting(setting, corpus=False)


@one_thread
def corpus_bleu(
    candidates: Sequence[str] | torch.Tensor,
    references: References,
    *,
    weights: Sequence[float] | Sequence[Sequence[float]] = BLEU4_WEIGHTS,
    smoothing: str | None = None,
    smooth_value: float | None = None,
    auto_reweigh: bool = False,
    effective_order: bool | None = None,
    tokenizer: str | Tokenizer | None = None,
    lowercase: bool = False,
    attention_mask: torch.Tensor | None = None,
    reference_mask: torch.Tensor | None = None,
    reference_counts: torch.Tensor | None = None,
    vocab_size: int | None = None,
    device: torch.device | str = "cpu",
    preset: str | None = None,
) -> torch.Tensor:
    """Corpus BLEU (a float64 scalar tensor; [tuples] for a list of weight tuples) of the same
    inputs and settings as `sentence_bleu`, equal to NLTK's `corpus_bleu` (whose methods 5 and 6
    read the last candidate's own n-grams, as here), and to sacrebleu's `corpus_bleu(...).score /
    100`: with `effective_order`, floor or add-k, its formula; without, where every candidate has
    at least as many tokens as the highest order (NLTK counts at least one n-gram per candidate,
    sacrebleu none). A token-id candidate with no reference still adds its n-grams and length,
    with no match and a reference length of 0 (as NLTK given one empty reference).
    `preset="sacrebleu"`: sacrebleu's `corpus_bleu(...).score / 100`, as for `sentence_bleu`."""
    smoothing, tokenizer, effective_order = preset_settings(preset, smoothing, tokenizer, effective_order)
    setting = check_setting(weights, smoothing, smooth_value, auto_reweigh, effective_order)
    counts = aligned_counts(candidates, references, setting.counted_orders, tokenizer=tokenizer, lowercase=lowercase,
                            attention_mask=attention_mask, reference_mask=reference_mask,
                            reference_counts=reference_counts, vocab_size=vocab_size, device=device)
    if setting.on_tables:
        return counts.corpus_bleu(setting.weights[0], setting.smoothing)
    return counts.bleu_of_setting(setting, corpus=True)


# Named settings that equal a peer's defaults. sacrebleu's BLEU: exponential smoothing and its 13a
# tokenizer, and the effective order, which its corpus BLEU does not name but its counting amounts
# to (it counts no n-gram of an order a hypothesis is too short for; NLTK counts one).
PRESETS: dict[str, dict[str, object]] = {"sacrebleu": {"smoothing": "exp", "tokenizer": "13a", "effective_order": True}}
# What the functions take for a setting not given (None) without a preset: NLTK's defaults.
PLAIN: dict[str, object] = {"smoothing": "none", "tokenizer": "whitespace", "effective_order": False}


def preset_settings(preset: str | None, smoothing: str | None, tokenizer: str | Tokenizer | None,
                    effective_order: bool | None) -> tuple[str, str | Tokenizer, bool]:
    """The settings given, the others (None) the preset's, or without one PLAIN's; a setting given
    otherwise than the preset says is refused by name, as two answers to one question (given at
    PLAIN's value too: that is still not the preset's)."""
    given = {"smoothing": smoothing, "tokenizer": tokenizer, "effective_order": effective_order}
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"preset: {preset!r} is none of {sorted(PRESETS)}")
    named = PLAIN if preset is None else PRESETS[preset]
    clashing = [name for name, value in given.items() if preset is not None and value is not None
                and value != named[name]]
    if clashing:
        raise ValueError(f"preset {preset!r} sets {', '.join(clashing)} (to "
                         f"{', '.join(repr(named[name]) for name in clashing)}): leave it out, or the preset")
    chosen = {name: named[name] if value is None else value for name, value in given.items()}
    return chosen["smoothing"], chosen["tokenizer"], chosen["effective_order"]  # type: ignore[return-value]


def bleu_signature(
    *,
    weights: Sequence[float] | Sequence[Sequence[float]] = BLEU4_WEIGHTS,
    smoothing: str | None = None,
    smooth_value: float | None = None,
    auto_reweigh: bool = False,
    effective_order: bool | None = None,
    tokenizer: str | Tokenizer | None = None,
    lowercase: bool = False,
    preset: str | None = None,
) -> str:
    """The settings `sentence_bleu` and `corpus_bleu` take, as one line to print beside a score
    (sacrebleu's `case|eff|tok|smooth` fields, then the weights and this package's version), so
    that a reader can tell which BLEU it is; `preset:sacrebleu` leads where the preset chose them."""
    smoothing, tokenizer, effective_order = preset_settings(preset, smoothing, tokenizer, effective_order)
    setting = check_setting(weights, smoothing, smooth_value, auto_reweigh, effective_order)
    split = make_tokenizer(tokenizer, lowercase)
    smooth = setting.smoothing if setting.smooth_value is None else f"{setting.smoothing}[{setting.smooth_value:.2f}]"
    fields = {"preset": preset} if preset is not None else {}
    fields.update(case="lc" if split.lowercase else "mixed", eff="yes" if setting.effective_order else "no",
                  tok=split.name, smooth=smooth,
                  weights=";".join(",".join(f"{weight:g}" for weight in group) for group in setting.weights))
    if setting.auto_reweigh:
        fields["reweigh"] = "yes"
    fields["version"] = f"gpu-neighbors-{__version__}"
    return "|".join(f"{name}:{value}" for name, value in fields.items())


def check_aligned_weights(weights: Sequence[float]) -> tuple[float, ...]:
    """NLTK's rule for sentence BLEU's weights: one per order from 1, as many orders as given,
    non-negative, any sum."""
    return check_weights(weights, most_orders=None, normalised=False)


def aligned_counts(
    candidates: Sequence[str] | torch.Tensor,
    references: References,
    orders: int,
    *,
    tokenizer: str | Tokenizer = "whitespace",
    lowercase: bool = False,
    attention_mask: torch.Tensor | None = None,
    reference_mask: torch.Tensor | None = None,
    reference_counts: torch.Tensor | None = None,
    vocab_size: int | None = None,
    device: torch.device | str = "cpu",
) -> AlignedCounts:
    """`AlignedCounts` of texts or token ids (see `sentence_bleu` for the two input forms)."""
    if isinstance(candidates, torch.Tensor):
        if not isinstance(references, torch.Tensor):
            raise TypeError("token-id candidates need token-id references (a tensor), not "
                            f"{type(references).__name__}")
        if lowercase:
            raise ValueError("lowercase applies to texts; token ids are compared as they are")
        packed = pack_ids(candidates, references, attention_mask, reference_mask, reference_counts)
        return count_packed(packed, orders, id_bound=None if vocab_size is None else check_vocab_size(vocab_size))
    if isinstance(references, torch.Tensor):
        raise TypeError("text candidates need text references, not a tensor")
    if not isinstance(references, Sequence):
        raise TypeError(f"references: expected a list (a string or a list of strings per candidate), "
                        f"got {type(references).__name__}")
    if any(option is not None for option in (attention_mask, reference_mask, reference_counts, vocab_size)):
        raise ValueError("attention_mask, reference_mask, reference_counts and vocab_size go with token ids, "
                         "not texts")
    packed, vocabulary_size = pack_texts(candidates, references, make_tokenizer(tokenizer, lowercase),
                                         resolve_device(device))
    return count_packed(packed, orders, id_bound=vocabulary_size)


@dataclass(frozen=True)
class Packed:
    """Candidates [rows, Lc] and references [rows, R, Lr] as int64 ids with the column each goes
    to (`_columns`: the kept ones in order to the front of a segment, after a spill area of L
    columns that takes the dropped ones), with their lengths; `valid` [rows, R] says which
    references exist."""

    candidates: torch.Tensor
    candidate_columns: torch.Tensor
    lengths: torch.Tensor
    references: torch.Tensor
    reference_columns: torch.Tensor
    reference_lengths: torch.Tensor
    valid: torch.Tensor


def check_vocab_size(vocab_size: object) -> int:
    """`vocab_size` as an int (numpy and 0-d tensor integers too), checked positive and below 2^63."""
    try:
        bound = operator.index(vocab_size)  # type: ignore[arg-type]
    except TypeError:
        bound = 0
    if isinstance(vocab_size, bool) or not 1 <= bound < 1 << 63:
        raise ValueError(f"vocab_size must be a positive integer below 2^63, got {vocab_size!r}")
    return bound


def pack_texts(
    candidates: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
    tokenizer: Tokenizer, device: torch.device,
) -> tuple[Packed, int | None]:
    """Tokenize, number the tokens (`_text_ids`), and pad; also a bound on the ids, where known."""
    candidates = text_list(candidates, "candidates")
    if isinstance(references, str) or len(references) != len(candidates):
        count = "a string" if isinstance(references, str) else len(references)
        raise ValueError(f"references: give one entry per candidate ({len(candidates)}), got {count}")
    groups = [[item] if isinstance(item, str) else text_list(item, f"references[{index}]")
              for index, item in enumerate(references)]
    for index, group in enumerate(groups):
        if not group:
            raise ValueError(f"references[{index}]: candidate {index} has no reference "
                             "(BLEU needs at least one)")
    flat = [text for group in groups for text in group]
    (candidate_ids, candidate_lengths), (reference_ids, flat_lengths), bound = _text_ids(tokenizer, candidates, flat)
    per_row = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
    width = int(per_row.max()) if len(groups) else 1
    slots = np.arange(width)[None, :] < per_row[:, None]  # [rows, R]: which references exist
    reference_lengths = np.zeros((len(groups), width), dtype=np.int64)
    reference_lengths[slots] = flat_lengths
    padded_references = _pad(reference_ids, reference_lengths[slots])
    references_3d = np.zeros((len(groups), width, padded_references.shape[1]), dtype=np.int64)
    references_3d[slots] = padded_references
    ids = torch.from_numpy(_pad(candidate_ids, candidate_lengths)).to(device)
    lengths = torch.from_numpy(candidate_lengths).to(device)
    candidate_columns, _ = _columns(torch.arange(ids.shape[1], device=device) < lengths[:, None])
    reference_columns, _ = _columns(torch.from_numpy(np.arange(references_3d.shape[2]) < reference_lengths[:, :, None])
                                    .to(device))
    packed = Packed(ids, candidate_columns, lengths, torch.from_numpy(references_3d).to(device), reference_columns,
                    torch.from_numpy(reference_lengths).to(device), torch.from_numpy(slots).to(device))
    return packed, bound


IdsAndCounts = tuple[np.ndarray, np.ndarray]


def _text_ids(tokenizer: Tokenizer, candidates: list[str],
              references: list[str]) -> tuple[IdsAndCounts, IdsAndCounts, int | None]:
    """Token ids (int64, concatenated) and token counts of the candidates and of the references,
    equal ids for equal tokens, and a bound on the ids where one is known. Whitespace tokens of
    ASCII text come from `word_ids` (no Python per token), the rest through
    the tokenizer and a vocabulary of this batch (ids below its size)."""
    if type(tokenizer) is WhitespaceTokenizer:
        texts = candidates + references
        fast = word_ids(list(map(str.lower, texts)) if tokenizer.lowercase else texts)
        if fast is not None:  # numbered below their count: the bounded path is faster
            ids, counts = fast.ids, fast.counts
            split = int(counts[: len(candidates)].sum())
            return ((ids[:split], counts[: len(candidates)]), (ids[split:], counts[len(candidates):]),
                    max(fast.distinct, 1))
    tokenized_candidates = tokenizer.tokenize_many(candidates)
    tokenized_references = tokenizer.tokenize_many(references)
    vocabulary = Vocabulary(tokenized_candidates)
    vocabulary.add(tokenized_references)
    batches = [vocabulary.batch(tokenized, torch.device("cpu")) for tokenized in (tokenized_candidates, tokenized_references)]
    (candidate_ids, candidate_counts), (reference_ids, reference_counts) = (
        (batch.ids.numpy(), batch.lengths.numpy()) for batch in batches)
    return (candidate_ids, candidate_counts), (reference_ids, reference_counts), len(vocabulary)


def text_list(items: object, what: str) -> list[str]:
    if isinstance(items, str) or not isinstance(items, Sequence):
        tensors = " (or token ids: a tensor)" if what == "candidates" else ""
        raise TypeError(f"{what}: expected a list of strings{tensors}, got {type(items).__name__}")
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
    """Token-id inputs checked (types, shapes, dtypes, devices: host metadata only) and packed.
    No reference slot at all ([batch, 0, length]) is every candidate without a reference."""
    for name, tensor in (("attention_mask", attention_mask), ("reference_mask", reference_mask),
                         ("reference_counts", reference_counts)):
        if tensor is not None and not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor, got {type(tensor).__name__}")
    if candidates.dim() != 2 or candidates.dtype.is_floating_point or candidates.dtype == torch.bool:
        raise ValueError(f"candidates: token ids must be an integer tensor [batch, length], "
                         f"got {candidates.dtype} {tuple(candidates.shape)}")
    rows = candidates.shape[0]
    if (references.dim() not in (2, 3) or references.shape[0] != rows or references.dtype.is_floating_point
            or references.dtype == torch.bool):
        raise ValueError(f"references: token ids must be an integer tensor [batch, length] or "
                         f"[batch, references, length] with batch = {rows}, got {references.dtype} "
                         f"{tuple(references.shape)}")
    for name, mask, ids in (("attention_mask", attention_mask, candidates),
                            ("reference_mask", reference_mask, references)):
        if mask is not None and mask.shape != ids.shape:
            raise ValueError(f"{name}: shape {tuple(mask.shape)} differs from its ids' {tuple(ids.shape)}")
    if reference_counts is not None and (reference_counts.shape != (rows,) or reference_counts.dtype.is_floating_point
                                         or reference_counts.dtype == torch.bool):
        raise ValueError(f"reference_counts: expected an integer tensor of shape ({rows},), got "
                         f"{reference_counts.dtype} {tuple(reference_counts.shape)}")
    if references.dim() == 2:
        references = references[:, None, :]
        reference_mask = None if reference_mask is None else reference_mask[:, None, :]
    if references.shape[1] == 0:  # no slot: one empty one, which no candidate has
        references = references.new_zeros((rows, 1, references.shape[2]))
        reference_mask = None
        reference_counts = torch.zeros(rows, dtype=torch.int64, device=candidates.device)
    slots = references.shape[1]
    if reference_counts is None:
        valid = torch.ones((rows, slots), dtype=torch.bool, device=candidates.device)
    else:
        if reference_counts.device != candidates.device:  # a copy that waits: only from elsewhere
            reference_counts = reference_counts.to(candidates.device)
        if rows:  # on the device, as vocab_size: a count past the slots would be read silently
            torch._assert_async(((reference_counts >= 0) & (reference_counts <= slots)).all(),
                                f"reference_counts must be in [0, {slots}], the reference slots")
        valid = torch.arange(slots, device=candidates.device)[None, :] < reference_counts[:, None]
    for tensor in (references, attention_mask, reference_mask):
        if tensor is not None and tensor.device != candidates.device:
            raise ValueError(f"every tensor must be on the candidates' device {candidates.device}, "
                             f"found one on {tensor.device}")
    candidates, references = candidates.long(), references.long()
    candidate_columns, lengths = _columns(_kept(candidates, attention_mask))
    reference_columns, reference_lengths = _columns(_kept(references, reference_mask) & valid[:, :, None])
    return Packed(candidates, candidate_columns, lengths, references, reference_columns, reference_lengths, valid)


def _kept(ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The positions BLEU reads: mask not 0 and id >= 0."""
    kept = ids >= 0
    return kept if mask is None else kept & (mask != 0)


def _columns(kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each position goes in 2L columns (L the last dimension): a kept one to L + the number
    kept before it, a dropped one to its own position, in a spill area cut off after the scatter
    (`placed`), so the kept ids land at the front in order with no sort; and how many each row
    keeps."""
    width = kept.shape[-1]
    kept_so_far = torch.cumsum(kept, dim=-1)
    lengths = kept_so_far[..., -1] if width else kept.sum(dim=-1)
    return torch.where(kept, kept_so_far + (width - 1), torch.arange(width, device=kept.device)), lengths


def count_packed(packed: Packed, orders: int, id_bound: int | None) -> AlignedCounts:
    """Clipped matches per order, chunk by chunk of rows (the chunks are sized from shapes)."""
    rows = packed.candidates.shape[0]
    width = packed.candidates.shape[1] + packed.references.shape[1] * packed.references.shape[2]
    chunks = -(-rows // max(1, CHUNK_ELEMENTS // max(width, 1)))
    step = -(-rows // chunks) if rows else 1  # equal chunks: 2 x 128 rows, not 127 + 127 + 2
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
    fields, segment = _segment_fields(packed, first, last, orders)
    rows, width = fields.shape
    slots = packed.references.shape[1]
    segment_bits = slots.bit_length()
    bound = None if id_bound is None else id_bound + slots + 1  # of the fields + slots + 1, non-negative
    bits = None if bound is None else (bound - 1).bit_length()
    if id_bound is not None and fields.numel():
        torch._assert_async(fields.amax() < id_bound, f"token ids must be below vocab_size ({id_bound})")
    if bits is not None and _row_bits(rows) + bits * orders + segment_bits <= KEY_BITS:
        fields = fields + (slots + 1)
    else:
        fields, bits = dense_fields(fields, bound, slots + 1), (width - 1).bit_length()
    if bits * orders + segment_bits > KEY_BITS:
        words, per_word, sorted_segment = _sorted_words(fields, segment, orders, bits)
        return _count_clipped(words, per_word, orders, bits, 0, slots + 1, sorted_segment)
    keys = _sorted_keys(fields, segment, orders, bits, segment_bits)
    return _count_clipped([keys], orders, orders, bits, segment_bits, slots + 1)


def _segment_fields(packed: Packed, first: int, last: int, orders: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows [candidate | reference 1 | ... | reference R], each segment followed by
    `orders` - 1 more columns: int64 [rows, W] holding the kept ids at the front of a segment
    and -1 - s in the rest of segment s, so an n-gram that runs past its segment's end holds its
    segment's own filler and can equal no n-gram of another segment; and each column's segment
    [W]."""
    device = packed.candidates.device
    rows, slots = last - first, packed.references.shape[1]
    extra = orders - 1
    candidate_fields = placed(packed.candidates[first:last], packed.candidate_columns[first:last], extra,
                               torch.full((), -1, dtype=torch.int64, device=device))
    reference_fields = placed(packed.references[first:last], packed.reference_columns[first:last], extra,
                               -2 - torch.arange(slots, device=device)[:, None])
    candidate_width, reference_width = candidate_fields.shape[1], reference_fields.shape[2]
    fields = torch.cat([candidate_fields, reference_fields.reshape(rows, slots * reference_width)], dim=1)
    segment = torch.cat([torch.zeros(candidate_width, dtype=torch.int64, device=device),
                         torch.arange(1, slots + 1, device=device)[:, None].expand(slots, reference_width).reshape(-1)])
    return fields, segment


def placed(ids: torch.Tensor, columns: torch.Tensor, extra: int, filler: torch.Tensor) -> torch.Tensor:
    """[..., L + extra]: the ids scattered to their `columns` over `filler`, the spill area cut off."""
    width = ids.shape[-1]
    out = filler.expand(*ids.shape[:-1], 2 * width + extra).contiguous()
    return out.scatter_(-1, columns, ids)[..., width:]


def _row_bits(rows: int) -> int:
    return max(rows - 1, 0).bit_length()


def dense_fields(fields: torch.Tensor, bound: int | None, shift: int) -> torch.Tensor:
    """Each row's fields renumbered below the row width, so that `orders` of them fit one key.
    Where fields + `shift` are known to be non-negative and below `bound`, and a table of `bound`
    cells per row is not too large, by `_occurrence_columns` (no sort). Where no bound, or too
    many bits to sort flat with the row, is known, the whole chunk is ranked first (one flat sort;
    ranks below rows x width), then the ranks go through `_occurrence_columns` (19 parts of 7
    rows at 256 x 1,024: 34.0 ms against 39.8 ms for a second, per-row ranking sort); else ranked
    per row in sorted order."""
    rows, width = fields.shape
    if bound is not None and TABLE_ENTRIES // bound > 0:
        return _occurrence_columns(fields, bound, shift)
    bits = None if bound is None else (bound - 1).bit_length()
    if bits is None or _row_bits(rows) + bits > KEY_BITS:
        fields = _ranks(fields.reshape(1, -1), None).view(rows, width)
        if TABLE_ENTRIES // max(fields.numel(), 1) > 0:
            return _occurrence_columns(fields, max(fields.numel(), 1), 0)
        bits = (rows * width - 1).bit_length()
    else:
        fields = fields + shift
    return _ranks(fields, bits)


def _occurrence_columns(fields: torch.Tensor, bound: int, shift: int) -> torch.Tensor:
    """Each field replaced by the column of one occurrence of its value in its row: every column
    writes itself into a table [row, field + shift] and reads back the column that stayed
    (whichever write a device keeps, all occurrences read the same one), so equal fields get
    equal columns and distinct fields distinct ones. The table is never cleared: only written
    cells are read. At most TABLE_ENTRIES cells at once (`bound` per row); int16 where the
    width allows, else int32. One scatter and one gather: on the CPU, one thread, 1.2 ms per
    2^18 positions against 2.8 ms for `_ranks` (a sort, a cumulative sum and a scatter)."""
    rows, width = fields.shape
    device = fields.device
    dtype = torch.int16 if width <= 1 << 15 else torch.int32
    step = min(rows, TABLE_ENTRIES // bound)
    table = torch.empty(step * bound, dtype=dtype, device=device)
    columns = torch.arange(width, dtype=dtype, device=device).repeat(step)
    offsets = torch.arange(step, device=device)[:, None] * bound + shift
    out = torch.empty((rows, width), dtype=dtype, device=device)
    for first in range(0, rows, step):
        last = min(first + step, rows)
        index = (fields[first:last] + offsets[: last - first]).view(-1)
        table.scatter_(0, index, columns[: index.shape[0]])
        torch.take(table, index, out=out[first:last].view(-1))
    return out


def _sorted_keys(fields: torch.Tensor, segment: torch.Tensor, orders: int, bits: int, segment_bits: int) -> torch.Tensor:
    """[rows, W]: each row's n-gram keys (`_gram_keys`) in sorted order. Where the row fits above
    the key in an int64 (the usual case), one flat sort of row * 2^(key bits) + key, int32 where
    that fits 31 bits: PyTorch sorts a flat integer tensor with a radix sort (fbgemm's on the CPU,
    CUB's on CUDA), about twice as fast as the rows of a matrix on the CPU (8 ms against 18 ms
    for 256 x 2,048 int64, one thread; 4 ms in int32; an int64 sort makes all eight byte passes
    whatever the keys' range, as PyTorch hands fbgemm the dtype's maximum). The sorted keys then
    carry the row in their high bits, which adjacent keys of one row share."""
    rows, width = fields.shape
    key_bits = bits * orders + segment_bits
    flat = rows == 1 or _row_bits(rows) + key_bits <= KEY_BITS
    row = torch.arange(rows, device=fields.device)[:, None] << bits if flat and rows > 1 else None
    keys = _gram_keys(fields, 0, orders, bits, row)
    keys <<= segment_bits
    keys.bitwise_or_(segment)
    if not flat:
        return torch.sort(keys, dim=1)[0]
    keys = keys.view(-1)
    if _row_bits(rows) + key_bits <= 31:
        keys = keys.to(torch.int32)
    return torch.sort(keys)[0].view(rows, width)


def _sort_rows(values: torch.Tensor, bits: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of `values` sorted, and the column each sorted value came from: one flat sort of
    row * 2**bits + value (int32 where it fits 31 bits) where the values are non-negative and
    below 2**bits and that fits an int64 (see `_sorted_keys`), else a sort of the rows."""
    rows, width = values.shape
    row = torch.arange(rows, device=values.device)[:, None]
    if rows > 1:
        if bits is None or _row_bits(rows) + bits > KEY_BITS:
            return torch.sort(values, dim=1)
        dtype = torch.int32 if _row_bits(rows) + bits <= 31 else torch.int64
        values = (row.to(dtype) << bits) | values.to(dtype)
    ordered, index = torch.sort(values.reshape(-1))
    return ordered.view(rows, width), index.view(rows, width) - row * width


def _ranks(values: torch.Tensor, bits: int | None) -> torch.Tensor:
    """Each row's values renumbered 0, 1, ... in sorted order (equal values, equal ranks)."""
    ordered, columns = _sort_rows(values, bits)
    changed = torch.zeros_like(values, dtype=torch.int64)
    torch.ne(ordered[:, 1:], ordered[:, :-1], out=changed[:, 1:])
    return torch.empty_like(values, dtype=torch.int64).scatter_(1, columns, torch.cumsum(changed, dim=1))


def _gram_keys(fields: torch.Tensor, first: int, count: int, bits: int, row: torch.Tensor | None = None) -> torch.Tensor:
    """int64 [rows, W]: fields `first` .. `first` + `count` - 1 of the n-grams starting at each
    column as one key, field j (from the top) the field `first` + j columns further on (0 past
    the row's end, inside the last segment's extra columns), so that equal n-grams share their top
    fields; and `row` [rows, 1] (already shifted by `bits`), if given, above them (first = 0)."""
    fields = fields.long()  # int64 first: shifts and ors of int64 are vectorised, mixed dtypes not (2x)
    width = fields.shape[1]
    if first == 0:
        keys = fields.clone() if row is None else fields + row
    else:
        keys = torch.zeros_like(fields)
        keys[:, : max(width - first, 0)] = fields[:, first:]
    for offset in range(first + 1, first + count):
        keys <<= bits
        if offset < width:
            keys[:, : width - offset] |= fields[:, offset:]
    return keys


def _sorted_words(fields: torch.Tensor, segment: torch.Tensor, orders: int,
                  bits: int) -> tuple[list[torch.Tensor], int, torch.Tensor]:
    """Where one int64 cannot hold the key of every order (a candidate with its references past
    about 16,000 tokens at 4 orders, or many orders): the key as words of at most KEY_BITS // bits
    fields (`_gram_keys`), each row sorted by them in order by stable sorts from the last word to
    the first; the sorted words, the fields per word, and each sorted position's segment. Slower
    than one flat sort (argsorts and gathers of rows), and as exact."""
    rows, width = fields.shape
    per_word = max(KEY_BITS // bits, 1)
    words = [_gram_keys(fields, first, min(per_word, orders - first), bits) for first in range(0, orders, per_word)]
    order = None  # the permutation that sorts each row by the words seen so far (last first)
    for word in reversed(words):
        index = torch.sort(word if order is None else word.gather(1, order), dim=1, stable=True)[1]
        order = index if order is None else order.gather(1, index)
    assert order is not None
    return [word.gather(1, order) for word in words], per_word, segment.expand(rows, width).gather(1, order)


def _count_clipped(words: list[torch.Tensor], per_word: int, orders: int, bits: int, segment_bits: int,
                   segments: int, segment: torch.Tensor | None = None) -> torch.Tensor:
    """int64 [rows, orders] from each row's sorted keys, `words` of `per_word` fields each (the
    usual case: one word holding every field, with the segment in its low `segment_bits`; else
    `segment` gives each sorted position's): per order n, a key whose top n fields differ from
    the previous key's starts a new n-gram, a cumulative sum numbers the n-grams, one scatter-add
    counts each in its segment's counters (int16 where the width allows), and min(candidate, max
    over references) is summed. One order at a time, in buffers reused across orders (on the
    CPU, stacking the orders was slower: four times the memory traffic, out of cache)."""
    rows, width = words[0].shape
    device = words[0].device
    dtype = torch.int16 if width < 1 << 15 else torch.int32
    differs = [word[:, 1:] ^ word[:, :-1] for word in words]
    earlier: list[torch.Tensor] = []  # [j - 1]: where a word before word j differs
    for differ in differs[:-1]:
        earlier.append(differ != 0 if not earlier else earlier[-1] | (differ != 0))
    if segment is None:
        segment = words[-1] & ((1 << segment_bits) - 1)
    counters = segment * width  # the first counter of each key's segment
    new = torch.zeros((rows, width), dtype=torch.int64, device=device)
    ones = torch.ones((rows, width), dtype=dtype, device=device)
    counts = torch.empty((rows, segments * width), dtype=dtype, device=device)
    candidate = counts[:, :width]
    references = counts[:, width:] if segments == 2 else counts.view(rows, segments, width)[:, 1:]
    clipped = []
    for order in range(1, orders + 1):
        word, field = divmod(order - 1, per_word)
        below = bits * (min(per_word, orders - word * per_word) - field - 1)  # bits of later fields
        low = segment_bits if word == len(words) - 1 else 0
        torch.ge(differs[word], 1 << (below + low), out=new[:, 1:])
        if word:
            new[:, 1:] |= earlier[word - 1]
        index = torch.cumsum(new, dim=1).add_(counters)
        counts.zero_().scatter_add_(1, index, ones)
        most = references if segments == 2 else references.amax(dim=1)  # one reference: its counts
        clipped.append(torch.minimum(candidate, most).sum(dim=1, dtype=torch.int32))  # no int64 copy
    return torch.stack(clipped, dim=1).long()
