"""ROUGE-L F against rouge-score's LCS F-measure, pair by pair, on real and adversarial text."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_score.rouge_scorer import _score_lcs
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.rouge import BITS_PER_WORD, RougeKernel, add_words, popcount
from gpu_neighbors.text.tokenizers import Sacrebleu13aTokenizer, WhitespaceTokenizer
from parity import (
    all_pairs,
    assert_matches_reference,
    assert_scorer_tiling_invariant,
    assert_tiling_invariant,
    reference_matrix,
)

CPU = torch.device("cpu")
WORD_MODULUS = 1 << BITS_PER_WORD


def long_texts(vocabulary: list[str], lengths: tuple[int, ...], seed: int) -> list[str]:
    """Texts of the given lengths drawn from a small vocabulary, so that their common
    subsequences are long and span several 62-bit words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(vocabulary) for _ in range(n)) for n in lengths]


AROUND_WORD_EDGES = (62, 63, 64, 124, 125, 333)  # one bit either side of 62 and 124 positions
PAST_WORD_EDGES = (61, 70, 130, 300)


def fitted(train: list[str], tokenizer=None) -> RougeKernel:
    kernel = RougeKernel(tokenizer=tokenizer or WhitespaceTokenizer(), device=CPU)
    kernel.fit(train)
    return kernel


def rouge_score(kernel: RougeKernel):
    """rouge-score's F-measure with the training text as target, on our tokenizer's tokens."""
    tokenize = kernel.tokenizer.tokenize
    return lambda candidate, text: _score_lcs(tokenize(text), tokenize(candidate)).fmeasure


def rouge_score_matrix(kernel: RougeKernel, candidates: list[str], train: list[str]) -> np.ndarray:
    return reference_matrix(rouge_score(kernel), candidates, train)


def test_matches_rouge_score_on_real_text(huse_texts):
    train, candidates = huse_texts[:60], huse_texts[100:160]
    kernel = fitted(train)
    _, reference = assert_matches_reference(kernel, candidates, train, rouge_score(kernel), 1e-12, [23])
    assert (reference > 0.3).sum() >= 20, "the test must exercise non-trivial overlaps"


def test_matches_rouge_score_on_adversarial_text(huse_texts):
    vocabulary = sorted(set(" ".join(huse_texts[:20]).split()))[:5]
    extra = [
        "tokens never seen in training zzqx",
        "the the the the the the the the",
        "日本語 テキスト 🙂 naïve",
    ]
    long_train = long_texts(vocabulary, AROUND_WORD_EDGES, seed=1)
    edited = [token if i % 10 else "zzqx" for i, token in enumerate(long_train[-1].split())]
    long_candidates = long_texts(vocabulary, PAST_WORD_EDGES, seed=2) + [" ".join(edited)]
    train = huse_texts[:20] + ADVERSARIAL_TEXTS + long_train
    candidates = huse_texts[:5] + ADVERSARIAL_TEXTS + long_candidates + extra
    kernel = fitted(train)
    _, reference = assert_matches_reference(kernel, candidates, train, rouge_score(kernel), 1e-12, [7, 30, 41])
    # F = 2 LCS / (len(x) + len(s)): the long pairs must have LCSs longer than one word.
    sizes = np.add.outer([len(text.split()) for text in long_candidates], AROUND_WORD_EDGES)
    lcs = reference[-len(extra) - len(long_candidates) : -len(extra), -len(long_train) :] * sizes / 2
    assert (lcs > BITS_PER_WORD).sum() >= 5 and round(lcs[-1, -1]) == 333 - 34, \
        "long texts must share LCSs that span several words"


def test_other_tokenizer_and_training_texts_as_candidates(huse_texts):
    train = ["Hello, world! It's 3.5 km.", "The U.S.A. is big; really big.", ""] + huse_texts[:10]
    kernel = fitted(train, Sacrebleu13aTokenizer())
    reference = rouge_score_matrix(kernel, train, train)
    ours = all_pairs(kernel, None, chunks=[4, 5, 5])
    np.testing.assert_allclose(ours.numpy(), reference, rtol=0, atol=1e-12)
    assert kernel.settings()["tok"] == "13a"


