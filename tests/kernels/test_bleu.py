"""BLEU* against NLTK's sentence_bleu, pair by pair, on real and adversarial text."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.bleu import BleuKernel
from gpu_neighbors.kernels.bleu_tables import SMOOTHINGS
from gpu_neighbors.text.tokenizers import Sacrebleu13aTokenizer, WhitespaceTokenizer
from parity import assert_matches_reference

NLTK_METHOD = {"none": "method0", "epsilon": "method1", "add1": "method2", "exp": "method3"}
WEIGHTS = (0, 1 / 3, 1 / 3, 1 / 3)


def nltk_bleu_star(candidate: list[str], reference: list[str], smoothing: str) -> float:
    method = getattr(SmoothingFunction(), NLTK_METHOD[smoothing])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # method0 warns on every zero count
        return sentence_bleu([reference], candidate, weights=WEIGHTS, smoothing_function=method)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_matches_nltk_on_real_and_adversarial_text(huse_texts, smoothing):
    train = huse_texts[:50] + ADVERSARIAL_TEXTS
    candidates = huse_texts[120:150] + ADVERSARIAL_TEXTS + huse_texts[:5]
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing=smoothing)
    kernel.fit(train)
    _, reference = assert_matches_reference(
        kernel, candidates, train, lambda c, s: nltk_bleu_star(c.split(), s.split(), smoothing), 1e-9, [17, 40]
    )
    assert (reference > 0.05).sum() >= 10, "the test must exercise non-trivial overlaps"


def test_13a_tokenizer_matches_nltk_on_its_tokens():
    train = ["Hello, world! It's 3.5 km.", "The U.S.A. is big; really big.", "hello world it's"]
    candidates = ["Hello, world! It's 3.5 km away.", "big; really big.", ""]
    tokenizer = Sacrebleu13aTokenizer()
    kernel = BleuKernel(tokenizer=tokenizer, device=torch.device("cpu"), smoothing="add1")
    kernel.fit(train)
    assert_matches_reference(
        kernel, candidates, train,
        lambda c, s: nltk_bleu_star(tokenizer.tokenize(c), tokenizer.tokenize(s), "add1"), 1e-9,
    )


def test_repeated_ngrams_are_clipped():
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing="none")
    kernel.fit(["a b a b a b c d"])
    candidate = "a b a b a b a b a b c d"
    ours = float(kernel.tile(kernel.encode([candidate]), 0, 1))
    assert ours == pytest.approx(nltk_bleu_star(candidate.split(), "a b a b a b c d".split(), "none"), abs=1e-12)
    assert 0 < ours < 1


def test_unknown_tokens_never_match_each_other():
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing="none")
    kernel.fit(["p q r s", "a b c d e"])
    # "zz yy" are unseen in training; two unseen tokens must not form a matching bigram.
    ours = kernel.tile(kernel.encode(["zz yy zz yy a b c d"]), 0, 2)
    assert ours[0, 0] == 0
    assert float(ours[0, 1]) == pytest.approx(
        nltk_bleu_star("zz yy zz yy a b c d".split(), "a b c d e".split(), "none"), abs=1e-12
    )


def test_bad_smoothing_is_refused():
    with pytest.raises(ValueError, match="smoothing must be one of"):
        BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing="method7")


def test_scorer_similarity_equals_kernel_pairs(huse_texts):
    scorer = NeighborsScorer(kernel=Bleu(smoothing="exp"), device="cpu").fit(huse_texts[:40], np.linspace(0, 1, 40))
    similarity = scorer.similarity(huse_texts[40:60])
    assert similarity.shape == (20, 40) and similarity.dtype == torch.float64
    assert similarity.device.type == "cpu"
    expected = [[nltk_bleu_star(c.split(), s.split(), "exp") for s in huse_texts[:40]] for c in huse_texts[40:60]]
    np.testing.assert_allclose(similarity.numpy(), expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("smoothing", ["add1", "none"])
@pytest.mark.parametrize("word_slice", [None, 7], ids=["words whole", "7 words a slice"])
@pytest.mark.parametrize("row_slice", [None, 1, 5], ids=["rows whole", "1 row a slice", "5 rows a slice"])
def test_shared_word_join_in_slices_equals_one(huse_texts, monkeypatch, word_slice, row_slice, smoothing):
    """A chunk with more words than a slice holds takes the sliced join, and the CPU's tiles go
    a few rows at a time, its join counting in int16 and its pairs sharing a bigram finished
    slice by slice (a device's whole, in float32): the same bits in every combination, under a
    smoothing that keeps every pair sharing a word and one that zeroes all but 4-gram sharers."""
    from gpu_neighbors.kernels import bleu

    train, candidates = huse_texts[:120], huse_texts[120:]

    def similarity() -> torch.Tensor:
        return NeighborsScorer(kernel=Bleu(smoothing=smoothing), estimator=Threshold.paper(), device="cpu").fit(
            train, [0.5] * len(train)).similarity(candidates)

    monkeypatch.setattr(bleu, "SLICED_ON", frozenset())
    whole = similarity()
    if word_slice is not None:
        monkeypatch.setattr(bleu, "WORD_SLICE_BYTES", 2 * len(train) * word_slice)  # int16; float32: 3 words
    if row_slice is not None:
        monkeypatch.setattr(bleu, "SLICED_ON", frozenset({"cpu"}))
        monkeypatch.setattr(bleu, "ROW_SLICE_BYTES", 8 * len(train) * row_slice)
    assert whole.abs().sum() > 0 and torch.equal(similarity(), whole)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_tables_kept_per_width_equal_the_chunks_own(huse_texts, monkeypatch, smoothing):
    """A chunk's by-length table and order factors are rows of the table kept for its width
    (lengths 0..255 here), or, past WIDTH_TABLE_CELLS, made for its own lengths: the same bits."""
    from gpu_neighbors.kernels import bleu

    def similarity() -> tuple[torch.Tensor, int]:
        kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing=smoothing)
        kernel.fit(huse_texts[:100])
        encoded = kernel.encode(huse_texts[100:] + ADVERSARIAL_TEXTS)
        return kernel.tile(encoded, 0, 100), len(kernel._by_width)

    kept, widths = similarity()
    monkeypatch.setattr(bleu, "WIDTH_TABLE_CELLS", 0)
    own, no_widths = similarity()
    assert widths == 1 and no_widths == 0 and kept.abs().sum() > 0 and torch.equal(kept, own)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_compiled_star_passes_give_the_torch_passes_bits(huse_texts, monkeypatch, smoothing):
    """On the CPU the by-length values times the shared-word indicator (`rows_times_indicator`)
    and the order factors of the pairs sharing a bigram (`scale_entries`) run compiled, a few
    rows a slice here: the same bits as the torch passes, on real and adversarial text."""
    from gpu_neighbors.kernels import bleu

    calls = []
    native = bleu.native
    assert native is not None, "the install built the core's compiled loops"
    spy = type("Spy", (), {name: staticmethod(lambda *arguments, name=name: (
        calls.append(name), getattr(native, name)(*arguments))) for name in ("rows_times_indicator", "scale_entries")})
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing=smoothing)
    kernel.fit(huse_texts[:90])
    encoded = kernel.encode(huse_texts[90:] + ADVERSARIAL_TEXTS)
    monkeypatch.setattr(bleu, "ROW_SLICE_BYTES", 8 * 90 * 7)
    monkeypatch.setattr(bleu, "native", spy)
    compiled = kernel.tile(encoded, 0, 90)
    monkeypatch.setattr(bleu, "native", None)
    plain = kernel.tile(encoded, 0, 90)
    assert "rows_times_indicator" in calls and ("scale_entries" in calls) == (smoothing != "none")
    assert plain.abs().sum() > 0 and torch.equal(compiled.view(torch.int64), plain.view(torch.int64))


def test_int16_join_counts_a_candidate_of_more_words_than_int16_holds():
    """The CPU's join counts shared words in int16: a pair sharing 40,000 distinct words
    (past 2^15 - 1) must still count as sharing, not wrap to a negative count. Slices of at most
    INT16_SLICE_WORDS words keep every count in range: a text scores 1 against itself (within
    the tables' rounding), and the same bits as the float32 join a device runs."""
    from gpu_neighbors.kernels import bleu
    long_text = " ".join(f"w{index}" for index in range(40_000))
    train = [long_text, "w1 w2 another text", "nothing shared at all"]
    candidates = [long_text, "w1 w2 other", "zzz"]
    kernel = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing="add1")
    kernel.fit(train)
    on_cpu = kernel.tile(kernel.encode(candidates), 0, len(train))
    assert abs(float(on_cpu[0, 0]) - 1.0) < 1e-12 and (on_cpu >= 0).all()
    assert on_cpu[2].eq(0).all() and on_cpu[0, 2] == 0 and on_cpu[1, 1] > 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bleu, "SLICED_ON", frozenset())  # a device's path: float32, the tile whole
        as_on_device = kernel.tile(kernel.encode(candidates), 0, len(train))
    assert torch.equal(on_cpu, as_on_device)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("per_group", [2, 1])
