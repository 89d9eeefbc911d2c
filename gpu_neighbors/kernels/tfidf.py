"""TF-IDF cosine: the linear kernel of the TF-IDF + ridge baseline's features, on the tile pipeline.

k(x, s) = (cos_word(x, s) + cos_char(x, s)) / 2, in [0, 1]: the mean of the cosines of the two
l2-normalised blocks of `text.tfidf` (word 1-2-grams, char_wb 2-5-grams), which is the dot
product of the baseline's union of both vectorizers halved (`evaluation.baselines.tfidf_ridge`:
kernel ridge on this kernel, with its penalties halved, is that baseline). A text with no
vocabulary n-gram in a block contributes 0 for that block. The idf weights and the vocabulary
come from the training set (`depends_on_training_set`); the kernel brings its own analyzers, so
the scorer's tokenizer changes nothing (`uses_tokenizer` is false) and the signature names the
feature setup instead.

Exact, and the same bits on every device and tiling, by construction. A float dot product sums
its terms in an order that depends on the device and the tile, so each text's l2-normalised
block values v (0 <= v <= 1) are quantised down to whole numbers of 2^-26:
q = floor(v * 2^26). Flooring keeps each quantised block's norm at most 2^26 (checked exactly in
integers, and a vector that rounding in its normalisation pushed over is brought back by
lowering its largest entry); then every product q_x q_s is an integer below 2^52 and, by
Cauchy-Schwarz, every pair's sum of products over one block is at most 2^26 * 2^26 = 2^52, and
over both blocks at most 2^53. Every partial sum of non-negative integers below 2^53 is exact in
float64, in any order, so a tile -- the candidates' integer features times the training block's,
over both blocks at once, times 2^-53 (the product scaled by 2^-52 and halved) -- is the same
bits whatever the device, the chunk size or the block size. The products apply the 2^-53
themselves, to each term or to a sum as the library chooses: either way every value is a whole
number of 2^-53 of at most 1, which float64 holds exactly (far above its smallest normal).
The most frequent n-grams (`dense_head_size` of them) multiply as one dense matmul and the rest as
one sparse product (`core.sparse.add_product`): two partial sums of the same integers, so the
split changes no bit either, and the frequent n-grams, which make most of a sparse product's
work, run at matmul speed. The quantised features are made on the host, once per text, from that
text alone (`text.tfidf`).

Error against the unquantised cosines: with v 2^26 = q + e, 0 <= e < 1, a block's cosine drops by
2^-26 sum (e_x v_s + e_s v_x) - 2^-52 sum e_x e_s over the m features the pair shares, which is
at least 0 and below 2^-26 * 2 sqrt(m) (the v of m features sum to at most sqrt(m)). So k is
never above the exact value and below it by less than 2^-26 (sqrt(m_word) + sqrt(m_char)) <=
2^-25 sqrt(nnz): under 1e-6 for pairs sharing fewer than about 1,100 n-grams, and within
nnz * 2^-26 always.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.saved import pack_strings, unpack_strings
from gpu_neighbors.core.sparse import add_product, csr_matrix, row_block, transposed
from gpu_neighbors.core.tiling import BlockCache
from gpu_neighbors.kernels.base import Kernel
from gpu_neighbors.text.compiled import native
from gpu_neighbors.text.tfidf import CHAR_ORDERS, FEATURES_NAME, FeatureRows, TfidfFeatures, stacked

QUANTUM_BITS = 26
SCALE = float(1 << QUANTUM_BITS)
MAX_SQUARED_NORM = 1 << (2 * QUANTUM_BITS)
TILE_SCALE = 2.0 ** -(2 * QUANTUM_BITS + 1)  # 2^-52 per block's product, halved: the mean of two
# The features held dense: the most frequent n-grams (character bigrams such as " t" are in nearly
# every text) make most of a sparse product's work, as each is multiplied for every pair that
# holds it; a dense product does those at matmul speed. At most 256 (a saved head column is one
# byte). How many, by the device the training set is fitted on: on the CPU, whose sparse product
# writes straight into the dense tile, 64 (a tile's ns a pair, 1,024 x 3,072 against 50,000
# spliced HUSE texts / 1,538 x 2,000 spliced headlines, one thread: 0 features 16.3 / 15.5, 16:
# 13.9 / 14.0, 64: 11.8-12.6 / 12.1-12.2, 96: 11.6 / 12.1, 128: 12.3 / 12.4, 256: 15.2 / 17.2);
# elsewhere all 256, as a dense product is cheap next to a sparse one on a GPU (not yet measured
# there). 512 bytes a training text on the CPU.
MAX_HEAD_FEATURES = 256
HEAD_FEATURES = {"cpu": 64}


def dense_head_size(device: torch.device) -> int:
    """How many of the most frequent features a training set fitted on `device` holds dense."""
    return HEAD_FEATURES.get(device.type, MAX_HEAD_FEATURES)

# TfidfFeatures.state's tables, as a saved encoding names them.
TABLES = ("bigrams", "alphabet", "idf", *(f"char{order}" for order in CHAR_ORDERS))


def quantise(rows: FeatureRows, word_features: int) -> np.ndarray:
    """floor(v * 2^26) of every stored value of l2-normalised rows (float64 holding integers),
    each text's word block and char block with a squared norm of at most 2^52, checked exactly."""
    quantised = np.floor(rows.values * SCALE).astype(np.int64)
    block = rows.rows * 2 + (rows.indices >= word_features)
    # Summed in float64 (np.add.at on int64 is 10x slower), exactly: the rows are l2-normalised
    # blocks, so a block's sum is at most 2^52 (1 + rounding) and every partial sum is an
    # integer below 2^53.
    squares = np.bincount(block, weights=(quantised * quantised).astype(np.float64),
                          minlength=2 * len(rows)).astype(np.int64)
    for over in np.flatnonzero(squares > MAX_SQUARED_NORM).tolist():
        members = np.flatnonzero(block == over)
        while squares[over] > MAX_SQUARED_NORM:
            largest = members[np.argmax(quantised[members])]
            squares[over] -= 2 * int(quantised[largest]) - 1  # q^2 - (q - 1)^2
            quantised[largest] -= 1
    return quantised.astype(np.float64)


