"""The compiled host loops (`text._compiled`, Cython) against the numpy passes they replace: the
same bits in every output, and the numpy passes still there where no compiler built them."""
from __future__ import annotations

import random
from types import ModuleType

import numpy as np
import pytest
import torch

from gpu_neighbors.kernels.bleu import BleuKernel
from gpu_neighbors.kernels.bleu_sets import self_bleu, shared_matches
from gpu_neighbors.kernels.tfidf import SCALE, HeadSplit, TfidfKernel
from gpu_neighbors.text import compiled
from gpu_neighbors.text.ngrams import NgramFeatures
from gpu_neighbors.text.tfidf import FeatureRows, TfidfFeatures
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from gpu_neighbors.text.token_runs import split_tokens
from gpu_neighbors.text.typicality import TABLE_PAIRS, Typicality
from gpu_neighbors.text.vocabulary import TokenBatch
from compiled_modules import built
from tests.conftest import ADVERSARIAL_TEXTS


def _built() -> ModuleType:
    return built("gpu_neighbors.text._compiled")


def test_the_install_built_the_compiled_loops():
    """setup.py builds them wherever a C compiler is found; a silent fall back to numpy there
    would keep every answer and lose the speed."""
    assert _built() is not None


def _same(one: FeatureRows, other: FeatureRows) -> None:
    for name in ("indptr", "indices", "values"):
        a, b = getattr(one, name), getattr(other, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)  # bit for bit: no tolerance
    assert one.num_features == other.num_features


def _texts(huse_records: list[dict], seed: int) -> list[str]:
    """Real summaries, the suite's adversarial texts, and texts that stress the loops: a long
    line (thousands of each n-gram: the large-segment sort), repeats (counts above 1), and
    characters the training set never saw."""
    rng = random.Random(seed)
    words = " ".join(record["text"] for record in huse_records).split()
    long_line = " ".join(rng.choice(words) for _ in range(6_000))
    return ([record["text"] for record in huse_records] + ADVERSARIAL_TEXTS
            + [long_line, "the the the the the", "ÆØÅ ☃☃ naïve", "x", "", "   \t\n", "a-b_c d.e"])


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
@pytest.mark.parametrize("hashed", [False, True], ids=["default-tables", "hashed-tables"])
@pytest.mark.parametrize("count_texts", [1 << 14, 7])
def test_tfidf_fit_and_transform_are_the_same_bits_compiled_or_not(huse_records, monkeypatch, count_texts, hashed):
    """Also with every table hashed (a small training set's tables are indexed by key), and with
    the compiled count's outputs starting with no room for a text's entries (grown until they fit)."""
    monkeypatch.setattr("gpu_neighbors.text.tfidf.COUNT_TEXTS", count_texts)
    monkeypatch.setattr("gpu_neighbors.text.tfidf.ENTRIES_PER_CHARACTER", 4 if count_texts > 7 else 0)
    if hashed:
        monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_KEYS", 0)
        monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_PER_KEY", 0)
    training = [record["text"] for record in huse_records[:120]] + ["ÆØÅ tøken", "x"]
    candidates = _texts(huse_records[120:], seed=count_texts)
    fitted = TfidfFeatures()
    rows = fitted.fit(training), fitted.transform(candidates), fitted.transform(training)
    monkeypatch.setattr("gpu_neighbors.text.tfidf.native", None)
    plain = TfidfFeatures()
    expected = plain.fit(training), plain.transform(candidates), plain.transform(training)
    for one, other in zip(rows, expected):
        _same(one, other)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
