"""TF-IDF features of word 1-2-grams and char_wb 2-5-grams, as scikit-learn makes them.

The features of `evaluation.baselines.tfidf_ridge`: the union of
    TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\\b\\w+\\b")
    TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)
written here from scikit-learn's documentation (User Guide, "Text feature extraction", and the
`CountVectorizer` / `TfidfVectorizer` / `TfidfTransformer` references,
https://scikit-learn.org/stable/modules/feature_extraction.html#text-feature-extraction), so the
package needs no scikit-learn (the tests compare the two):

- preprocessing: `str.lower` (lowercase=True; no accent stripping);
- word analyzer: the token pattern's matches (runs of word characters), then every 1-gram and
  every 2-gram of consecutive tokens, joined by one space;
- char_wb analyzer: "creates character n-grams only from text inside word boundaries; n-grams at
  the edges of words are padded with space": each whitespace-split word w becomes " w ", and its
  n-grams for n = 2..5 are its substrings of length n; a padded word shorter than n gives itself
  once and no longer n-grams (scikit-learn's `_char_wb_ngrams` counts a short word once), which
  is the same as taking n = 2..min(5, len(" w "));
- vocabulary: every n-gram of the training texts (min_df=1, max_df=1.0, no max_features);
- idf (smooth_idf=True): idf(t) = ln((1 + n) / (1 + df(t))) + 1, n training texts, df(t) the
  number of them holding t;
- tf (sublinear_tf=True): 1 + ln(count of t in the text); n-grams outside the vocabulary are
  dropped;
- value tf * idf, then each analyzer's block l2-normalised per text (norm="l2"); a text with no
  vocabulary n-gram in a block keeps that block all zero.

Everything is batched: a chunk of texts is lower-cased (`str.lower` per text, or once of them
joined where that is the same: `CodePoints.lowered`) and joined into one array of code points,
split into tokens and words by character class (`text.characters`: the classes `re` and
`str.split` use, looked up per code point), and n-grams become integer ids
order by order (an n-gram is its (n-1)-gram's id and its last character; a token is walked
character by character through the prefixes of the vocabulary's words), each id found in a
sorted table of the training set (`np.unique` at fit; at transform a hash index over the table,
`text.key_index`, which gives the same position as a binary search, no hashing of n-grams into
buckets), so no Python runs per n-gram, per token or per character. Feature ids do not depend
on the order of the training texts (every table is sorted by content), and a text's values
depend only on that text and the idf weights: the squares of its block are summed in feature
order, and every logarithm comes from `math.log` of a distinct count, not a vectorised log whose
result could depend on where an element falls in an array. Ids: word unigrams, then word
bigrams, then char_wb 2-, 3-, 4- and 5-grams (`TfidfFeatures.word_features` = where the char_wb
block starts).
"""
from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from gpu_neighbors.text.characters import SPACE as SPACE_CLASS, WORD, CodePoints, Runs, classes
from gpu_neighbors.text.compiled import native
from gpu_neighbors.text.key_index import KeyIndex, concatenated

WORD_PATTERN = r"(?u)\b\w+\b"  # the baseline's token_pattern: maximal runs of word characters
WORD_ORDERS = (1, 2)
CHAR_ORDERS = (2, 3, 4, 5)
FEATURES_NAME = "word1-2+char_wb2-5"
SPACE = ord(" ")
# Texts whose n-grams are counted at once: the per-position int64 arrays of a chunk (a few dozen
# bytes a character) stay small; 10^6 training texts counted at once peaked at 16.5 GB resident.
COUNT_TEXTS = 1 << 14
# Room for n-gram entries the compiled count starts with, per character (a word of n >= 3
# characters and its space make 4n + 1 at most, before any two are the same); grown where short.
ENTRIES_PER_CHARACTER = 4