def _sparse_rows(rows: FeatureRows) -> torch.Tensor:
    """The rows as a torch sparse CSR tensor (the host arrays shared, not copied)."""
    return csr_matrix(torch.from_numpy(rows.indptr), torch.from_numpy(rows.indices), torch.from_numpy(rows.values),
                      (len(rows), max(rows.num_features, 1)))


@dataclass(frozen=True)
class EncodedTfidf:
    """A chunk of texts' quantised TF-IDF features (float64 integers): the frequent ones dense
    [rows x head size], the others sparse CSR [rows x features]."""

    head: torch.Tensor
    tail: torch.Tensor

    def __len__(self) -> int:
        return int(self.head.shape[0])


@dataclass(frozen=True)
class HeadSplit:
    """Which features are held dense: `position[f]` is feature f's column in the head, or -1;
    `size` of them."""

    position: np.ndarray
    size: int

    @classmethod
    def of(cls, rows: FeatureRows, size: int) -> HeadSplit:
        """The `size` features in the most training texts (ties: the lower id)."""
        frequency = np.bincount(rows.indices, minlength=rows.num_features)
        return cls.of_features(np.lexsort((np.arange(frequency.size), -frequency))[:size], frequency.size)

    @classmethod
    def of_features(cls, features: np.ndarray, num_features: int) -> HeadSplit:
        """Distinct feature ids `features` held dense, in that column order."""
        if np.unique(features).size != features.size or not np.all((features >= 0) & (features < num_features)):
            raise ValueError("the head's features are not distinct feature ids")
        position = np.full(num_features, -1, dtype=np.int64)
        position[features] = np.arange(features.size)
        return cls(position, int(features.size))

    @property
    def features(self) -> np.ndarray:
        """The feature of each head column."""
        held = np.flatnonzero(self.position >= 0)
        return held[np.argsort(self.position[held])]

    def quantised(self, rows: FeatureRows, word_features: int) -> tuple[np.ndarray, FeatureRows]:
        """`split(rows, quantise(rows, word_features))`: in one compiled pass where the install
        built it (`text.compiled`: the same bits), else by numpy."""
        if native is None:
            return self.split(rows, quantise(rows, word_features))
        head, tail = self._outputs(rows)
        native.quantise_split(rows.indptr, rows.indices, rows.values, word_features, SCALE, MAX_SQUARED_NORM,
                              self.position, head, *tail)
        return head, _kept(tail, rows.num_features)

    def encoded(self, features: TfidfFeatures, texts: Sequence[str]) -> tuple[np.ndarray, FeatureRows]:
        """`quantised(features.transform(texts), features.word_features)`: where the install built
        the compiled loops, each part of the texts' counts weighed, quantised and split row by row
        (`weigh_quantise_split`: the same bits, without the chunk's weighed rows in between)."""
        if native is None:
            return self.quantised(features.transform(texts), features.word_features)
        parts = [self._weighed_quantised(counts, features) for counts in features.counts(texts)]
        heads = [head for head, _ in parts]
        head = heads[0] if len(heads) == 1 else np.concatenate(heads) if heads else np.zeros((0, self.size))
        return head, stacked([tail for _, tail in parts], lambda tail: tail, features.num_features)

    def _weighed_quantised(self, counts: FeatureRows, features: TfidfFeatures) -> tuple[np.ndarray, FeatureRows]:
        assert native is not None
        head, tail = self._outputs(counts)
        top = 1  # the tf table's length so far; the pass says when a count needs it longer
        while top := native.weigh_quantise_split(counts.indptr, counts.indices, counts.values,
                                                 features.tf_of_count(top), features.idf, features.word_features,
                                                 SCALE, MAX_SQUARED_NORM, self.position, head, *tail):
            pass
        return head, _kept(tail, counts.num_features)

    def _outputs(self, rows: FeatureRows) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Room for the compiled passes' head (zeros) and tail (indptr, indices, values) of `rows`."""
        tail = (np.empty(len(rows) + 1, dtype=np.int64), np.empty(rows.indices.size, dtype=np.int64),
                np.empty(rows.indices.size))
        return np.zeros((len(rows), self.size)), tail

    def split(self, rows: FeatureRows, values: np.ndarray) -> tuple[np.ndarray, FeatureRows]:
        """(the head as a dense [rows x size] array, the other entries as rows)."""
        columns = self.position[rows.indices]
        in_head = columns >= 0
        head = np.zeros((len(rows), self.size))
        head.reshape(-1)[(rows.rows * self.size + columns)[in_head]] = values[in_head]
        in_tail = ~in_head
        kept = np.zeros(in_tail.size + 1, dtype=np.int64)
        np.cumsum(in_tail, out=kept[1:])
        tail = FeatureRows(kept[rows.indptr], rows.indices[in_tail], values[in_tail], rows.num_features)
        return head, tail