@pytest.mark.parametrize("device_head", [64, 256])
def test_tfidf_kernel_encoding_is_the_same_bits_compiled_or_not(huse_records, monkeypatch, device_head):
    """The quantised head and tail of candidates and of the training texts, compiled in one pass
    (`quantise_split`) or by numpy's quantise and head split; also where a block's quantised norm
    passes 2^52 and is brought back (the repeats and one-word texts of `_texts`)."""
    monkeypatch.setattr("gpu_neighbors.kernels.tfidf.HEAD_FEATURES", {"cpu": device_head})
    training = [record["text"] for record in huse_records[:150]] + ["ÆØÅ tøken", "x", "x x x x"]
    candidates = _texts(huse_records[150:], seed=3) + ["x", "x x", "x x x x x x x x x"]

    def encoded() -> list[torch.Tensor]:
        kernel = TfidfKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"))
        kernel.fit(training)
        parts = []
        for encoding in (kernel.encode(candidates), kernel.encode_train(0, len(training))):
            parts += [encoding.head, encoding.tail.crow_indices(), encoding.tail.col_indices(), encoding.tail.values()]
        return parts

    ours = encoded()
    monkeypatch.setattr("gpu_neighbors.text.tfidf.native", None)
    monkeypatch.setattr("gpu_neighbors.kernels.tfidf.native", None)
    for one, other in zip(ours, encoded(), strict=True):
        assert one.dtype == other.dtype and torch.equal(one, other)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_a_block_quantised_past_norm_one_comes_back_the_same_compiled_or_not(monkeypatch):
    """Vectors that normalisation left a hair above norm 1 (`quantise`'s case, and two equal
    largest entries: the first comes down), split with some features in the head."""
    tie = 47453133 / SCALE  # two of them: floor(v 2^26)^2 x 2 passes 2^52
    over = FeatureRows(np.array([0, 2, 3, 5]), np.array([0, 1, 5, 3, 4]), np.array([1.0, 2.0 ** -26, 1.0, tie, tie]), 6)
    split = HeadSplit.of_features(np.array([5, 1]), 6)
    ours = split.quantised(over, word_features=3)
    monkeypatch.setattr("gpu_neighbors.kernels.tfidf.native", None)
    numpy_head, numpy_tail = split.quantised(over, word_features=3)
    np.testing.assert_array_equal(ours[0], numpy_head)
    assert ours[0].tolist() == [[0.0, 1.0], [SCALE, 0.0], [0.0, 0.0]]
    _same(ours[1], numpy_tail)
    assert ours[1].values.tolist() == [SCALE - 1, 47453132.0, 47453133.0]


def test_weighing_asks_for_a_longer_tf_table_rather_than_being_told_the_largest_count():
    """`weigh_rows` says which table a count past it needs (the caller no longer finds the
    largest count first), then weighs as numpy's passes do once given it."""
    native = _built()
    indptr, indices, counts = np.array([0, 2, 3]), np.array([0, 4, 2]), np.array([1.0, 3.0, 9.0])
    idf, values = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.empty(3)
    tf = np.array([0.0, *(1 + np.log(np.arange(1, 5)))])
    assert native.weigh_rows(indptr, indices, counts, tf, idf, 2, values) == 10
    longer = np.array([0.0, *(1 + np.log(np.arange(1, 10)))])
    assert native.weigh_rows(indptr, indices, counts, longer, idf, 2, values) == 0
    assert values.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="below one"):
        native.weigh_rows(indptr, indices, np.array([1.0, 0.0, 1.0]), longer, idf, 2, values)


def test_weighing_quantising_and_splitting_in_one_pass_gives_the_two_passes_bits():
    """`weigh_quantise_split` is `weigh_rows` then `quantise_split`, row by row: the same head and
    tail, an empty row and a block quantised past norm one included; like `weigh_rows` it asks
    for a longer tf table (a count past it, plus one) rather than being told the largest count."""
    native = _built()
    indptr, indices = np.array([0, 3, 3, 6, 7]), np.array([0, 2, 5, 1, 4, 5, 3])
    counts = np.array([1.0, 2.0, 9.0, 1.0, 1.0, 1.0, 4.0])
    idf, word_features = np.array([1.0, 1.5, 2.0, 2.5, 3.0, 3.5]), 3
    position = np.array([1, -1, -1, -1, 0, -1])
    long_tf = np.array([0.0, *(1 + np.log(np.arange(1, 16)))])

    def outputs() -> tuple[np.ndarray, ...]:
        return np.zeros((4, 2)), np.empty(5, dtype=np.int64), np.empty(7, dtype=np.int64), np.empty(7)

    values = np.empty(7)
    assert native.weigh_rows(indptr, indices, counts, long_tf, idf, word_features, values) == 0
    apart = outputs()
    native.quantise_split(indptr, indices, values, word_features, SCALE, 1 << 52, position, *apart)
    together = outputs()
    assert native.weigh_quantise_split(indptr, indices, counts, long_tf[:5], idf, word_features, SCALE, 1 << 52,
                                       position, *together) == 10
    assert native.weigh_quantise_split(indptr, indices, counts, long_tf, idf, word_features, SCALE, 1 << 52,
                                       position, *together) == 0
    stored = int(apart[1][-1])
    assert stored == 5 and np.array_equal(apart[0], together[0]) and np.array_equal(apart[1], together[1])
    for one, other in zip(apart[2:], together[2:]):
        assert np.array_equal(one[:stored], other[:stored])
    with pytest.raises(ValueError, match="below one"):
        native.weigh_quantise_split(indptr, indices, counts * 0, long_tf, idf, word_features, SCALE, 1 << 52, position,
                                    *outputs())


