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

Everything is batched: a chunk of texts is lower-cased and split by C-level string methods, and
n-grams become integer ids order by order (an n-gram is its (n-1)-gram's id and its last token
or character: sorted tables of the training set, `np.unique` / `np.searchsorted`, no hashing), so
no Python runs per n-gram. Feature ids do not depend on the order of the training texts (every
table is sorted by content), and a text's values depend only on that text and the idf weights:
the squares of its block are summed in feature order, and every logarithm comes from
`math.log` of a distinct count, not a vectorised log whose result could depend on where an
element falls in an array. Ids: word unigrams, then word bigrams, then char_wb 2-, 3-, 4- and
5-grams (`TfidfFeatures.word_features` = where the char_wb block starts).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

WORD_PATTERN = re.compile(r"(?u)\b\w+\b")  # the baseline's token_pattern
WORD_ORDERS = (1, 2)
CHAR_ORDERS = (2, 3, 4, 5)
FEATURES_NAME = "word1-2+char_wb2-5"
SPACE = ord(" ")
# Texts whose n-grams are counted at once: the per-position int64 arrays of a chunk (a few dozen
# bytes a character) stay small; 10^6 training texts counted at once peaked at 16.5 GB resident.
COUNT_TEXTS = 1 << 14


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

    @property
    def rows(self) -> np.ndarray:
        """The row of every stored entry."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.indptr))

    def dense(self) -> np.ndarray:
        """[rows, num_features] float64 (for tests and small sets)."""
        matrix = np.zeros((len(self), self.num_features))
        matrix[self.rows, self.indices] = self.values
        return matrix


@dataclass(frozen=True)
class Grams:
    """Every n-gram occurrence of a chunk: its text and its feature id (-1: not in the
    vocabulary)."""

    rows: np.ndarray
    features: np.ndarray


def lookup(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Position of each key in the sorted `table`, or -1 where it is absent."""
    if table.size == 0:
        return np.full(keys.shape, -1, dtype=np.int64)
    position = np.minimum(np.searchsorted(table, keys), table.size - 1)
    return np.where(table[position] == keys, position, -1).astype(np.int64)


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

    # -- fitting --------------------------------------------------------------------------

    def fit(self, texts: Sequence[str]) -> FeatureRows:
        """Learn the vocabularies and idf from `texts`; return their rows."""
        lowered = [text.lower() for text in texts]
        tokens, token_counts = _word_tokens(lowered)
        names = sorted(set(tokens))
        self.unigrams = {name: index for index, name in enumerate(names)}
        unigram_ids = self._unigram_ids(tokens)
        bigram_keys, _, _ = self._bigram_keys(unigram_ids, token_counts)  # every token is known
        self.bigram_table = np.unique(bigram_keys)

        codes, word_lengths, _ = _padded_words(lowered)
        self.alphabet = np.unique(codes)
        chars = np.searchsorted(self.alphabet, codes).astype(np.int64)
        self.char_tables = [np.arange(self.alphabet.size, dtype=np.int64)]
        previous = chars
        for order in CHAR_ORDERS:
            keys, valid = self._char_keys(previous, chars, word_lengths, order)
            table = np.unique(keys[valid])
            self.char_tables.append(table)
            previous = np.where(valid, lookup(table, keys), -1)
        self._number_features()

        parts = self._counts(lowered)
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
        return features

    def transform(self, texts: Sequence[str]) -> FeatureRows:
        """The rows of `texts` over the fitted vocabularies (n-grams outside them dropped)."""
        return self._weighted_rows(self._counts([text.lower() for text in texts]))

    # -- n-grams ----------------------------------------------------------------------------

    def _unigram_ids(self, tokens: list[str]) -> np.ndarray:
        get = self.unigrams.get
        return np.fromiter((get(token, -1) for token in tokens), dtype=np.int64, count=len(tokens))

    def _bigram_keys(self, ids: np.ndarray, token_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Key first * V + second of every pair of consecutive tokens of one text, its text, and
        whether both tokens are in the vocabulary."""
        rows = np.repeat(np.arange(token_counts.size, dtype=np.int64), token_counts)
        follows = rows[1:] == rows[:-1]  # token i + 1 is in the same text as token i
        first, second = ids[:-1][follows], ids[1:][follows]
        known = (first >= 0) & (second >= 0)
        return first * max(len(self.unigrams), 1) + second, rows[:-1][follows], known

    def _char_keys(self, previous: np.ndarray, chars: np.ndarray, word_lengths: np.ndarray,
                   order: int) -> tuple[np.ndarray, np.ndarray]:
        """Key of the `order`-gram starting at every position ((order-1)-gram id * alphabet +
        last character) and whether it lies inside its padded word with all parts known."""
        size = chars.size
        last = np.arange(size, dtype=np.int64) + order - 1
        word_end = np.repeat(np.cumsum(word_lengths), word_lengths)  # one past each position's word
        inside = last < word_end
        last_char = chars[np.minimum(last, max(size - 1, 0))] if size else chars
        valid = inside & (previous >= 0) & (last_char >= 0)
        return previous * max(self.alphabet.size, 1) + last_char, valid

    def _word_grams(self, lowered: list[str]) -> Grams:
        tokens, token_counts = _word_tokens(lowered)
        ids = self._unigram_ids(tokens)
        keys, bigram_rows, known = self._bigram_keys(ids, token_counts)
        bigrams = np.where(known, lookup(self.bigram_table, keys), -1)
        rows = np.repeat(np.arange(token_counts.size, dtype=np.int64), token_counts)
        features = np.concatenate([ids, np.where(bigrams >= 0, bigrams + len(self.unigrams), -1)])
        return Grams(np.concatenate([rows, bigram_rows]), features)

    def _char_grams(self, lowered: list[str]) -> Grams:
        codes, word_lengths, words_per_text = _padded_words(lowered)
        chars = lookup(self.alphabet, codes)
        text_of_word = np.repeat(np.arange(len(lowered), dtype=np.int64), words_per_text)
        text_of_position = np.repeat(text_of_word, word_lengths)
        rows, features = [], []
        previous = chars
        for order, table, offset in zip(CHAR_ORDERS, self.char_tables[1:], self.char_offsets):
            keys, valid = self._char_keys(previous, chars, word_lengths, order)
            previous = np.where(valid, lookup(table, keys), -1)
            kept = previous >= 0
            rows.append(text_of_position[kept])
            features.append(previous[kept] + offset)
        return Grams(np.concatenate(rows) if rows else np.zeros(0, np.int64),
                     np.concatenate(features) if features else np.zeros(0, np.int64))

    def _counts(self, lowered: list[str]) -> list[FeatureRows]:
        """Occurrence counts (float64) of every vocabulary n-gram per text, sorted by feature, in
        parts of COUNT_TEXTS texts (a text's counts depend on it alone)."""
        return [self._chunk_counts(lowered[first:first + COUNT_TEXTS]) for first in range(0, len(lowered), COUNT_TEXTS)]

    def _chunk_counts(self, lowered: list[str]) -> FeatureRows:
        num_texts = len(lowered)
        words, chars = self._word_grams(lowered), self._char_grams(lowered)
        rows = np.concatenate([words.rows, chars.rows])
        features = np.concatenate([words.features, chars.features])
        kept = features >= 0
        keys, counts = np.unique(rows[kept] * max(self.num_features, 1) + features[kept], return_counts=True)
        width = max(self.num_features, 1)
        indptr = np.searchsorted(keys, np.arange(num_texts + 1, dtype=np.int64) * width)
        return FeatureRows(indptr.astype(np.int64), keys % width, counts.astype(np.float64), self.num_features)

    def _weighted_rows(self, parts: list[FeatureRows]) -> FeatureRows:
        """The parts' counts weighted and stacked into one set of rows; each part is dropped from
        `parts` once copied, so the counts and the rows are not both held whole."""
        total = sum(part.indices.size for part in parts)
        indptr, indices, values = [np.zeros(1, dtype=np.int64)], np.empty(total, dtype=np.int64), np.empty(total)
        start = 0
        while parts:
            part = self._weighted(parts.pop(0))
            stop = start + part.indices.size
            indices[start:stop], values[start:stop] = part.indices, part.values
            indptr.append(part.indptr[1:] + start)
            start = stop
        return FeatureRows(np.concatenate(indptr), indices, values, self.num_features)

    def _weighted(self, counts: FeatureRows) -> FeatureRows:
        """Sublinear tf times idf, each block l2-normalised per text."""
        tf = _by_distinct(counts.values.astype(np.int64), lambda count: 1 + math.log(count))
        values = tf * self.idf[counts.indices]
        # Squares summed per (text, block) in feature order: a text's norm depends on it alone.
        block = counts.rows * 2 + (counts.indices >= self.word_features)
        norms = np.sqrt(np.bincount(block, weights=values * values, minlength=2 * len(counts)))
        values = values / norms[block]  # a stored entry's block has a positive norm
        return FeatureRows(counts.indptr, counts.indices, values, self.num_features)

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


def _word_tokens(lowered: list[str]) -> tuple[list[str], np.ndarray]:
    """The token pattern's matches of every text, in one list, and each text's count."""
    found = [WORD_PATTERN.findall(text) for text in lowered]
    counts = np.fromiter(map(len, found), dtype=np.int64, count=len(found))
    return [token for tokens in found for token in tokens], counts


def _padded_words(lowered: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Code points (int64) of every text's words, each padded as " w ", all concatenated; each
    padded word's length; each text's number of words. A word holds no whitespace (`str.split`),
    so the spaces of the concatenation are exactly the pads: each word runs from its opening pad
    to its closing one."""
    splits = [text.split() for text in lowered]
    joined = "".join(f" {'  '.join(words)} " for words in splits if words)
    codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
    pads = np.flatnonzero(codes == SPACE)
    word_lengths = pads[1::2] - pads[0::2] + 1
    words_per_text = np.fromiter(map(len, splits), dtype=np.int64, count=len(splits))
    return codes, word_lengths, words_per_text


def _by_distinct(values: np.ndarray, function: Callable[[int], float]) -> np.ndarray:
    """`function` (a float of an int, by `math`) of every value (non-negative int64: counts),
    evaluated once per distinct one and looked up in a table indexed by the value (linear: a sort
    of the values, as `np.unique` makes, was a third of `transform`'s time)."""
    if values.size == 0:
        return np.zeros(0, dtype=np.float64)
    present = np.zeros(int(values.max()) + 1, dtype=bool)
    present[values] = True
    table = np.zeros(present.size, dtype=np.float64)
    distinct = np.flatnonzero(present)
    table[distinct] = [function(int(value)) for value in distinct.tolist()]
    return table[values]