@dataclass(frozen=True)
class FeatureRows:
    """Sparse rows (CSR on the host): row r holds `indices[indptr[r]:indptr[r + 1]]` (sorted
    feature ids, int64) with `values` (float64)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    num_features: int

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @functools.cached_property
    def rows(self) -> np.ndarray:
        """The row of every stored entry (made once: weighting, quantising and splitting read it)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.indptr))

    def dense(self) -> np.ndarray:
        """[rows, num_features] float64 (for tests and small sets)."""
        matrix = np.zeros((len(self), self.num_features))
        matrix[self.rows, self.indices] = self.values
        return matrix


@dataclass(frozen=True)
class Grams:
    """Every vocabulary n-gram occurrence of a chunk: its text and its feature id, in parts
    (one an n-gram order) each in text order."""

    rows: list[np.ndarray]
    features: list[np.ndarray]


@dataclass(frozen=True)
class Lookups:
    """What `transform` looks n-grams up in, made from the fitted fields on first use (a scorer
    loaded from them makes them too): each code point's alphabet id, the vocabulary's words as a
    trie (`_word_trie`), and a hash index of the bigram table and of each char n-gram table."""

    char_ids: np.ndarray  # [every code point] int32: alphabet id, or -1
    space_id: int
    word_nodes: list[KeyIndex]
    word_ends: list[np.ndarray]
    bigrams: KeyIndex
    chars: list[KeyIndex]

    @functools.cached_property
    def count_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The trie's node indexes, the bigrams' and each char order's, as the compiled count
        reads them (`key_index.concatenated`)."""
        return concatenated([*self.word_nodes, self.bigrams, *self.chars])

    @functools.cached_property
    def trie_tables(self) -> tuple[np.ndarray, ...]:
        """The word trie as the compiled walk reads it: every depth's word ends concatenated,
        each depth's (start, size) in them, then the node indexes (`key_index.concatenated`)."""
        sizes = np.array([ends.size for ends in self.word_ends], dtype=np.int64)
        end_bounds = np.stack([np.cumsum(sizes) - sizes, sizes], axis=1) if sizes.size else np.zeros((0, 2), np.int64)
        ends = np.concatenate(self.word_ends) if self.word_ends else np.zeros(0, dtype=np.int64)
        return (ends.astype(np.int64), np.ascontiguousarray(end_bounds, dtype=np.int64),
                *concatenated(self.word_nodes))