def test_a_dense_key_table_must_end_in_minus_one():
    """A key outside a dense table reads its last slot (no branch), so a table whose last slot is
    not -1 (not a `KeyIndex`'s) is refused rather than read as a hit."""
    native = _built()
    empty = np.zeros(0, dtype=np.int64)
    found = np.empty(2, dtype=np.int64)
    native.find_keys(np.array([0, -1, 1, -1]), empty, empty, 0, 0, np.array([2, 9]), found)
    assert found.tolist() == [1, -1]
    with pytest.raises(ValueError, match="does not end in -1"):
        native.find_keys(np.array([0, -1, 1, 5]), empty, empty, 0, 0, np.array([2, 9]), found)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_char_ngrams_of_one_prefix_in_any_order_count_the_same_compiled_or_not(monkeypatch):
    """The compiled walk reads each order in the order of the one before, so n-grams sharing a
    prefix come out in their texts' order: many words of one first letter, their next letters
    descending (the insertion sort's worst case, handed over to the full sort) or shuffled."""
    rng = random.Random(9)
    letters = "abcdefghijklmnopqrstuvwxyz"
    training = [" ".join("q" + first + second for first in letters for second in letters[:5])]
    descending = " ".join("q" + first + second for first in letters[::-1] for second in "edcba")
    shuffled = [" ".join("q" + rng.choice(letters) + rng.choice(letters) for _ in range(n)) for n in (3, 40, 500)]
    candidates = [descending * 3, *shuffled, "qz qy qx qa"]
    fitted = TfidfFeatures()
    rows = fitted.fit(training), fitted.transform(candidates)
    monkeypatch.setattr("gpu_neighbors.text.tfidf.native", None)
    plain = TfidfFeatures()
    for one, other in zip(rows, (plain.fit(training), plain.transform(candidates))):
        _same(one, other)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_long_rows_of_close_features_count_the_same_compiled_or_not(monkeypatch):
    """Hundreds of one order's n-grams of a text among few feature ids (one letter words: the
    radix sort's one-byte pass) or many (a long line: its two-byte passes)."""
    rng = random.Random(4)
    letters = "abcdefghijklmnopqrstuvwxyz"
    training = [" ".join(letters), "the cat sat on the mat", " ".join(letters[::-1]) + " zz yy"]
    candidates = [" ".join(rng.choice(letters) for _ in range(n)) for n in (200, 300, 700)]
    candidates += [" ".join(rng.choice(letters) + rng.choice(letters) for _ in range(900)), "a" * 2000]
    fitted = TfidfFeatures()
    rows = fitted.fit(training), fitted.transform(candidates)
    assert np.diff(rows[1].indptr).min() > 0
    monkeypatch.setattr("gpu_neighbors.text.tfidf.native", None)
    plain = TfidfFeatures()
    for one, other in zip(rows, (plain.fit(training), plain.transform(candidates))):
        _same(one, other)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
