"""The tfidf kernel against scikit-learn's TF-IDF + ridge baseline (`baselines.tfidf_ridge`):
the same features, similarities equal to the baseline's union dot products halved, the same bits
however the work is cut or the training set ordered, and kernel ridge on it predicting what the
baseline's pipeline predicts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import ADVERSARIAL_TEXTS, needs
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Tfidf
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.core import kernel_ridge
from gpu_neighbors.evaluation import baselines
from gpu_neighbors.kernels.tfidf import MAX_SQUARED_NORM, SCALE, TILE_SCALE, TfidfKernel, quantise
from gpu_neighbors.text.tfidf import FeatureRows, TfidfFeatures
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from parity import all_pairs, assert_scorer_tiling_invariant, assert_tiling_invariant

CPU = torch.device("cpu")
MORE_ADVERSARIAL = [
    "!!! ?? ... --- ;;",  # punctuation only: no word token, char n-grams only
    "a b c d e f g h i j",  # one-letter words: padded words shorter than 4 and 5 characters
    "I a I a",
    "x" * 300,  # one 300-character word
    "supercalifragilistic" * 15 + " word",
    "naïve café résumé Ecole ÉCOLE école",
    "東京タワー 日本語の テキスト です",
    "emoji 🙂🙂 text 🙂 👍🏽 family 👨‍👩‍👧",
    "İstanbul İSTANBUL ıi I İ DİYARBAKIR",  # str.lower maps İ to i + a combining dot
    "tabs\tand\nnew\r\nlines \x0b\x0c\x1c\x1d odd\u2003spaces\u00a0nbsp",
    "the the the the the the the the",
    "repeat repeat repeat words words",
    "under_score snake_case 3.14 1,000 e-mail",
]
UNSEEN = ["zzqxj qqxz vvvk", "Ωμέγα λόγος", "", "the"]


def fitted(train: list[str]) -> TfidfKernel:
    kernel = TfidfKernel(tokenizer=WhitespaceTokenizer(), device=CPU)
    kernel.fit(train)
    return kernel


def union(train: list[str]):
    """scikit-learn's fitted feature union of the baseline."""
    return baselines.tfidf_ridge().steps[0][1].fit(train)


def reference_similarities(candidates: list[str], train: list[str]) -> np.ndarray:
    features = union(train)
    return (features.transform(candidates) @ features.transform(train).T).toarray() / 2


@pytest.fixture(scope="module")
def texts(huse_texts) -> tuple[list[str], list[str]]:
    train = huse_texts + ADVERSARIAL_TEXTS + MORE_ADVERSARIAL
    return train, huse_texts[::-1] + ADVERSARIAL_TEXTS + MORE_ADVERSARIAL + UNSEEN


@needs('sklearn')
def test_features_equal_scikit_learn(texts):
    train, candidates = texts
    ours = TfidfFeatures()
    train_rows = ours.fit(train)
    theirs = union(train)
    (_, words), (_, chars) = theirs.transformer_list
    names = ours.feature_names()
    assert sorted(names[: ours.word_features]) == sorted(words.vocabulary_)
    assert sorted(names[ours.word_features :]) == sorted(chars.vocabulary_)
    assert any(len(name) == 5 for name in names[ours.word_features :]) and "x x" not in names
    columns = [words.vocabulary_[name] for name in names[: ours.word_features]]
    columns += [len(words.vocabulary_) + chars.vocabulary_[name] for name in names[ours.word_features :]]
    for rows, batch in ((train_rows, train), (ours.transform(candidates), candidates)):
        expected = theirs.transform(batch).toarray()[:, columns]
        np.testing.assert_allclose(rows.dense(), expected, rtol=0, atol=1e-12)
        assert rows.indices.dtype == np.int64 and rows.values.dtype == np.float64
    empty = ours.transform(["", "   ", "\ua66e\ua66e \ua66e"])  # no character of it was seen
    assert empty.indptr.tolist() == [0, 0, 0, 0]


@needs('sklearn')
def test_similarities_equal_scikit_learn(texts):
    train, candidates = texts
    kernel = fitted(train)
    ours = all_pairs(kernel, candidates, blocks=[50, 211]).numpy()
    reference = reference_similarities(candidates, train)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-6)
    assert (ours <= reference + 1e-15).all(), "quantising down never raises a similarity"
    assert (ours >= 0).all() and (ours <= 1).all()
    assert (reference > 0.3).sum() >= 300, "the test must exercise real overlaps"
    assert (ours[-2] == 0).all() and (ours[-4] > 0).any()  # the empty text; unseen words share characters