def _kept(tail: tuple[np.ndarray, np.ndarray, np.ndarray], num_features: int) -> FeatureRows:
    """The tail rows a compiled pass wrote into `_outputs`' room."""
    indptr, indices, values = tail
    stored = int(indptr[-1])
    return FeatureRows(indptr, indices[:stored], values[:stored], num_features)


class TfidfKernel(Kernel[EncodedTfidf]):
    """Mean cosine of word 1-2-gram and char_wb 2-5-gram TF-IDF vectors (scikit-learn's rules)."""

    name = "tfidf"
    # The paper has none: chosen on its development data (HUSE summarization) to keep the share
    # of neighbour pairs that the paper's thresholds keep there: 21.8% of the off-diagonal pairs
    # reach 0.03, against 22.0% for BLEU* at 0.08 and 22.5% for ROUGE-L at 0.06 (leave-one-out
    # tuning of tau there picks 0.035). See docs/method.md, Kernels.
    default_tau = 0.03
    uses_tokenizer = False
    # Exact: a sum of integers times 2^-53 (module docstring); one ulp of 1, so that a threshold
    # still never lands on a similarity.
    SIMILARITY_ERROR = 2.0**-52

    def _fit(self, texts: list[str]) -> None:
        self.features = TfidfFeatures()
        rows = self.features.fit(texts)
        self._head = HeadSplit.of(rows, dense_head_size(self.device))
        head, tail = self._head.quantised(rows, self.features.word_features)
        self._hold(torch.from_numpy(head), tail)

    def saved_encoding(self) -> dict[str, torch.Tensor]:
        """The feature tables and the training texts' quantised features (integers below 2^26,
        so int32): the head's non-zero entries with their head column (one byte: at most
        MAX_HEAD_FEATURES = 256), the tail as CSR rows."""
        super().saved_encoding()
        unigrams, tables = self.features.state()
        head = self._train_head.cpu()
        present = head != 0
        train = self._train.cpu()
        unigram_bytes, unigram_ends = pack_strings(unigrams)
        return {"unigrams": unigram_bytes, "unigram_ends": unigram_ends,
                **{name: torch.from_numpy(table) for name, table in tables.items()},
                "head_features": torch.from_numpy(self._head.features),
                "head_rows": torch.cat([torch.zeros(1, dtype=torch.int64), present.sum(dim=1).cumsum(0)]),
                "head_columns": present.nonzero()[:, 1].to(torch.uint8),
                "head_values": head[present].to(torch.int32),
                "tail_rows": torch.from_numpy(self._train_rows),
                "tail_features": train.col_indices().to(torch.int32),
                "tail_values": train.values().to(torch.int32)}

    def _load(self, texts: list[str], tensors: Mapping[str, torch.Tensor]) -> None:
        try:
            unigrams = unpack_strings(tensors["unigrams"], tensors["unigram_ends"])
            self.features = TfidfFeatures.from_state(unigrams, {name: tensors[name].numpy() for name in TABLES})
            head_features = tensors["head_features"].numpy()
            head_rows, tail_rows = (_row_offsets(tensors[name], len(texts)) for name in ("head_rows", "tail_rows"))
            head_columns, head_values = tensors["head_columns"], tensors["head_values"]
            tail_features, tail_values = tensors["tail_features"], tensors["tail_values"]
        except KeyError as error:
            raise ValueError(f"the tfidf encoding has no tensor {error}") from None
        num_features = self.features.num_features
        if head_features.dtype != np.int64 or head_features.size > MAX_HEAD_FEATURES:
            raise ValueError(f"the tfidf head features are not at most {MAX_HEAD_FEATURES} int64 feature ids")
        self._head = HeadSplit.of_features(head_features, num_features)
        if (head_columns.dtype != torch.uint8 or head_values.dtype != torch.int32
                or head_columns.shape != (int(head_rows[-1]),) or head_values.shape != head_columns.shape
                or bool((head_columns.long() >= head_features.size).any())):
            raise ValueError("the tfidf head entries do not fit its rows and columns")
        if (tail_features.dtype != torch.int32 or tail_values.dtype != torch.int32
                or tail_features.shape != (int(tail_rows[-1]),) or tail_values.shape != tail_features.shape
                or bool(((tail_features < 0) | (tail_features >= num_features)).any())):
            raise ValueError("the tfidf tail entries do not fit its rows and features")
        head = torch.zeros((len(texts), head_features.size), dtype=torch.float64)
        entry_rows = torch.repeat_interleave(torch.arange(len(texts)), torch.from_numpy(np.diff(head_rows)))
        head[entry_rows, head_columns.long()] = head_values.double()
        # torch's conversions: numpy's astype of these 10^7 entries took 4x as long
        self._hold(head, FeatureRows(tail_rows, tail_features.long().numpy(), tail_values.double().numpy(),
                                     num_features))

    def _hold(self, head: torch.Tensor, tail: FeatureRows) -> None:
        """Keep the training texts' features on the device: the head dense, the tail CSR."""
        self._train_head = head.to(self.device)
        self._train_rows = tail.indptr  # host row offsets: cutting a block reads no device
        self._train = _sparse_rows(tail).to(self.device)
        self._columns: BlockCache[torch.Tensor] = BlockCache()

    def _encode(self, texts: Sequence[str]) -> EncodedTfidf:
        head, tail = self._head.encoded(self.features, texts)
        return EncodedTfidf(torch.from_numpy(head).to(self.device), _sparse_rows(tail).to(self.device))

    def _encode_train(self, start: int, stop: int) -> EncodedTfidf:
        return EncodedTfidf(self._train_head[start:stop], self._block(start, stop))

    def _block(self, start: int, stop: int) -> torch.Tensor:
        return row_block(self._train, start, stop, self._train_rows)

    def _block_columns(self, start: int, stop: int) -> torch.Tensor:
        """The tail of training texts start..stop-1 transposed (CSR [features x texts]), made
        once per block and kept: every chunk of candidates multiplies by the same blocks, and
        transposing one was a sixth of a tile's time (TF-IDF, 1,572 x 2,000, one thread). At
        most one copy of the tail is kept (`BlockCache`)."""
        return self._columns.made(start, stop, lambda: transposed(self._block(start, stop)))

    def tile(self, encoded: EncodedTfidf, start: int, stop: int) -> torch.Tensor:
        """Dense head product plus sparse tail product: both sums of non-negative integers whose
        total is at most 2^53 (2^52 a block), so exact in any order, and so is their sum; each
        scaled by 2^-53 inside its product (exact, and no pass over the tile after: 2-4% of a
        tile, one thread)."""
        products = torch.empty((len(encoded), stop - start), dtype=torch.float64, device=self.device)
        products.addmm_(encoded.head, self._train_head[start:stop].t(), beta=0, alpha=TILE_SCALE)
        return add_product(products, encoded.tail, self._block_columns(start, stop), scale=TILE_SCALE)

    def pair_bytes(self) -> int:
        # Worst case, every pair shares an n-gram (common: char bigrams such as " t" are in
        # nearly every text): the dense float64 tile (the head's product), on a GPU the tail
        # product's CSR result added into it (int64 column, float64 value; on the CPU the product
        # writes into the tile), and a float64 a pair for the product's own work space. Peak RSS
        # measured on the CPU for a tile of 6 Mi pairs of spliced HUSE texts, with the CSR result:
        # 23 bytes a pair.
        return 8 + 16 + 8

    @property
    def depends_on_training_set(self) -> bool:
        return True  # vocabulary and idf

    def settings(self) -> dict[str, str]:
        return {"features": FEATURES_NAME}


def _row_offsets(offsets: torch.Tensor, rows: int) -> np.ndarray:
    """CSR row offsets of `rows` rows (int64, from 0, never decreasing), as saved."""
    values = offsets.numpy()
    if values.dtype != np.int64 or values.shape != (rows + 1,) or values[0] != 0 or np.any(np.diff(values) < 0):
        raise ValueError(f"the tfidf encoding's row offsets are not those of {rows} texts")
    return values