@pytest.mark.parametrize("table_pairs", [0, 4, 1 << 62], ids=["by-table", "default", "by-position"])
def test_typicality_of_new_texts_is_the_same_bits_compiled_or_not(huse_records, monkeypatch, table_pairs):
    """The five statistics of new texts in one compiled pass per text or by the torch passes:
    the same bits (NaN rows alike), the order statistic's pairs counted either way, on real,
    adversarial, repeated, long and unseen texts."""
    monkeypatch.setattr("gpu_neighbors.text.typicality.TABLE_PAIRS", table_pairs)
    training = [record["text"] for record in huse_records[:90]] + ["the the cat the cat", "solo bigram here", ""]
    words = " ".join(training).split()
    texts = _texts(huse_records[90:140], seed=5) + [
        " ".join(words[index % len(words)] for index in range(1_500)) + " unseen1 unseen2 unseen1",
        "cat the the cat zzz the", "solo bigram here here solo", "# # # a # #", "ÆØÅ Æ resturant servd"]
    typicality = Typicality(training, WhitespaceTokenizer(), torch.device("cpu"))
    ours = typicality.of_texts(texts)
    monkeypatch.setattr("gpu_neighbors.text.typicality.native", None)
    expected = typicality.of_texts(texts)
    assert ours.dtype == expected.dtype == torch.float64 and ours.isnan().any()
    assert torch.equal(ours.view(torch.int64), expected.view(torch.int64))


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_typicality_of_new_texts_in_compiled_parts_is_the_same_bits(huse_records, monkeypatch):
    """The compiled statistics COMPILED_ROWS texts at a time: a part's unseen tokens are numbered
    among its own, a row's statistics depend on it alone, so parts of 3 give the torch passes'
    bits (NaN rows alike) and the one-part pass's."""
    training = [record["text"] for record in huse_records[:90]] + ["the the cat the cat", ""]
    texts = _texts(huse_records[90:130], seed=8) + ["cat the the cat zzz the", "zzz", "zzz zzz the"]
    typicality = Typicality(training, WhitespaceTokenizer(), torch.device("cpu"))
    whole = typicality.of_texts(texts)
    monkeypatch.setattr("gpu_neighbors.text.typicality.COMPILED_ROWS", 3)
    parts = typicality.of_texts(texts)
    monkeypatch.setattr("gpu_neighbors.text.typicality.native", None)
    expected = typicality.of_texts(texts)
    assert parts.isnan().any() and parts.shape == (len(texts), 5)
    assert torch.equal(parts.view(torch.int64), expected.view(torch.int64))
    assert torch.equal(whole.view(torch.int64), expected.view(torch.int64))


