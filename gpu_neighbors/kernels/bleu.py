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
Per order, the product of the candidates' occurrence features with the training set's gives
every clipped count of a tile at once (see `ngrams.py`); the orders share one sparse product,
each order's counts in their own bits of one exact float64 (`count_groups`). No exp, log or root
runs on the device: every factor of a pair's value is gathered from host tables by its lengths
and counts (`bleu_tables.py`) and multiplied in a fixed order, so a tile is the same bits on
every device.

Other `weights` (any number of orders from 1, e.g. BLEU-4's (1/4, 1/4, 1/4, 1/4)) take a general
path on the same stored counts: NLTK's formula (`bleu_sets.bleu_from_counts`) per pair sharing a
unigram, equal to `sentence_bleu([s], x, weights, smoothing_function)` under every smoothing
(`none` then keeps NLTK's tiny value, not 0). BLEU* keeps its factorised path below.

Token ids straight from a model's `generate` take a second path beside that one
(`encode_ids`): when the scorer's tokenizer is the model's Hugging Face tokenizer, the ids
already are the tokens. A device table maps them to training vocabulary ids, and the tile is a
dense product with no host synchronisation: no `.item()`, boolean-mask indexing, `nonzero`,
`unique`, `bincount` or sparse-sparse product. Those ops size their output from device data,
which the ragged text path (`NgramFeatures.transform`, CSR building, CSR x CSR products) does
freely; here every tensor has a shape known on the host:
  * tokens stay a padded [rows, length] matrix; dropped tokens are moved to the end of their
    row by a stable sort instead of being removed;
  * n-gram and occurrence-feature ids are looked up position by position (-1 = none), with
    `ngrams.lookup_sorted` and `ngrams.occurrence_rank`, both sort/search only;
  * clipped matches per order are one sparse x dense product: the training CSR block
    [texts, F_n] times a dense 0/1 matrix [F_n, rows] of the candidates' features.
The first call per device builds the tables (one pass over the tokenizer's vocabulary, with
syncs), and the first use of a training block moves it there; later calls reuse both, until a
refit makes a new kernel.

The id path equals the text path on `tokenizer.batch_decode(ids, skip_special_tokens=True)`
whenever re-tokenizing the decoded text gives the same tokens back, which holds for ids that
came from tokenizing text. Padding (attention mask 0), special tokens, negative ids and ids past
the tokenizer's vocabulary are dropped, as that decode drops them. Ids a model samples freely
can form non-canonical segmentations that decode -> tokenize changes (WordPiece: a leading
"##ing", or "un" + "##able" where the tokenizer would pick "unable"); the id path scores the
tokens the model produced, the text path the re-segmented ones. See docs/training_loop.md.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_neighbors.core.compiled import native
from gpu_neighbors.core.sparse import coo_matrix, row_block, side_by_side, sparse_mm, transposed
from gpu_neighbors.core.tiling import BlockCache, TransientCache
from gpu_neighbors.kernels.base import Kernel
from gpu_neighbors.kernels.bleu_sets import check_weights
from gpu_neighbors.kernels.bleu_tables import (
    PrecisionTables,
    bleu_of_rows,
    brevity,
    check_smoothing,
    star_by_length,
    star_order_factors,
    table_size,
)
from gpu_neighbors.text.ngrams import NgramFeatures, OrderTable, lookup_sorted, occurrence_rank
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer, Tokenizer
from gpu_neighbors.text.vocabulary import TokenBatch, Vocabulary, id_lookup, kept_tokens

MAX_ORDER = 4  # orders counted at least (BLEU*'s); more where the weights have more
# BLEU*: BLEU-4 without the unigram precision, the paper's kernel and the default; any other
# weights take the general path (`weighted_bleu`).
BLEU_STAR_WEIGHTS = (0.0, 1 / 3, 1 / 3, 1 / 3)
FIT_SLICE = 65_536  # training texts tokenized at a time
FEATURE_BYTES = 4  # one float32 entry of the dense candidate-feature matrix of the id path
FEATURE_SHARE = 2  # at most 1/FEATURE_SHARE of the memory budget goes to those features
WORD_SLICE_BYTES = 1 << 25  # dense candidate-word matrix of the shared-word join, per slice
# BLEU*'s dense steps (the shared-word join, the by-length values, then the pairs sharing a
# bigram) go this many bytes of float64 tile rows at a time where they run on the CPU, so each
# pass over a slice finds it in cache (1,540 x 2,000 tiles: 256 rows a slice, a predict 8%
# faster than whole tiles, and 2% more with the bigram pairs per slice); a device takes
# the tile whole (one slice: no host read of where each slice's entries start). There the join
# counts shared words in int16, whose sparse x dense product reads half the bytes of float32's
# (a predict 11-15% faster), at most INT16_SLICE_WORDS words a slice so that no count
# overflows; torch's CUDA product has no int16, so a device counts in float32.
ROW_SLICE_BYTES = 1 << 22
SLICED_ON = frozenset({"cpu"})
INT16_SLICE_WORDS = (1 << 15) - 1
EXACT_BITS = 53  # float64 holds every integer below 2^53 exactly
WIDTH_TABLE_CELLS = 1 << 22  # largest by-length table kept for a width of text chunks (32 MiB)


# Every exp, log and root comes from host tables (`bleu_tables`), gathered by integer index:
# BLEU*'s order factors [3, counts], or the precision tables of other weights.
Factors = torch.Tensor | PrecisionTables


@dataclass(frozen=True)
class ChunkWords:
    """The distinct words of a chunk of candidates and who holds them, for BLEU*'s shared-word
    join: found once per chunk (data-dependent shapes, so host synchronisations on a GPU), so
    that the tiles need none."""

    words: torch.Tensor  # int64 [W]: sorted unigram feature ids (g, 1) of the chunk's words
    rows: torch.Tensor  # int64 [E]: candidate of each (candidate, word) entry, row-major order
    word_of: torch.Tensor  # int64 [E]: the entry's word, a position in `words`
    position: torch.Tensor  # int64 [F_1]: each unigram feature's position in `words`, -1 if none

    @classmethod
    def of(cls, unigrams: torch.Tensor, first_occurrence: torch.Tensor) -> ChunkWords:
        """From unigram occurrence features (CSR [rows x F_1], each row's columns ascending) and
        which features say "holds word g" (bool [F_1]). The words are marked on a mask over the
        features, so positions are a running count (no sort), and every block of the chunk
        finds its texts' words by one gather (a binary search took 0.7 ms a tile)."""
        crow, features = unigrams.crow_indices(), unigrams.col_indices()
        device = features.device
        rows = torch.repeat_interleave(torch.arange(unigrams.shape[0], device=device), crow[1:] - crow[:-1],
                                       output_size=features.numel())
        keep = first_occurrence[features]
        rows, features = rows[keep], features[keep]
        held = torch.zeros(first_occurrence.numel(), dtype=torch.bool, device=device)
        held[features] = True
        position = torch.where(held, held.cumsum(0) - 1, -1)
        return cls(held.nonzero().flatten(), rows, position[features], position)


@dataclass(frozen=True)
class EncodedBleu:
    """A chunk of candidates: their counted orders' occurrence matrices side by side, one per
    group of `BleuKernel.count_groups`, token counts, the host-made factors their lengths and
    counts can reach, and (BLEU*) their words."""

    grouped: list[torch.Tensor]  # sparse COO [rows x sum of the group's F_n]
    lengths: torch.Tensor  # int64 [rows]
    length_index: torch.Tensor  # int64 [rows]: the row of `by_length` of each candidate's length
    by_length: torch.Tensor  # float64 [distinct lengths, distinct training lengths]
    factors: Factors
    words: ChunkWords | None = None

    def __len__(self) -> int:
        return int(self.lengths.numel())


@dataclass(frozen=True)
class TrainingBlock:
    """Training texts of one block on the ids' device: occurrence matrices per order (CSR) and
    the codes of their lengths (columns of the by-length tables)."""

    features: list[torch.Tensor]
    length_codes: torch.Tensor


@dataclass
class IdTables:
    """What the id path needs from the fitted kernel, on one device."""

    lookup: torch.Tensor  # int64 [tokenizer size]: vocabulary id, -1 unseen in training, DROPPED
    tables: list[OrderTable]
    vocab_size: int
    feature_widths: list[int]  # columns of the training matrices per order
    blocks: BlockCache[TrainingBlock] = field(default_factory=BlockCache)

    def tokens(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Vocabulary ids [rows, length] with kept tokens first in each row (-1 = unseen in
        training), and the number kept per row."""
        tokens, lengths, _ = kept_tokens(self.lookup, input_ids, attention_mask)
        return tokens, lengths

    def candidate_features(self, tokens: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """Per order, the dense 0/1 matrix [F_n, rows] of the rows' occurrence features that the
        training set has (the transpose of `NgramFeatures.transform`'s matrices)."""
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
                last[:, : max(width - order + 1, 0)] = tokens[:, order - 1 :]  # none past the end: not -1
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


@dataclass(frozen=True)
class EncodedIds:
    """A chunk of token-id rows: dense occurrence features per order [F_n, rows], lengths, the
    tables of their device, and the by-length table and factors of their padded width."""

    features: list[torch.Tensor]
    lengths: torch.Tensor  # int64 [rows]
    tables: IdTables
    by_length: torch.Tensor  # float64 [width + 1, distinct training lengths]
    factors: Factors

    def __len__(self) -> int:
        return int(self.lengths.numel())


class BleuKernel(Kernel[EncodedBleu | EncodedIds]):
    name = "bleu"
    default_tau = 0.08
    # A product of at most 9 table factors (each within 2 ulps of its exact power: portable exp
    # and log) and divisions, each rounded once, on a value <= 1: within 32 ulps of 1, bounded
    # again by 2x for another order of the same operations.
    SIMILARITY_ERROR = 2.0**-46
    supports_ids = True

    def __init__(
        self,
        *,
        tokenizer: Tokenizer,
        device: torch.device,
        smoothing: str = "add1",
        weights: Sequence[float] = BLEU_STAR_WEIGHTS,
    ) -> None:
        super().__init__(tokenizer=tokenizer, device=device)
        self.smoothing = check_smoothing(smoothing)
        self.weights = check_weights(weights)
        self._id_tables: TransientCache[torch.device, IdTables] = TransientCache()
        self._grouped: BlockCache[list[torch.Tensor]] = BlockCache()
        self._by_width: TransientCache[tuple[int, torch.device], tuple[torch.Tensor, Factors]] = TransientCache()

    def _fit(self, texts: list[str]) -> None:
        # Token strings as Python lists take ~0.7 GB per million texts: tokenize in slices and
        # keep only the ids (a slice's tokens join the vocabulary before its ids are looked up).
        self.vocabulary = Vocabulary()
        slices, lengths = [], []
        for first in range(0, len(texts), FIT_SLICE):
            tokenized = self.tokenizer.tokenize_many(texts[first : first + FIT_SLICE])
            self.vocabulary.add(tokenized)
            slices.append(self.vocabulary.batch(tokenized, self.device))
            lengths.append(np.asarray(tokenized.lengths, dtype=np.int64))
        batch = TokenBatch(
            ids=torch.cat([part.ids for part in slices]),
            lengths=torch.cat([part.lengths for part in slices]),
        )
        del slices
        self.ngrams = NgramFeatures(max(MAX_ORDER, len(self.weights)))
        self._train = self.ngrams.fit(batch, len(self.vocabulary))
        # Row offsets of the training matrices on the host, so cutting a block reads no device.
        self._train_rows = [matrix.crow_indices().cpu().numpy() for matrix in self._train]
        table = self.ngrams.tables[0]
        self._first_occurrence = table.feature_keys % table.max_rank == 0
        # The training lengths as codes of their distinct values: the columns of by-length tables.
        values, codes = np.unique(np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
                                  return_inverse=True)
        self._train_length_values = values
        self._train_length_codes = torch.from_numpy(codes.reshape(-1).astype(np.int64)).to(self.device)
        counted = range(1, MAX_ORDER) if self.weights == BLEU_STAR_WEIGHTS else range(len(self.weights))
        self._count_bits, self.count_groups = count_groups(int(values.max(initial=0)), counted)
        self._id_tables.clear()
        self._grouped.clear()
        self._by_width.clear()

    def _encode(self, texts: Sequence[str]) -> EncodedBleu:
        batch, lengths = self.vocabulary.encode(self.tokenizer, texts, self.device)
        matrices = self.ngrams.transform(batch)
        values, index = np.unique(lengths, return_inverse=True)
        size = table_size(int(values.max(initial=0)) + 1)
        if size * len(self._train_length_values) <= WIDTH_TABLE_CELLS:
            table, factors = self._tables_of_width(size, self.device)
            by_length = table.index_select(0, torch.from_numpy(values).to(self.device))
        else:  # a text of many thousand tokens: the table of its lengths alone
            by_length, factors = self._tables_for(values, self.device)
        length_index = torch.from_numpy(index.reshape(-1)).to(self.device)
        grouped = [side_by_side([matrices[order] for order in group], [1.0] * len(group)).to_sparse_coo()
                   for group in self.count_groups]
        words = (ChunkWords.of(matrices[0], self._first_occurrence)
                 if self.weights == BLEU_STAR_WEIGHTS else None)
        return EncodedBleu(grouped, batch.lengths, length_index, by_length, factors, words)

    def _tables_of_width(self, size: int, device: torch.device) -> tuple[torch.Tensor, Factors]:
        """The by-length table of candidate lengths 0..size-1 and the factors of counts below
        `size`, on `device`, made once per size (a multiple of TABLE_STEP: chunks of texts and
        batches of ids of similar lengths share one; made per chunk, they were 2% of a predict).
        Every entry is computed on its own, so a row is the same bits in any table."""
        if (size, device) not in self._by_width:
            self._by_width[size, device] = self._tables_for(np.arange(size), device)
        return self._by_width[size, device]

    def _tables_for(self, lengths: np.ndarray, device: torch.device) -> tuple[torch.Tensor, Factors]:
        """The by-length table of candidate `lengths` (distinct, host) against the training
        lengths, and the factors their counts can reach (m_n <= t_n <= the longest), on `device`."""
        longest = int(lengths.max(initial=0))
        if self.weights == BLEU_STAR_WEIGHTS:
            table = star_by_length(lengths, self._train_length_values, self.smoothing)
            factors: Factors = torch.from_numpy(star_order_factors(longest + 1, self.smoothing)).to(device)
        else:
            table = brevity(lengths[:, None], self._train_length_values[None, :])
            factors = PrecisionTables(self.weights, self.smoothing, max(longest, 1) + 1, device)
        return torch.from_numpy(table).to(device), factors

    def tile(self, encoded: EncodedBleu | EncodedIds, start: int, stop: int) -> torch.Tensor:
        if isinstance(encoded, EncodedIds):
            return self._dense_tile(encoded, start, stop)
        # COO products: torch 2.13's CSR x CSR product on the CPU (MKL) leaks about the size of
        # its result on every call, which a stream of millions of tiles cannot afford.
        packed = [sparse_mm(candidates, train)
                  for candidates, train in zip(encoded.grouped, self._grouped_blocks(start, stop))]
        rows, cols, counts = packed_counts(packed, [len(group) for group in self.count_groups], self._count_bits,
                                           stop - start)
        if self.weights != BLEU_STAR_WEIGHTS:
            assert isinstance(encoded.factors, PrecisionTables)
            return weighted_bleu(rows, cols, counts, encoded, self._train_length_codes[start:stop], encoded.factors)
        # BLEU*: unigrams only as the shared-word join (a pair that shares a bigram shares a
        # word, so the counted orders 2-4 touch only pairs the join keeps).
        assert encoded.words is not None and isinstance(encoded.factors, torch.Tensor)
        sliced = encoded.lengths.device.type in SLICED_ON
        join = WordJoin(encoded.words, len(encoded), self._block(0, start, stop),
                        torch.int16 if sliced else torch.float32)
        by_length = encoded.by_length.index_select(1, self._train_length_codes[start:stop])
        score = torch.empty((len(encoded), stop - start), dtype=torch.float64, device=by_length.device)
        step = max(ROW_SLICE_BYTES // (8 * max(stop - start, 1)), 1) if sliced else len(encoded)
        firsts = list(range(0, len(encoded), step))
        runs = slice_runs(rows, firsts)  # each slice's pairs sharing a bigram, finished while it is in cache
        for first, begin, end in zip(firsts, runs, runs[1:]):
            last = min(first + step, len(encoded))
            part = by_length_where_shared(by_length, encoded.length_index[first:last], join.shared(first, last),
                                          score[first:last])
            bleu_star(part, first, rows[begin:end], cols[begin:end], counts[:, begin:end], encoded.factors,
                      self.smoothing)
        return score

    def _grouped_blocks(self, start: int, stop: int) -> list[torch.Tensor]:
        """Training texts start..stop-1, per group of orders (0 = unigrams), as the COO
        [sum of F_n x texts] whose entries are 2^(bits * place in the group): a product with the
        candidates' 0/1 matrix sums each order's clipped counts into its own bits. Made from CSR
        (row-major order already), so the product sorts nothing; made once a block and kept
        (`BlockCache`: every chunk meets the same blocks; 1.1 ms a block of 2,000, one thread)."""

        def made() -> list[torch.Tensor]:
            sides = []
            for group in self.count_groups:
                blocks = [self._block(order, start, stop) for order in group]
                scales = [float(1 << (self._count_bits * place)) for place in range(len(group))]
                sides.append(transposed(side_by_side(blocks, scales)).to_sparse_coo())
            return sides

        return self._grouped.made(start, stop, made)

    def _block(self, order: int, start: int, stop: int) -> torch.Tensor:
        """Training texts start..stop-1 of one order's matrix (CSR), cut at host offsets."""
        return row_block(self._train[order], start, stop, self._train_rows[order])

    def pair_bytes(self) -> int:
        # Worst case, every pair shares every order and every candidate length differs: the
        # float64 tile and its by-length table; per group of orders its product (a COO result of
        # two int64 indices and a float64 of packed counts, after a CSR one inside the product);
        # per stored pair its counts (int64 an order), flat index and about two float64
        # temporaries, and BLEU*'s float32 shared-word indicator. Other weights keep, per pair
        # sharing a unigram, its indices and about six float64 temporaries per order.
        orders = sum(len(group) for group in self.count_groups)
        general = 0 if self.weights == BLEU_STAR_WEIGHTS else 8 * (2 + 6 * len(self.weights))
        return 2 * 8 + len(self.count_groups) * (16 + 24) + 8 * orders + 8 + 2 * 8 + 4 + general

    def settings(self) -> dict[str, str]:
        weights = {} if self.weights == BLEU_STAR_WEIGHTS else {"weights": ",".join(map(str, self.weights))}
        return {**super().settings(), "smooth": self.smoothing, **weights}

    # -- the token-id path -----------------------------------------------------------------

    def check_ids(self) -> None:
        """Ids make sense only where this kernel's tokens are the ids' tokenizer's tokens."""
        if not isinstance(self.tokenizer, HuggingFaceTokenizer):
            raise ValueError(
                f"predict_ids needs a Hugging Face tokenizer (the one that made the ids); this scorer "
                f"tokenizes with {self.tokenizer.signature!r}"
            )
        if self.tokenizer.lowercase:
            raise ValueError(
                "predict_ids cannot apply lowercase=True: it folds case in the text before "
                "tokenizing, and ids have no text; use an uncased tokenizer instead"
            )

    def _encode_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> EncodedIds:
        tables = self._tables_on(input_ids.device)
        tokens, lengths = tables.tokens(input_ids.long(), attention_mask)
        size = table_size(int(input_ids.shape[1]) + 1)  # lengths 0..width
        by_length, factors = self._tables_of_width(size, input_ids.device)
        return EncodedIds(tables.candidate_features(tokens, lengths), lengths, tables, by_length, factors)

    def id_row_bytes(self) -> int:
        return FEATURE_SHARE * FEATURE_BYTES * sum(matrix.shape[1] + 1 for matrix in self._train)

    def _dense_tile(self, encoded: EncodedIds, start: int, stop: int) -> torch.Tensor:
        block = self._block_on(encoded.tables, start, stop)
        matches = [(train @ candidates).t() for train, candidates in zip(block.features, encoded.features)]
        by_length = encoded.by_length.index_select(1, block.length_codes).index_select(0, encoded.lengths)
        if isinstance(encoded.factors, PrecisionTables):
            return dense_weighted_bleu(matches, encoded.lengths, by_length, encoded.factors)
        return dense_bleu_star(matches, by_length, encoded.factors, self.smoothing)

    def _block_on(self, tables: IdTables, start: int, stop: int) -> TrainingBlock:
        """Training texts start..stop-1 on the tables' device, moved there on first use and kept
        (`BlockCache`: one tiling's blocks at a time)."""
        device = tables.lookup.device
        return tables.blocks.made(start, stop, lambda: TrainingBlock(
            [self._block(order, start, stop).to(device) for order in range(len(self._train))],
            self._train_length_codes[start:stop].to(device),
        ))

    def _tables_on(self, device: torch.device) -> IdTables:
        """The id tables on `device`, built on first use (with host syncs, once)."""
        if device not in self._id_tables:
            assert isinstance(self.tokenizer, HuggingFaceTokenizer)  # check_ids ran
            self._id_tables[device] = IdTables(
                lookup=id_lookup(self.vocabulary, self.tokenizer.hf).to(device),
                tables=[
                    OrderTable(t.gram_keys.to(device), t.feature_keys.to(device), t.max_rank)
                    for t in self.ngrams.tables
                ],
                vocab_size=self.ngrams.vocab_size,
                feature_widths=[matrix.shape[1] for matrix in self._train],
            )
        return self._id_tables[device]


def count_groups(longest: int, orders: Sequence[int]) -> tuple[int, list[tuple[int, ...]]]:
    """The bits each clipped count takes, and the counted `orders` (0 = unigrams) in groups whose
    counts pack into one exact float64, in order. A clipped count is at most the training text's
    number of n-grams, so below 2^bits for the `longest` training text, and 53 // bits orders fit
    in a group: BLEU*'s three for training texts under 2^17 tokens, BLEU-4's four under 2^13
    (one product a tile instead of one an order); one an order past 2^26."""
    bits = max(longest, 1).bit_length()
    size = max(EXACT_BITS // bits, 1)
    orders = tuple(orders)
    return bits, [orders[first : first + size] for first in range(0, len(orders), size)]


def slice_runs(rows: torch.Tensor, firsts: list[int]) -> list[int]:
    """Where the entries of each slice of rows (from each of `firsts` to the next) start in
    `rows` (ascending: entries in row-major order), then where the last ends. A host read, but
    for a single slice."""
    inner = torch.searchsorted(rows, torch.tensor(firsts[1:], device=rows.device)).tolist() if len(firsts) > 1 else []
    return [0, *inner, rows.numel()]


def packed_counts(
    packed: list[torch.Tensor], sizes: list[int], bits: int, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row, column, clipped counts [orders, pairs] int64) of the pairs that share the first
    counted order, from one sparse COO product [rows x `width`] per group of `sizes` orders,
    each order's counts `bits` bits of the entry (the group's first order lowest). A shared
    n-gram contains shared (n-1)-grams, so every later group's pairs are among the first's; they
    are found by binary search (coalesced entries are in row-major order)."""
    mask = (1 << bits) - 1
    entries = [_stored_entries(product) for product in packed]
    rows, cols, _ = entries[0]
    columns = []
    for group, ((group_rows, group_cols, values), size) in enumerate(zip(entries, sizes)):
        values = values.to(torch.int64)
        at = None if group == 0 else torch.searchsorted(rows * width + cols, group_rows * width + group_cols)
        for place in range(size):
            counts = (values >> (bits * place)) & mask
            if at is not None:
                counts = torch.zeros_like(rows).index_put_((at,), counts)
            columns.append(counts)
    return rows, cols, torch.stack(columns)


class WordJoin:
    """Which candidate x training pairs share a word, as a join on the words alone (no match
    counts): the training block's words a dense 0/1 matrix over the chunk's own vocabulary
    (`words`; in slices of at most WORD_SLICE_BYTES), the candidates' a sparse one, one sparse x
    dense matmul per slice, counting in `dtype` (int16: at most INT16_SLICE_WORDS words a slice,
    and the sum over slices clamped as it goes, so that no count overflows). `train`: the
    block's unigram occurrence features, CSR [cols x F_1].

    Every shape is known on the host: training entries outside a slice (or not words of the
    chunk) are written to a spare row that is dropped, and when the chunk's words fit one slice
    (the common case) the candidate side is used whole. Only a chunk of more words than a slice
    selects its entries slice by slice, and only rows asked in slices (`shared`) read where
    each slice's entries start."""

    def __init__(self, words: ChunkWords, num_rows: int, train: torch.Tensor, dtype: torch.dtype) -> None:
        num_cols = train.shape[0]
        device = words.words.device
        crow = train.crow_indices()
        columns = train.col_indices()
        train_rows = torch.repeat_interleave(torch.arange(num_cols, device=device), crow[1:] - crow[:-1],
                                             output_size=columns.numel())
        train_words = words.position[columns]  # -1: not a word of the chunk
        count = words.words.numel()
        self.num_rows, self.num_cols, self.device, self.dtype = num_rows, num_cols, device, dtype
        # Per slice of words: the (candidate, word) entries in row-major order, and the dense side.
        self.parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        width = max(WORD_SLICE_BYTES // (dtype.itemsize * max(num_cols, 1)), 1)
        if dtype == torch.int16:
            width = min(width, INT16_SLICE_WORDS)
        for first in range(0, count, width):
            last = min(first + width, count)
            size = last - first
            dense = torch.zeros((size + 1, num_cols), dtype=dtype, device=device)
            inside = (train_words >= first) & (train_words < last)
            dense.index_put_((torch.where(inside, train_words - first, size), train_rows),
                             torch.ones((), dtype=dtype, device=device).expand(train_rows.shape))
            if size == count:
                rows, word_of = words.rows, words.word_of
            else:
                chosen = (words.word_of >= first) & (words.word_of < last)
                rows, word_of = words.rows[chosen], words.word_of[chosen] - first
            self.parts.append((rows, word_of, dense[:size]))

    def shared(self, first: int, last: int) -> torch.Tensor:
        """[last - first x cols], in the join's dtype: 1 where candidate first..last-1 and a
        training text share a word, 0 where not (`by_length_where_shared`)."""
        shared = None
        whole = first == 0 and last == self.num_rows
        for rows, word_of, dense in self.parts:
            if whole:
                start, stop = 0, rows.numel()
            else:  # the slice's entries (rows ascending): a host read, so only where SLICED_ON
                start, stop = torch.searchsorted(rows, torch.tensor([first, last], device=self.device)).tolist()
            sparse = coo_matrix(torch.stack([rows[start:stop] - first, word_of[start:stop]]),
                                torch.ones(stop - start, dtype=self.dtype, device=self.device),
                                (last - first, dense.shape[0]), coalesced=True)  # unique, row-major
            counts = sparse_mm(sparse, dense).clamp_(max=1)
            shared = counts if shared is None else shared.add_(counts).clamp_(max=1)
        if shared is None:
            shared = torch.zeros((last - first, self.num_cols), dtype=self.dtype, device=self.device)
        return shared


def by_length_where_shared(
    by_length: torch.Tensor, length_index: torch.Tensor, shared: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """`out` = the rows `length_index` of the by-length values [lengths x cols] times `WordJoin`'s
    0/1 indicator `shared` (a multiply, on the CPU several times faster than a boolean mask). On
    the CPU with the compiled loops, in one pass (`rows_times_indicator`: the same multiply, 3.4x
    faster than the torch passes); else a gather, then a multiply by float64 (float64 times int16
    takes torch's casting loop, 3x slower than converting first) or, on a device, by float32."""
    if native is not None and out.device.type == "cpu" and shared.dtype == torch.int16:
        native.rows_times_indicator(by_length.numpy(), length_index.numpy(), shared.numpy(), out.numpy())
        return out
    torch.index_select(by_length, 0, length_index, out=out)
    return out.mul_(shared.to(torch.float64) if shared.dtype == torch.int16 else shared)


def bleu_star(
    score: torch.Tensor,
    first: int,
    rows: torch.Tensor,
    cols: torch.Tensor,
    counts: torch.Tensor,
    factors: torch.Tensor,
    smoothing: str,
) -> torch.Tensor:
    """BLEU* [rows x cols] (float64, in place: a tile or its rows from `first`) from `score`, each
    pair's value with m_2 = m_3 = m_4 = 0 where it shares a word and 0 where not (the by-length
    values of `bleu_tables.star_by_length`, which depend on the two lengths alone, times
    `WordJoin`'s indicator), the clipped counts m_2..m_4 [3, pairs] of the pairs sharing a
    bigram (`rows` - `first`, `cols` within `score`; `packed_counts`) and the order factors [3,
    counts] of `bleu_tables.star_order_factors`.

    A shared n-gram contains shared (n-1)-grams, so the orders a pair does not share are always
    its last ones, and every smoothing factorises over orders: a pair sharing a word starts from
    its by-length value, and each higher order n multiplies that by (smoothed numerator of m_n /
    unmatched numerator of n)^(1/3), a table entry (1 where m_n = 0), in order n = 2, 3, 4;
    only the pairs sharing a bigram are touched past the first step (on the CPU with the
    compiled loops, in one pass: `scale_entries`). Under `none` only the pairs sharing a 4-gram
    keep a value.
    """
    if native is not None and score.device.type == "cpu" and smoothing != "none":
        native.scale_entries(score.numpy(), first, rows.numpy(), cols.numpy(), counts.numpy(), factors.numpy())
        return score
    values = score.view(-1)
    flat = (rows - first) * score.shape[1] + cols
    value = values.index_select(0, flat)
    for order in range(3):
        value = value * factors[order].index_select(0, counts[order])
    if smoothing == "none":  # 0 for every pair but those sharing a 4-gram
        value = torch.where(counts[2] > 0, value, 0.0)
        score.zero_()
    values.index_put_((flat,), value)
    return score


def dense_bleu_star(
    matches: list[torch.Tensor],
    by_length: torch.Tensor,
    factors: torch.Tensor,
    smoothing: str,
) -> torch.Tensor:
    """`bleu_star` for dense match counts m_1..m_4 [rows x cols]: the same factorisation over
    orders, elementwise in the same operation order (so the same bits): every pair multiplies
    by every order's factor (1 for an order it does not share, as the sparse form skips it), so
    no shape depends on the data. `by_length` [rows x cols] and `factors` as there, already on
    the device."""
    score = torch.where(matches[0] > 0, by_length, 0.0)
    for order, counts in enumerate(matches[1:]):
        score = score * factors[order].index_select(0, counts.to(torch.int64).reshape(-1)).view(counts.shape)
    if smoothing == "none":
        score = torch.where(matches[-1] > 0, score, 0.0)
    return score


def weighted_bleu(
    rows: torch.Tensor,
    cols: torch.Tensor,
    counts: torch.Tensor,
    encoded: EncodedBleu,
    train_length_codes: torch.Tensor,
    tables: PrecisionTables,
) -> torch.Tensor:
    """BLEU with any weights [rows x cols] (float64) from the clipped match counts m_1..m_K
    [K, pairs] of the pairs sharing a unigram (`rows`, `cols`; `packed_counts`), as NLTK
    `sentence_bleu([s], x, weights, smoothing_function)`; the other pairs are 0 under every
    smoothing. The brevity penalty comes from the chunk's by-length table, the precisions from
    `tables`."""
    width = len(train_length_codes)
    lengths = encoded.lengths[rows]
    orders = torch.arange(1, counts.shape[0] + 1, device=lengths.device)
    totals = (lengths[:, None] - orders + 1).clamp(min=1)
    penalty = encoded.by_length[encoded.length_index[rows], train_length_codes[cols]]
    values = bleu_of_rows(tables, counts.t(), totals, lengths, penalty)
    score = torch.zeros((len(encoded), width), dtype=torch.float64, device=lengths.device)
    score[rows, cols] = values
    return score


def dense_weighted_bleu(
    matches: list[torch.Tensor],
    lengths: torch.Tensor,
    by_length: torch.Tensor,
    tables: PrecisionTables,
) -> torch.Tensor:
    """`weighted_bleu` for dense match counts [rows x cols] per order, every pair at once (no
    shape depends on the data); `by_length` [rows x cols] holds each pair's brevity penalty."""
    rows, cols = matches[0].shape
    counts = torch.stack([order.reshape(-1) for order in matches[: tables.orders]], dim=1).to(torch.int64)
    lengths = lengths[:, None].expand(rows, cols).reshape(-1)
    orders = torch.arange(1, tables.orders + 1, device=lengths.device)
    totals = (lengths[:, None] - orders + 1).clamp(min=1)
    return bleu_of_rows(tables, counts, totals, lengths, by_length.reshape(-1)).view(rows, cols)


def _stored_entries(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row, column, value) of every stored entry of a sparse COO matrix, each pair once."""
    matrix = matrix.coalesce()
    rows, cols = matrix.indices()
    return rows, cols, matrix.values()