class TfidfFeatures:
    """The two analyzers' vocabularies and idf weights from a training set (`fit`), and the
    l2-normalised TF-IDF rows of any texts over them (`transform`)."""

    def __init__(self) -> None:
        self.unigrams: dict[str, int] = {}
        self.bigram_table = np.zeros(0, dtype=np.int64)  # sorted keys first * V + second
        self.alphabet = np.zeros(0, dtype=np.int64)  # sorted code points of the training texts
        # Sorted keys ((n-1)-gram id * alphabet + character) per n: 1 (the alphabet's ids), then CHAR_ORDERS.
        self.char_tables: list[np.ndarray] = []
        self.char_offsets: list[int] = []  # first feature id of each of CHAR_ORDERS
        self.word_features = 0
        self.num_features = 0
        self.idf = np.zeros(0)
        self._lookups: Lookups | None = None
        self._tf = np.zeros(1)  # 1 + ln(count) by count, made as far as asked (`tf_of_count`)

    # -- fitting --------------------------------------------------------------------------

    def fit(self, texts: Sequence[str]) -> FeatureRows:
        """Learn the vocabularies and idf from `texts`; return their rows."""
        self._lookups = None
        lowered = [text.lower() for text in texts]
        points = CodePoints.of(lowered)
        kinds = classes(points.codes)
        tokens, words = points.runs((kinds & WORD) > 0), points.runs((kinds & SPACE_CLASS) == 0)
        joined = "".join(lowered)  # one code point per position of `points`
        names = sorted({joined[start:start + length] for start, length
                        in zip(tokens.starts.tolist(), tokens.lengths.tolist())})
        self.unigrams = {name: index for index, name in enumerate(names)}
        pads = [SPACE] if words.starts.size else []
        self.alphabet = np.unique(np.concatenate([points.codes[(kinds & SPACE_CLASS) == 0], pads])).astype(np.int64)
        self.char_tables = [np.arange(self.alphabet.size, dtype=np.int64)]
        words_only = self._lookups_of(bigrams=np.zeros(0, dtype=np.int64), char_tables=[])
        char_ids = words_only.char_ids[points.codes].astype(np.int64)
        bigram_keys, _, _ = self._bigram_keys(self._unigram_ids(char_ids, tokens, words_only), tokens)  # all known
        self.bigram_table = np.unique(bigram_keys)

        def number(order: int, keys: np.ndarray) -> np.ndarray:
            ids = np.full(keys.size, -1, dtype=np.int64)
            inside = keys >= 0
            table, ids[inside] = _numbered(keys[inside])
            self.char_tables.append(table)
            return ids

        for _ in self._char_walk(_padded_words(char_ids, kinds, words, words_only.space_id), number):
            pass
        self._number_features()

        parts = self.counts(texts)
        df = np.zeros(self.num_features, dtype=np.int64)
        for part in parts:
            df += np.bincount(part.indices, minlength=self.num_features)
        self.idf = _by_distinct(df, lambda value: math.log((1 + len(texts)) / (1 + value)) + 1)
        return self._weighted_rows(parts)

    def _number_features(self) -> None:
        """Feature ids from the tables: word unigrams, word bigrams, then each char order's."""
        self.word_features = len(self.unigrams) + self.bigram_table.size
        offsets = np.cumsum([self.word_features, *(table.size for table in self.char_tables[1:])]).tolist()
        self.char_offsets = offsets[:-1]
        self.num_features = offsets[-1]

    def state(self) -> tuple[list[str], dict[str, np.ndarray]]:
        """What `fit` learned, for a saved scorer: the word unigrams (sorted: each one's id is its
        position) and the other tables and the idf, by name (`from_state` reads them back)."""
        tables = {"bigrams": self.bigram_table, "alphabet": self.alphabet, "idf": self.idf,
                  **{f"char{order}": table for order, table in zip(CHAR_ORDERS, self.char_tables[1:])}}
        return sorted(self.unigrams), tables

    @classmethod
    def from_state(cls, unigrams: list[str], tables: dict[str, np.ndarray]) -> TfidfFeatures:
        """The features `state` describes; ValueError where its tables are not such a state."""
        features = cls()
        if any(later <= earlier for earlier, later in zip(unigrams, unigrams[1:])):
            raise ValueError("the word unigrams are not sorted and distinct")
        features.unigrams = {name: index for index, name in enumerate(unigrams)}
        keys = [tables[name] for name in ("bigrams", "alphabet", *(f"char{order}" for order in CHAR_ORDERS))]
        if any(table.dtype != np.int64 or table.ndim != 1 or np.any(np.diff(table) <= 0) for table in keys):
            raise ValueError("a feature table is not sorted distinct int64 keys")
        features.bigram_table, features.alphabet = keys[0], keys[1]
        features.char_tables = [np.arange(features.alphabet.size, dtype=np.int64), *keys[2:]]
        features._number_features()
        features.idf = tables["idf"]
        if features.idf.dtype != np.float64 or features.idf.shape != (features.num_features,):
            raise ValueError(f"the idf weights are not {features.num_features} float64 values")
        # ln((1 + n) / (1 + df)) + 1 >= 1: a weight that is not a positive number (-1 looped
        # forever in the kernel's quantising, NaN made every similarity garbage) is a forgery
        if not (np.isfinite(features.idf) & (features.idf > 0)).all():
            raise ValueError("the idf weights are not all finite positive numbers")
        return features

    def transform(self, texts: Sequence[str]) -> FeatureRows:
        """The rows of `texts` over the fitted vocabularies (n-grams outside them dropped)."""
        return self._weighted_rows(self.counts(texts))

    def counts(self, texts: Sequence[str]) -> list[FeatureRows]:
        """The occurrence counts (float64) that `transform` weighs of every vocabulary n-gram per
        text, sorted by feature, in parts of COUNT_TEXTS texts (a text's counts depend on it
        alone)."""
        return [self._chunk_counts(texts[first:first + COUNT_TEXTS]) for first in range(0, len(texts), COUNT_TEXTS)]

    # -- lookups ------------------------------------------------------------------------------

    def lookups(self) -> Lookups:
        """The fitted tables' lookups, made on first use."""
        lookups = getattr(self, "_lookups", None)
        if lookups is None:
            lookups = self._lookups = self._lookups_of(self.bigram_table, self.char_tables[1:])
        return lookups

    def _lookups_of(self, bigrams: np.ndarray, char_tables: list[np.ndarray]) -> Lookups:
        char_ids = np.full(sys.maxunicode + 1, -1, dtype=np.int32)
        char_ids[self.alphabet] = np.arange(self.alphabet.size, dtype=np.int32)
        nodes, ends = _word_trie(sorted(self.unigrams, key=self.unigrams.__getitem__), char_ids, self.alphabet.size)
        return Lookups(char_ids, int(char_ids[SPACE]), nodes, ends, KeyIndex(bigrams),
                       [KeyIndex(table) for table in char_tables])

    # -- n-grams ----------------------------------------------------------------------------

    def _unigram_ids(self, char_ids: np.ndarray, tokens: Runs, lookups: Lookups) -> np.ndarray:
        """Each token's word id (-1: not in the vocabulary), walked one character a step
        through the vocabulary's trie."""
        found = np.full(tokens.starts.size, -1, dtype=np.int64)
        size = max(self.alphabet.size, 1)
        if native is not None:  # token by token in C: the same walk
            native.word_ids(np.ascontiguousarray(char_ids, dtype=np.int32), tokens.starts.astype(np.int64),
                            tokens.lengths.astype(np.int64), size, *lookups.trie_tables, found)
            return found
        active = np.arange(tokens.starts.size, dtype=np.int64) if lookups.word_ends else found[:0]
        nodes = char_ids[tokens.starts[active]]
        depth = 1
        while active.size:
            ending = tokens.lengths[active] == depth
            node = nodes[ending]
            found[active[ending]] = np.where(node >= 0, lookups.word_ends[depth - 1][node], -1)
            going = ~ending & (nodes >= 0)
            active, nodes = active[going], nodes[going]
            if depth == len(lookups.word_ends):
                break
            following = char_ids[tokens.starts[active] + depth]
            known = following >= 0
            active = active[known]
            nodes = lookups.word_nodes[depth - 1].find(nodes[known] * size + following[known])
            depth += 1
        return found

    def _bigram_keys(self, ids: np.ndarray, tokens: Runs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Key first * V + second of every pair of consecutive tokens of one text, its text, and
        whether both tokens are in the vocabulary."""
        rows = tokens.texts
        follows = rows[1:] == rows[:-1]  # token i + 1 is in the same text as token i
        first, second = ids[:-1][follows], ids[1:][follows]
        known = (first >= 0) & (second >= 0)
        return first * max(len(self.unigrams), 1) + second, rows[:-1][follows], known

    def _char_walk(self, padded: np.ndarray,
                   number: Callable[[int, np.ndarray], np.ndarray]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """For each of CHAR_ORDERS, the positions of `padded` (`_padded_words`) where an n-gram
        of the vocabulary starts, and its id: `number(order, keys)` numbers n-grams by their keys,
        (n-1)-gram id * alphabet + last character (-1 where that character is unknown or a
        separator: the n-gram would leave its padded word), asked only where the (n-1)-gram was
        found; -1: absent."""
        size = max(self.alphabet.size, 1)
        positions = np.flatnonzero(padded >= 0)
        ids = padded[positions]
        for order in CHAR_ORDERS:
            following = padded[order - 1:][positions]
            ids = number(order, np.where(following >= 0, ids * size + following, -1))
            found = ids >= 0
            positions, ids = positions[found], ids[found]
            yield positions, ids

    def _looked_up_walk(self, padded: np.ndarray, lookups: Lookups) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """`_char_walk` with each order's n-grams found in the fitted tables."""
        indexes = dict(zip(CHAR_ORDERS, lookups.chars))
        yield from self._char_walk(padded, lambda order, keys: indexes[order].find(keys))

    def _word_grams(self, char_ids: np.ndarray, tokens: Runs, lookups: Lookups) -> Grams:
        ids = self._unigram_ids(char_ids, tokens, lookups)
        keys, bigram_rows, known = self._bigram_keys(ids, tokens)
        bigrams = lookups.bigrams.find(keys[known])
        kept = ids >= 0
        found = bigrams >= 0
        return Grams([tokens.texts[kept], bigram_rows[known][found]], [ids[kept], bigrams[found] + len(self.unigrams)])

    def _char_grams(self, char_ids: np.ndarray, kinds: np.ndarray, words: Runs, lookups: Lookups) -> Grams:
        padded = _padded_words(char_ids, kinds, words, lookups.space_id)
        text_of_position = np.repeat(words.texts, words.lengths + 3)
        rows, features = [], []
        for (positions, ids), offset in zip(self._looked_up_walk(padded, lookups), self.char_offsets):
            rows.append(text_of_position[positions])
            features.append(ids + offset)
        return Grams(rows, features)

    def _chunk_counts(self, texts: Sequence[str]) -> FeatureRows:
        num_texts = len(texts)
        lookups = self.lookups()
        points = CodePoints.lowered(texts)
        kinds = classes(points.codes)
        if native is not None:  # one pass per text in C, from its characters to its row
            return self._compiled_counts(points, kinds, lookups.char_ids[points.codes], lookups)
        char_ids = lookups.char_ids[points.codes].astype(np.int64)
        words = self._word_grams(char_ids, points.runs((kinds & WORD) > 0), lookups)
        chars = self._char_grams(char_ids, kinds, points.runs((kinds & SPACE_CLASS) == 0), lookups)
        rows = np.concatenate(words.rows + chars.rows)
        features = np.concatenate(words.features + chars.features)
        width = max(self.num_features, 1)
        keys, counts = _distinct(rows * width + features)
        indptr = np.searchsorted(keys, np.arange(num_texts + 1, dtype=np.int64) * width)
        return FeatureRows(indptr.astype(np.int64), keys % width, counts.astype(np.float64), self.num_features)

    def _compiled_counts(self, points: CodePoints, kinds: np.ndarray, char_ids: np.ndarray,
                         lookups: Lookups) -> FeatureRows:
        """`_chunk_counts` by `native.count_texts` (the same rows), into outputs that grow where
        the texts need more room than ENTRIES_PER_CHARACTER."""
        assert native is not None
        texts = points.bounds.size - 1
        ends, end_bounds = lookups.trie_tables[:2]
        indptr = np.zeros(texts + 1, dtype=np.int64)
        room = ENTRIES_PER_CHARACTER * points.codes.size + 16
        indices, counts = np.empty(room, dtype=np.int64), np.empty(room)
        done = 0
        while True:
            done = native.count_texts(char_ids, kinds, WORD, SPACE_CLASS, points.bounds, done, max(self.alphabet.size, 1),
                                      lookups.space_id, ends, end_bounds, *lookups.count_tables, len(self.unigrams),
                                      np.asarray(self.char_offsets, dtype=np.int64), indptr, indices, counts)
            if done == texts:
                break
            kept = int(indptr[done])
            indices = np.concatenate([indices[:kept], np.empty(2 * indices.size, dtype=np.int64)])
            counts = np.concatenate([counts[:kept], np.empty(2 * counts.size)])
        stored = int(indptr[-1])
        return FeatureRows(indptr, indices[:stored], counts[:stored], self.num_features)

    def _weighted_rows(self, parts: list[FeatureRows]) -> FeatureRows:
        """The parts' counts weighted and stacked into one set of rows."""
        return stacked(parts, self._weighted, self.num_features)

    def _weighted(self, counts: FeatureRows) -> FeatureRows:
        """Sublinear tf times idf, each block l2-normalised per text."""
        if native is not None:  # the same operations in the same order, in one pass
            values = np.empty(counts.values.size)
            top = 1  # the table's length so far; weigh_rows says when a count needs it longer
            while top := native.weigh_rows(counts.indptr, counts.indices, counts.values, self.tf_of_count(top),
                                           self.idf, self.word_features, values):
                pass
            return FeatureRows(counts.indptr, counts.indices, values, self.num_features)
        whole = counts.values.astype(np.int64)
        tf = self.tf_of_count(int(whole.max(initial=0)) + 1)[whole]
        values = tf * self.idf[counts.indices]
        # Squares summed per (text, block) in feature order: a text's norm depends on it alone.
        block = counts.rows * 2 + (counts.indices >= self.word_features)
        norms = np.sqrt(np.bincount(block, weights=values * values, minlength=2 * len(counts)))
        values = values / norms[block]  # a stored entry's block has a positive norm
        return FeatureRows(counts.indptr, counts.indices, values, self.num_features)

    def tf_of_count(self, top: int) -> np.ndarray:
        """1 + ln(count) (`math.log`) of every count below `top`, indexed by count: the one tf
        table of the compiled and numpy passes, made once, and longer where a chunk holds a larger
        count."""
        table = getattr(self, "_tf", np.zeros(1))  # a scorer pickled before the table was kept
        if table.size < top:
            size = max(top, 2 * table.size, 256)
            table = self._tf = np.array([0.0, *(1 + math.log(count) for count in range(1, size))])
        return table

    # -- names (tests, explanations) ----------------------------------------------------------

    def feature_names(self) -> list[str]:
        """The n-gram of every feature id, as scikit-learn's `get_feature_names_out` writes it
        (one list for both blocks: word features first)."""
        unigrams = sorted(self.unigrams, key=self.unigrams.__getitem__)
        size = max(len(unigrams), 1)
        names = unigrams + [f"{unigrams[key // size]} {unigrams[key % size]}" for key in self.bigram_table.tolist()]
        letters = [chr(code) for code in self.alphabet.tolist()]
        previous = letters
        for table in self.char_tables[1:]:
            current = [previous[key // len(letters)] + letters[key % len(letters)] for key in table.tolist()]
            names += current
            previous = current
        return names


def stacked(parts: list[FeatureRows], convert: Callable[[FeatureRows], FeatureRows], num_features: int) -> FeatureRows:
    """The parts (rows over `num_features`), each converted, stacked into one set of rows; each
    part is dropped from `parts` once copied, so the parts and the rows are not both held whole."""
    if len(parts) == 1:
        return convert(parts.pop())
    total = sum(part.indices.size for part in parts)
    indptr, indices, values = [np.zeros(1, dtype=np.int64)], np.empty(total, dtype=np.int64), np.empty(total)
    start = 0
    while parts:
        part = convert(parts.pop(0))
        stop = start + part.indices.size
        indices[start:stop], values[start:stop] = part.indices, part.values
        indptr.append(part.indptr[1:] + start)
        start = stop
    return FeatureRows(np.concatenate(indptr), indices, values, num_features)


def _padded_words(char_ids: np.ndarray, kinds: np.ndarray, words: Runs, space_id: int) -> np.ndarray:
    """The alphabet ids of every word padded as " w " (char_wb), each followed by a separator
    (-1, as an unknown character), all concatenated: an n-gram that reaches a -1 leaves its
    padded word. Every non-space character is in exactly one word, in order, so word r's
    characters go to its block after its opening pad."""
    block_lengths = words.lengths + 3
    block_ends = np.cumsum(block_lengths)
    padded = np.full(int(block_ends[-1]) if block_ends.size else 0, space_id, dtype=np.int64)
    padded[block_ends - 1] = -1
    in_words = np.flatnonzero((kinds & SPACE_CLASS) == 0)
    word_of_char = np.repeat(np.arange(words.lengths.size, dtype=np.int64), words.lengths)
    padded[np.arange(in_words.size, dtype=np.int64) + 3 * word_of_char + 1] = char_ids[in_words]
    return padded


def _word_trie(names: list[str], char_ids: np.ndarray, alphabet: int) -> tuple[list[KeyIndex], list[np.ndarray]]:
    """The vocabulary's words (`names`, in id order) as a trie: per depth d >= 2 a hash index of
    its nodes' keys (parent node * alphabet + character; a node's id is its key's position), per
    depth d >= 1 the word that ends at each node (-1: none). Depth-1 nodes are the alphabet's ids."""
    if not names:
        return [], []
    points = CodePoints.of(names)
    ids = char_ids[points.codes].astype(np.int64)
    starts, lengths = points.bounds[:-1], np.diff(points.bounds)
    word = np.arange(len(names), dtype=np.int64)
    nodes = ids[starts]
    ends = np.full(alphabet, -1, dtype=np.int64)
    ends[nodes[lengths == 1]] = word[lengths == 1]
    indexes, word_ends = [], [ends]
    alive = word[lengths > 1]
    depth = 2
    while alive.size:
        keys = nodes[alive] * alphabet + ids[starts[alive] + depth - 1]
        table, nodes[alive] = _numbered(keys)
        indexes.append(KeyIndex(table))
        ends = np.full(table.size, -1, dtype=np.int64)
        ending = lengths[alive] == depth
        ends[nodes[alive[ending]]] = alive[ending]
        word_ends.append(ends)
        alive = alive[~ending]
        depth += 1
    return indexes, word_ends


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(keys, return_counts=True)` by a stable sort: the keys come as a few runs, each
    in text order, which numpy's stable sort (timsort) merges at a fraction of the cost of the
    quicksort `np.unique` runs (22 against 85 ns a key, 8,192 candidates' n-grams)."""
    ordered = np.sort(keys, kind="stable")
    first = np.ones(ordered.size, dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return ordered[starts], np.diff(np.append(starts, ordered.size))


def _numbered(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(keys, return_inverse=True)` of non-negative int64 keys: the sorted distinct
    keys and each key's position among them. Where the keys' range is at most a few times their
    number (n-gram keys are (n-1)-gram id * alphabet + character, so it mostly is), by a table
    indexed by the key: linear, 0.035 s against np.unique's 1.46 s for the 8.3 million character
    n-grams of 50,000 texts; else by np.unique's sort."""
    if keys.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    top = int(keys.max()) + 1
    if top > max(1 << 16, 8 * keys.size):
        table, inverse = np.unique(keys, return_inverse=True)
        return table, inverse.reshape(-1)
    present = np.zeros(top, dtype=bool)
    present[keys] = True
    position = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present).astype(np.int64), position[keys]


def _by_distinct(values: np.ndarray, function: Callable[[int], float]) -> np.ndarray:
    """`function` (a float of an int, by `math`) of every value (non-negative int64: counts),
    evaluated once per distinct one (`_numbered`: a sort of the values, as `np.unique` makes,
    was a third of `transform`'s time)."""
    distinct, position = _numbered(values)
    return np.array([function(int(value)) for value in distinct.tolist()], dtype=np.float64)[position]