@pytest.mark.parametrize("table_pairs", [TABLE_PAIRS, 1 << 62], ids=["default", "by-position"])
def test_typicality_refuses_bigram_starts_that_put_a_key_among_another_tokens(huse_records, table_pairs):
    """The compiled pass counts a token's held bigrams from its range of the sorted table
    (`successors`); ranges that do not match the keys' first tokens are refused, not read. Also
    where `table_pairs` x the table's size passes an int64 (by position all the same: the pass
    once wrapped that product and read such a row by the table)."""
    native = _built()
    typicality = Typicality([record["text"] for record in huse_records[:40]], WhitespaceTokenizer(),
                            torch.device("cpu"))
    tables = list(typicality._native_tables)
    successors = tables[6].copy()
    degree = np.diff(successors)
    # a token a with one bigram after a token with some: a's range moved back over the other's
    # last key, a row of the two, so that a's bigrams are read from its range (2, the row's tokens)
    token = next(a for a in range(1, typicality.vocab_size) if degree[a] == 1 and degree[a - 1] >= 1)
    successors[token] -= 1
    tables[6] = successors
    ids = np.array([token, token - 1, token, token - 1], dtype=np.int64)
    with pytest.raises(ValueError, match="another token's"):
        native.typicality_of_tokens(ids, ids.copy(), np.zeros(4, dtype=np.uint8), np.array([4]), np.array([-1]),
                                    np.zeros(0, dtype=np.int64), np.array([0, 0]), typicality.vocab_size,
                                    typicality.vocab_size, *tables, 40, table_pairs, float("nan"), np.empty((1, 5)))


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_whitespace_tokens_read_from_code_points_are_the_same_compiled_or_not(huse_records, monkeypatch):
    """`split_tokens` in one compiled pass per text or by numpy's: every field the same (the
    unknown tokens ranked alike), and both refuse a batch whose unknown tokens collide."""
    training = [record["text"] for record in huse_records[:100]] + ["a\u00a0b", "é", "🙂 the"]
    texts = _texts(huse_records[100:150], seed=6) + ["zzq zzq qzz", "\ud800 lone \udfff", "é É e\u0301", "x\x1cy"]
    vocabulary = Typicality(training, WhitespaceTokenizer(), torch.device("cpu"))._runs
    ours = split_tokens(texts, vocabulary)
    monkeypatch.setattr("gpu_neighbors.text.token_runs.native", None)
    expected = split_tokens(texts, vocabulary)
    assert ours is not None and expected is not None and len(ours.unknown_tokens) > 10
    for name in ("ids", "unknown_rank", "wordlike", "lengths", "endings", "codes", "code_rows"):
        one, other = getattr(ours, name), getattr(expected, name)
        assert one.dtype == other.dtype and np.array_equal(one, other), name
    assert ours.unknown_tokens == expected.unknown_tokens
    monkeypatch.setattr("gpu_neighbors.text.token_runs._LOW_63", np.uint64(0))  # every hash 0
    assert split_tokens(["x y", "z"], vocabulary) is None
    monkeypatch.setattr("gpu_neighbors.text.token_runs.native", compiled.native)
    assert split_tokens(["x y", "z"], vocabulary) is None and split_tokens(["x x", "x"], vocabulary) is not None


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_many_unknown_tokens_group_and_rank_the_same_compiled_or_not(monkeypatch):
    """Against a vocabulary of three words nearly every token is unknown: thousands of distinct
    ones, each repeated in a shuffled order (the compiled pass groups them by hash, first
    occurrence leading, and sorts only the groups): the same ranks, leaders and strings."""
    rng = random.Random(7)
    vocabulary = Typicality(["the cat sat"], WhitespaceTokenizer(), torch.device("cpu"))._runs
    words = [f"w{index}é" for index in range(3_000)] + ["the", "cat"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(2_000)]
    ours = split_tokens(texts, vocabulary)
    monkeypatch.setattr("gpu_neighbors.text.token_runs.native", None)
    expected = split_tokens(texts, vocabulary)
    assert ours is not None and expected is not None and len(expected.unknown_tokens) > 2_500
    for name in ("ids", "unknown_rank", "wordlike", "lengths", "endings"):
        assert np.array_equal(getattr(ours, name), getattr(expected, name)), name
    assert ours.unknown_tokens == expected.unknown_tokens


def _ngram_matrices(features: NgramFeatures, batch: TokenBatch) -> list[tuple[np.ndarray, ...]]:
    return [(matrix.crow_indices().numpy(), matrix.col_indices().numpy(), matrix.values().numpy(),
             np.asarray(matrix.shape)) for matrix in features.transform(batch)]


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
@pytest.mark.parametrize("max_order", [4, 6])
@pytest.mark.parametrize("vocab", [41, 200_003], ids=["keys indexed by key", "keys hashed"])
def test_ngram_features_of_candidates_are_the_same_compiled_or_not(huse_records, monkeypatch, max_order, vocab):
    """BLEU's candidate n-gram matrices (`NgramFeatures.transform`) from the compiled pass per
    text and from the torch passes: the same rows, columns and values, with unknown tokens (-1)
    inside n-grams, empty texts and texts shorter than an order, and an n-gram repeated past
    the training set's most occurrences (its extra occurrences match nothing). A vocabulary of
    41 keeps the low orders' gram keys in tables indexed by the key; ids up to 200,003 put every
    order's in hash tables (`KeyIndex`), as a real vocabulary does."""
    rng = random.Random(3)
    pool = list(range(41)) if vocab == 41 else [0, 1, 2, 5, *rng.sample(range(6, vocab), 37)]  # 41 ids in use
    train = [[pool[rng.randint(0, 30)] for _ in range(rng.randint(0, 40))] for _ in range(300)]
    train += [[5] * 7, [1, 2, 1, 2, 1, 2]]
    candidates = [[pool[rng.randint(0, 40)] if rng.random() > 0.02 else -1 for _ in range(rng.randint(0, 60))]
                  for _ in range(700)]
    candidates += [[], [5], [5, 5], [5] * 30, [1, 2] * 20, [-1] * 5, [1, -1, 2, 1, 2, 1]]

    def batch(texts: list[list[int]]) -> TokenBatch:
        return TokenBatch(torch.tensor([token for text in texts for token in text], dtype=torch.int64),
                          torch.tensor([len(text) for text in texts], dtype=torch.int64))

    features = NgramFeatures(max_order)
    features.fit(batch(train), vocab)
    hashed = [bool(table.host_indexes[1].size) for table in features.tables]  # hash slots in use
    assert hashed[:2] == [vocab > 41] * 2  # (41 ids hash from order 3 or 4 on)
    ours = _ngram_matrices(features, batch(candidates))
    monkeypatch.setattr("gpu_neighbors.text.ngrams.native", None)
    expected = _ngram_matrices(features, batch(candidates))
    assert sum(part[1].size for part in expected) > 10_000
    for order, (mine, theirs) in enumerate(zip(ours, expected, strict=True), start=1):
        for name, a, b in zip(("crow", "columns", "values", "shape"), mine, theirs, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), (order, name)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