@pytest.mark.parametrize("weights", [WEIGHTS, (0.25, 0.25, 0.25, 0.25)], ids=["bleu-star", "bleu-4"])
def test_orders_packed_in_fewer_bits_give_the_same_bits(huse_texts, monkeypatch, smoothing, per_group, weights):
    """Training texts long enough that the counted orders no longer share one float64 take a
    product per group of orders (a smaller `EXACT_BITS` stands in for long texts: two orders a
    group, then one): the same bits as all of them packed in one, and NLTK's values."""
    from gpu_neighbors.kernels import bleu

    train, candidates = huse_texts[:60] + ADVERSARIAL_TEXTS, huse_texts[60:90] + ADVERSARIAL_TEXTS
    packed = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing=smoothing,
                        weights=weights)
    packed.fit(train)
    assert len(packed.count_groups) == 1
    whole = packed.tile(packed.encode(candidates), 0, len(train))
    counted = len(packed.count_groups[0])
    bits = bleu.count_groups(max(len(text.split()) for text in train), range(counted))[0]
    monkeypatch.setattr(bleu, "EXACT_BITS", bits * per_group)
    split = BleuKernel(tokenizer=WhitespaceTokenizer(), device=torch.device("cpu"), smoothing=smoothing,
                       weights=weights)
    split.fit(train)
    assert len(split.count_groups) == -(-counted // per_group) > 1
    assert whole.abs().sum() > 0 and torch.equal(split.tile(split.encode(candidates), 0, len(train)), whole)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # method0 warns on every zero count
        method = getattr(SmoothingFunction(), NLTK_METHOD[smoothing])
        expected = [[sentence_bleu([s.split()], c.split(), weights=weights, smoothing_function=method)
                     for s in train[:20]] for c in candidates[:10]]
    np.testing.assert_allclose(whole[:10, :20].numpy(), expected, rtol=0, atol=1e-9)


def test_count_groups_fit_every_count_in_53_bits():
    from gpu_neighbors.kernels.bleu import count_groups

    star, bleu4 = range(1, 4), range(4)
    assert count_groups(0, star) == (1, [(1, 2, 3)])
    assert count_groups(2**17 - 1, star) == (17, [(1, 2, 3)])
    assert count_groups(2**17, star) == (18, [(1, 2), (3,)])
    assert count_groups(2**26, star) == (27, [(1,), (2,), (3,)])
    assert count_groups(2**13 - 1, bleu4) == (13, [(0, 1, 2, 3)])
    assert count_groups(2**13, bleu4) == (14, [(0, 1, 2), (3,)])