def test_same_bits_however_the_work_is_cut(texts):
    train, candidates = texts
    kernel = fitted(train)
    block_cuts = ([1], [5, 6, 120], list(range(7, len(train), 7)))
    chunk_cuts = [list(range(chunk, len(candidates), chunk)) for chunk in (1, 3, 64)]
    whole = assert_tiling_invariant(
        kernel, candidates, [(blocks, []) for blocks in block_cuts] + [([9, 150], chunks) for chunks in chunk_cuts]
    )
    # Training texts as candidates (leave-one-out's encode_train) are the same bits as encoded anew.
    assert torch.equal(all_pairs(kernel, None, blocks=[33], chunks=[10, 100]), all_pairs(kernel, train))
    assert kernel.tile(kernel.encode([]), 0, len(train)).shape == (0, len(train))
    assert kernel.tile(kernel.encode(candidates), 3, 3).shape == (len(candidates), 0)
    assert whole.dtype == torch.float64


def test_tile_is_the_same_bits_in_any_summation_order(huse_texts):
    """What makes the tile device-independent: its sums are exact, so a dense product (blocked
    BLAS sums) over the features in reverse order gives the sparse product's bits. With the
    unquantised values it does not."""
    kernel = fitted(huse_texts[:80])
    encoded = kernel.encode(huse_texts[80:140] + MORE_ADVERSARIAL)
    tile = kernel.tile(encoded, 0, kernel.num_train)
    position = kernel._head.position
    head_ids = torch.from_numpy(np.argsort(np.where(position >= 0, position, position.size))[: kernel._head.size])

    def every_feature(head: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
        dense = tail.to_dense().clone()
        dense[:, head_ids] += head
        return dense

    reverse = torch.arange(kernel._train.shape[1] - 1, -1, -1)
    candidates = every_feature(encoded.head, encoded.tail)[:, reverse]
    train = every_feature(kernel._train_head, kernel._train)[:, reverse]
    assert torch.equal((candidates @ train.T) * TILE_SCALE, tile)
    assert (tile > 0.1).sum() >= 50


def test_the_dense_head_changes_no_bit(huse_texts, monkeypatch):
    """The most frequent features multiply as a dense product, the rest as a sparse one: the
    tile is the same bits with no head, a small one, or every feature in it."""
    candidates = huse_texts[80:160] + MORE_ADVERSARIAL + UNSEEN
    tiles = []
    for size in (0, 7, 64, 256, 100_000):
        monkeypatch.setattr("gpu_neighbors.kernels.tfidf.HEAD_FEATURES", {"cpu": size})
        kernel = fitted(huse_texts[:80])
        assert kernel._head.size == min(size, kernel._train.shape[1])
        tiles.append(kernel.tile(kernel.encode(candidates), 0, kernel.num_train))
    for tile in tiles[1:]:
        assert torch.equal(tile, tiles[0])


def test_the_cpu_product_and_the_device_product_give_the_same_bits(huse_texts, monkeypatch):
    """On the CPU the tail's product goes straight into the dense tile; a GPU (and a CPU without
    MKL) makes it as CSR and adds it (`core.sparse.add_product`): the same tiles, bit for bit, on
    real and adversarial texts, with and without a dense head."""
    candidates = huse_texts[80:160] + MORE_ADVERSARIAL + UNSEEN
    for size in (0, 64):
        monkeypatch.setattr("gpu_neighbors.kernels.tfidf.HEAD_FEATURES", {"cpu": size})
        kernel = fitted(huse_texts[:80] + MORE_ADVERSARIAL)
        encoded = kernel.encode(candidates)
        into_dense = kernel.tile(encoded, 0, kernel.num_train)
        monkeypatch.setattr("gpu_neighbors.core.sparse.SPARSE_INTO_DENSE", frozenset())
        assert torch.equal(kernel.tile(encoded, 0, kernel.num_train), into_dense)
        monkeypatch.setattr("gpu_neighbors.core.sparse.ENTRY_BY_ENTRY", frozenset({"cpu"}))  # CUDA's way
        assert torch.equal(kernel.tile(encoded, 0, kernel.num_train), into_dense)
        monkeypatch.undo()
        assert (into_dense > 0.1).sum() >= 50


@pytest.mark.parametrize("leave_one_out", [False, True])
def test_scorer_same_bits_for_every_chunk_size_and_budget(huse_texts, huse_scores, leave_one_out):
    train, scores = huse_texts[:150], huse_scores[:150]
    candidates = huse_texts[150:] + MORE_ADVERSARIAL
    assert_scorer_tiling_invariant("tfidf", train, scores, candidates, leave_one_out)


def test_permuted_training_set_gives_the_same_bits(texts):
    train, candidates = texts
    order = np.random.default_rng(3).permutation(len(train))
    kernel, permuted = fitted(train), fitted([train[i] for i in order])
    assert torch.equal(all_pairs(permuted, candidates), all_pairs(kernel, candidates)[:, order])
    assert torch.equal(all_pairs(permuted, None), all_pairs(kernel, None)[order][:, order])


def test_quantised_norms_never_pass_the_bound(huse_texts):
    features = TfidfFeatures()
    rows = features.fit(huse_texts)
    quantised = quantise(rows, features.word_features)
    assert (quantised == np.floor(rows.values * SCALE)).all()  # nothing needed a fix on real text
    block = rows.rows * 2 + (rows.indices >= features.word_features)
    squares = np.bincount(block, weights=quantised ** 2)
    assert squares.max() <= MAX_SQUARED_NORM and squares.max() > MAX_SQUARED_NORM * 0.99
    # A vector that normalisation left a hair above norm 1: its largest entry comes down by one.
    over = FeatureRows(np.array([0, 2, 3]), np.array([0, 1, 5]), np.array([1.0, 2.0 ** -26, 1.0]), 6)
    fixed = quantise(over, word_features=3)
    assert fixed.tolist() == [SCALE - 1, 1.0, SCALE]


def test_scorer_fits_and_predicts(huse_texts, huse_scores):
    train, scores = huse_texts[:150], huse_scores[:150]
    scorer = NeighborsScorer(kernel="tfidf", estimator=Threshold.paper(), device="cpu").fit(train, scores)
    prediction = scorer.predict(huse_texts[150:] + ["", "zzqxj"])
    assert scorer.tau_ == TfidfKernel.default_tau == 0.03
    assert prediction.coverage > 0.8 and not prediction.covered[-2:].any()
    signature = str(scorer.signature)
    assert "kernel:tfidf" in signature and "features:word1-2+char_wb2-5" in signature and "tok:" not in signature
    other = NeighborsScorer(kernel=Tfidf(tokenizer="13a", lowercase=True), estimator=Threshold.paper(),
                            device="cpu").fit(train, scores)
    assert str(other.signature) == signature  # the scorer's tokenizer changes no number
    assert torch.equal(other.similarity(huse_texts[150:]), scorer.similarity(huse_texts[150:]))
    tuned = NeighborsScorer(kernel="tfidf", device="cpu").fit(train, scores)
    assert np.isfinite(tuned.predict(huse_texts[150:]).scores).all()


@needs('sklearn')
def test_kernel_ridge_is_the_tfidf_ridge_baseline(huse_texts, huse_scores):
    """Ridge on the union's features is kernel ridge on their dot products (with the intercept
    unpenalised). Ours are those dot products halved, and (K/2 + lambda I) a = y - b is
    (K + 2 lambda I)(a/2) = y - b: scikit-learn's alpha is our penalty 2 lambda, so ours are
    ALPHAS / 2."""
    scores = np.asarray(huse_scores)
    order = np.random.default_rng(0).permutation(len(huse_texts))
    train_index, test_index = order[:150], order[150:]
    train, test = [huse_texts[i] for i in train_index], [huse_texts[i] for i in test_index]
    scorer = NeighborsScorer(kernel="tfidf", device="cpu").fit(train, scores[train_index])
    model = kernel_ridge.fit(scorer.train_similarity().numpy(), scores[train_index],
                             penalties=np.asarray(baselines.ALPHAS) / 2)
    ours = model.predict(scorer.similarity(test).numpy())
    pipeline = baselines.tfidf_ridge().fit(train, scores[train_index])
    np.testing.assert_allclose(ours, pipeline.predict(test), rtol=0, atol=1e-5)
    assert model.penalty == pipeline.steps[-1][1].alpha_ / 2
    assert np.std(ours) > 0.01, "the predictions must vary"


def test_counting_in_parts_changes_no_bit(texts, monkeypatch):
    """Texts are counted COUNT_TEXTS at a time (memory): the vocabulary, idf and every row are
    the same bits as counting them all at once, including parts that hold only empty texts."""
    train, candidates = texts
    train = train + ["", " "] * 5
    whole = TfidfFeatures()
    whole_rows = whole.fit(train)
    monkeypatch.setattr("gpu_neighbors.text.tfidf.COUNT_TEXTS", 7)
    parts = TfidfFeatures()
    parts_rows = parts.fit(train)
    np.testing.assert_array_equal(parts.idf, whole.idf)
    for ours, reference in ((parts_rows, whole_rows), (parts.transform(candidates), whole.transform(candidates))):
        np.testing.assert_array_equal(ours.indptr, reference.indptr)
        np.testing.assert_array_equal(ours.indices, reference.indices)
        np.testing.assert_array_equal(ours.values, reference.values)


def test_each_count_maps_through_math_exactly():
    """tf and idf come from `math.log` of each distinct count, looked up by value: the same bits
    as calling it on every element, in any order, repeated values and gaps included."""
    import math

    from gpu_neighbors.text.tfidf import _by_distinct

    values = np.random.default_rng(3).integers(1, 5000, size=20_000) ** 2 % 7919 + 1
    expected = np.array([1 + math.log(int(value)) for value in values])
    np.testing.assert_array_equal(_by_distinct(values, lambda count: 1 + math.log(count)), expected)
    assert _by_distinct(np.zeros(0, dtype=np.int64), math.log).size == 0