@pytest.mark.parametrize("weights", [(0.0, 1 / 3, 1 / 3, 1 / 3), (0.2,) * 5])
def test_bleu_tiles_are_the_same_bits_compiled_or_not(huse_records, monkeypatch, weights):
    """BLEU's tiles (BLEU* and other weights) of HUSE candidates with the compiled n-gram pass
    and without."""
    texts = [record["text"] for record in huse_records]
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), weights=weights)
    kernel.fit(texts[:150])
    candidates = texts[150:] + ADVERSARIAL_TEXTS
    ours = kernel.tile(kernel.encode(candidates), 0, 150)
    monkeypatch.setattr("gpu_neighbors.text.ngrams.native", None)
    expected = kernel.tile(kernel.encode(candidates), 0, 150)
    assert ours.shape == (len(candidates), 150) and torch.equal(ours, expected)


def _shared(ids: list[list[int]], vocab_size: int, orders: int) -> torch.Tensor:
    batch = TokenBatch(torch.tensor([token for text in ids for token in text], dtype=torch.int64),
                       torch.tensor([len(text) for text in ids], dtype=torch.int64))
    return shared_matches(batch, vocab_size, orders)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
@pytest.mark.parametrize("orders", [4, 6])
def test_self_bleu_shared_counts_are_the_same_compiled_or_not(monkeypatch, orders):
    """Self-BLEU's clipped counts against the other texts (`shared_matches`) from the compiled
    pass and from the torch passes: texts sharing an n-gram's largest count (ties), one text
    holding it alone, empty texts, texts shorter than an order, a small vocabulary (many repeats)."""
    rng = random.Random(11)
    texts = [[rng.randint(0, 6) for _ in range(rng.randint(0, 30))] for _ in range(500)]
    texts += [[], [1], [2, 2, 2, 2, 2, 2, 2, 2], [2, 2, 2, 2, 2, 2, 2, 2], [3, 4] * 9, [5] * 40]
    ours = _shared(texts, 7, orders)
    monkeypatch.setattr("gpu_neighbors.kernels.bleu_sets.native", None)
    expected = _shared(texts, 7, orders)
    assert expected.sum() > 10_000 and ours.dtype == expected.dtype and torch.equal(ours, expected)


@pytest.mark.skipif(compiled.native is None, reason="the compiled loops were not built (no C compiler)")
def test_self_bleu_of_huse_texts_is_the_same_bits_compiled_or_not(huse_records, monkeypatch):
    texts = [record["text"] for record in huse_records] + ADVERSARIAL_TEXTS
    ours = self_bleu(texts, WhitespaceTokenizer(), smoothing="epsilon")
    monkeypatch.setattr("gpu_neighbors.kernels.bleu_sets.native", None)
    assert torch.equal(ours, self_bleu(texts, WhitespaceTokenizer(), smoothing="epsilon"))