def test_tiles_concatenate_to_the_same_matrix(huse_texts):
    vocabulary = sorted(set(" ".join(huse_texts).split()))[:30]
    train = huse_texts[:40] + long_texts(vocabulary, AROUND_WORD_EDGES, seed=3) + ADVERSARIAL_TEXTS
    candidates = huse_texts[40:70] + long_texts(vocabulary, PAST_WORD_EDGES, seed=4) + ADVERSARIAL_TEXTS
    kernel = fitted(train)
    block_cuts = ([1], [5, 6, 49], list(range(3, len(train), 3)), [45, 46, 47, 48])
    chunk_cuts = [list(range(chunk, len(candidates), chunk)) for chunk in (3, 17)]
    whole = assert_tiling_invariant(
        kernel, candidates, [(blocks, []) for blocks in block_cuts] + [([9, 50], chunks) for chunks in chunk_cuts]
    )
    assert whole.shape == (len(candidates), len(train)) and whole.device == CPU
    assert kernel.tile(kernel.encode([]), 0, len(train)).shape == (0, len(train))
    assert kernel.tile(kernel.encode(candidates), 3, 3).shape == (len(candidates), 0)


def lcs_by_dynamic_programming(a: list[str], b: list[str]) -> int:
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b):
            current.append(previous[j] + 1 if token == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l_f(candidate: list[str], reference: list[str]) -> float:
    """F = 2PR/(P+R) as the fraction it equals, 2 LCS / (|x| + |s|), rounded once (Python's
    int / int is correctly rounded): the one float every device must give."""
    if not candidate or not reference:
        return 0.0
    return 2 * lcs_by_dynamic_programming(candidate, reference) / (len(candidate) + len(reference))


token_lists = st.lists(st.sampled_from(["a", "b", "c", "d", "é"]), max_size=140)


@settings(max_examples=40, deadline=None)
@given(train=st.lists(token_lists, min_size=1, max_size=5), candidates=st.lists(token_lists, max_size=5))
def test_random_sequences_match_a_plain_lcs(train, candidates):
    kernel = fitted([" ".join(tokens) for tokens in train])
    ours = kernel.tile(kernel.encode([" ".join(tokens) for tokens in candidates]), 0, len(train))
    expected = np.array([[rouge_l_f(c, s) for s in train] for c in candidates]).reshape(ours.shape)
    np.testing.assert_array_equal(ours.numpy(), expected)  # bit for bit: one rounding


def test_multiword_addition_carries_like_integers():
    rng = random.Random(5)
    words = 5
    all_ones = WORD_MODULUS - 1
    word_choices = [0, 1, all_ones, all_ones - 1, WORD_MODULUS // 2]
    a_rows, b_rows = [], []
    for _ in range(400):
        a_rows.append([rng.choice(word_choices + [rng.randrange(WORD_MODULUS)]) for _ in range(words)])
        b_rows.append([rng.choice(word_choices + [rng.randrange(WORD_MODULUS)]) for _ in range(words)])
    ours = add_words(torch.tensor(a_rows), torch.tensor(b_rows)).tolist()

    def as_int(row):
        return sum(word << (BITS_PER_WORD * k) for k, word in enumerate(row))

    for a, b, total in zip(a_rows, b_rows, ours):
        expected = (as_int(a) + as_int(b)) % (WORD_MODULUS**words)
        assert as_int(total) == expected
    assert any(as_int(a) + as_int(b) >= WORD_MODULUS**2 for a, b in zip(a_rows, b_rows))


def test_popcount_counts_bits():
    rng = random.Random(6)
    values = [0, 1, WORD_MODULUS - 1, (1 << 63) - 1] + [rng.randrange(1 << 63) for _ in range(1000)]
    assert popcount(torch.tensor(values)).tolist() == [bin(v).count("1") for v in values]


@pytest.mark.parametrize("leave_one_out", [False, True])
def test_scorer_results_do_not_depend_on_chunk_size(huse_texts, huse_scores, leave_one_out):
    train, scores = huse_texts[:120], huse_scores[:120]
    candidates = huse_texts[120:] + ADVERSARIAL_TEXTS
    assert_scorer_tiling_invariant("rouge", train, scores, candidates, leave_one_out)


def test_scorer_similarity_is_rouge_score(huse_texts, huse_scores):
    scorer = NeighborsScorer(kernel="rouge", estimator=Threshold.paper(), device="cpu", memory_budget=30_000,
                             chunk_size=11)
    scorer.fit(huse_texts[:50], huse_scores[:50])
    assert scorer.tau_ == 0.06 and "tok:whitespace" in str(scorer.signature)
    reference = rouge_score_matrix(scorer.kernel_, huse_texts[150:], huse_texts[:50])
    np.testing.assert_allclose(scorer.similarity(huse_texts[150:]).numpy(), reference, rtol=0, atol=1e-12)


def test_pair_bytes_grows_with_the_longest_training_text():
    short, long = fitted(["a b c"]), fitted([" ".join(["a"] * 300)])
    assert 0 < short.pair_bytes() < long.pair_bytes()


@pytest.mark.parametrize("stemmed", [False, True])
def test_the_kernel_with_rouge_scores_tokenization_equals_rouge_score(huse_texts, tmp_path, stemmed):
    """`Rouge(tokenizer="rouge-score[-stem]")`: the neighbour kernel's similarity is rouge-score's
    ROUGE-L F with its own tokenization (and Porter stemming), on mixed-case punctuated text; a
    scorer with it saves and loads by that name."""
    from rouge_score import rouge_scorer

    from gpu_neighbors import Rouge

    name = "rouge-score-stem" if stemmed else "rouge-score"
    train = [text.title() + "!" for text in huse_texts[:40]] + ["Running runners ran; RUNS, run."]
    candidates = [text.upper() for text in huse_texts[40:70]] + ["the runner runs", "", "12 --- ?"]
    scorer = NeighborsScorer(kernel=Rouge(tokenizer=name), device="cpu").fit(train, np.linspace(0, 1, len(train)))
    reference = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=stemmed)
    expected = np.array([[reference.score(s, c)["rougeL"].fmeasure for s in train] for c in candidates])
    np.testing.assert_allclose(scorer.similarity(candidates).numpy(), expected, rtol=0, atol=1e-12)
    assert scorer.kernel_.settings()["tok"] == name
    loaded = NeighborsScorer.load(scorer.save(tmp_path / name))
    assert torch.equal(loaded.similarity(candidates), scorer.similarity(candidates))


class ElementCount(TorchDispatchMode):
    """Elements of every tensor the aten operations make (an in-place one makes none): the work
    of a tile, counted (no timing)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func._schema.is_mutable:
            self.elements += sum(leaf.numel() for leaf in tree_leaves(out) if isinstance(leaf, torch.Tensor))
        return out


def tile_work(train: list[str], candidates: list[str]) -> tuple[int, torch.Tensor]:
    kernel = fitted(train)
    encoded = kernel.encode(candidates)
    with ElementCount() as count:
        tile = kernel.tile(encoded, 0, len(train))
    return count.elements, tile


@pytest.mark.parametrize("long_side", ["train", "candidates"])
def test_one_long_text_costs_its_own_length_not_every_pairs_padding(huse_texts, long_side):
    """A 3,000-token text among short ones: every pair was padded to it (its 49 bit-vector words,
    its 3,000 candidate positions), so one long text made a tile ~50x the work; now pairs are
    grouped by their training text's words and the candidates' tokens are not padded, so the
    tile does at most a few times the work of the short texts alone (that long text's tokens
    are as many as all the short ones'), with the same similarities."""
    train, candidates = huse_texts[:100], huse_texts[100:200]
    tokens = sum(len(text.split()) for text in (train if long_side == "train" else candidates))
    longest = long_texts(sorted(set(" ".join(huse_texts[:100]).split())), (tokens,), seed=7)
    short_work, short_tile = tile_work(train, candidates)
    if long_side == "train":
        work, tile = tile_work(train + longest, candidates)
        assert torch.equal(tile[:, :-1], short_tile)
        expected = [rouge_l_f(c.split(), longest[0].split()) for c in candidates]
        np.testing.assert_array_equal(tile[:, -1].numpy(), expected)
    else:
        work, tile = tile_work(train, candidates + longest)
        assert torch.equal(tile[:-1], short_tile)
        np.testing.assert_array_equal(tile[-1].numpy(), [rouge_l_f(longest[0].split(), s.split()) for s in train])
    assert work < 4 * short_work, (work, short_work)
