"""The vectorised analyzers (`text.characters`, the word trie, the hash-indexed n-gram tables)
against scikit-learn on texts made to trip them: tokens that are prefixes or extensions of
vocabulary words, words of unseen characters, whitespace runs of every kind, empty texts between
others, combining marks, lower-casing that changes a text's length, and a vocabulary of one
character."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import needs
from gpu_neighbors.evaluation import baselines
from gpu_neighbors.text.tfidf import TfidfFeatures

TRAIN = [
    "the then there theirs th", "a ab abc abcd abcde abcdef", "x_y x-y x.y 3.14 1,000",
    "naïve cafe\u0301 Ω ωμέγα", "İstanbul ΣΑΣ ΟΔΟΣ ﬁ ǅ", "tab\there  new\nline\r\n  spaces\u3000ideographic",
    "🙂 emoji👍🏽 zwj👨‍👩‍👧", "repeat repeat repeat", "",
]
CANDIDATES = [
    "", "   ", "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\u2028\u2029\u3000", "the", "th", "thereafter", "theirsx", "t h e",
    "abcdefg abcdef abcde", "ab ab ab ab", "", "qqq zzz", "\ua66e\ua66e", "Ωμέγα ωμέγα ΩΜΈΓΑ", "İİİ i\u0307",
    "x_y_z x--y ..x..", "🙂🙂🙂 👍🏽👍🏽", "repeat" * 30, " lead and trail ", "a", "_", "é" * 7,
    "new\n\n\nline  \t  tab", "ﬁ ﬁ fi", "\u0301\u0301 a\u0301",
]


def scikit_learn_rows(train: list[str], texts: list[str]) -> tuple[dict[str, int], dict[str, int], np.ndarray]:
    """The word and char_wb vocabularies ({n-gram: column}) and the union's rows of `texts`."""
    union = baselines.tfidf_ridge().steps[0][1].fit(train)
    (_, words), (_, chars) = union.transformer_list
    return words.vocabulary_, chars.vocabulary_, union.transform(texts).toarray()


def test_a_training_set_without_words_has_no_features():
    ours = TfidfFeatures()
    ours.fit(["", "   ", "\t\n"])
    assert ours.num_features == 0 and ours.transform(CANDIDATES).indices.size == 0


@needs("sklearn")
@pytest.mark.parametrize("train", [TRAIN, ["a"], ["a b", "b a"]])
def test_rows_equal_scikit_learn(train):
    ours = TfidfFeatures()
    train_rows = ours.fit(train)
    words, chars, expected = scikit_learn_rows(train, CANDIDATES + train)
    names = ours.feature_names()
    columns = [words[name] for name in names[: ours.word_features]]
    columns += [len(words) + chars[name] for name in names[ours.word_features:]]
    assert len(columns) == len(words) + len(chars)
    rows = ours.transform(CANDIDATES + train)
    np.testing.assert_allclose(rows.dense(), expected[:, columns], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(train_rows.dense(), ours.transform(train).dense())
    # Each text's row is its own: the same bits alone as in any company.
    for position in (0, 3, 13, len(CANDIDATES) - 1):
        alone = ours.transform([CANDIDATES[position]])
        start, stop = rows.indptr[position], rows.indptr[position + 1]
        assert np.array_equal(alone.indices, rows.indices[start:stop])
        assert np.array_equal(alone.values, rows.values[start:stop])



def test_quantised_norms_are_summed_exactly():
    """The blocks' squared norms (float64 sums) bring every block to at most 2^52 as an int64
    reference does, lowering only entries whose block was over."""
    from gpu_neighbors.kernels.tfidf import MAX_SQUARED_NORM, quantise

    ours = TfidfFeatures()
    ours.fit(TRAIN)
    rows = ours.transform(CANDIDATES + TRAIN)
    quantised = quantise(rows, ours.word_features).astype(np.int64)
    block = rows.rows * 2 + (rows.indices >= ours.word_features)
    floor = np.floor(rows.values * 2.0**26).astype(np.int64)
    squares, floors = np.zeros(2 * len(rows), dtype=np.int64), np.zeros(2 * len(rows), dtype=np.int64)
    np.add.at(squares, block, quantised * quantised)
    np.add.at(floors, block, floor * floor)
    assert squares.max() <= MAX_SQUARED_NORM and (quantised <= floor).all()
    lowered = np.unique(block[quantised < floor])
    assert (floors[lowered] > MAX_SQUARED_NORM).all()


@pytest.mark.parametrize("spread", [3, 10**6, 2**40])
def test_numbering_by_a_table_or_by_a_sort_is_numpys_unique(spread):
    """Keys numbered through a table indexed by the key (a small range) or by a sort (a range
    too wide for a table): the sorted distinct keys and each key's position, as np.unique."""
    from gpu_neighbors.text.tfidf import _numbered

    keys = np.random.default_rng(spread).integers(0, spread, size=5000, dtype=np.int64)
    table, position = _numbered(keys)
    expected_table, expected_position = np.unique(keys, return_inverse=True)
    assert table.dtype == np.int64 and position.dtype == np.int64
    assert np.array_equal(table, expected_table) and np.array_equal(position, expected_position.reshape(-1))
    assert [array.size for array in _numbered(np.zeros(0, dtype=np.int64))] == [0, 0]
