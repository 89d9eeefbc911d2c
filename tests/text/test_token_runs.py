"""Tokens read from code points (`text.token_runs`) against the whitespace tokenizer's: the same
tokens, ids, endings and characters, and the same typicality statistics, on real and
adversarial text; hash collisions fall back to the tokenizer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu_neighbors.text import token_runs
from gpu_neighbors.text.token_runs import RunVocabulary, split_tokens
from gpu_neighbors.text.tokenizers import make_tokenizer
from gpu_neighbors.text.typicality import Tokens, Typicality
from tests.conftest import ADVERSARIAL_TEXTS

CPU = torch.device("cpu")
ODD_TEXTS = ["", "   ", " a ", "a\u00a0b c\u2003d e\x85f", "x\x1cy\x1dz", "\ud800 lone \udfff", "é É e\u0301",
             "tab\tnew\nline\r\n", "nul\x00inside", "emoji 🙂🙂 🙂", "the the the", "_ __ -", "a", "a a",
             "the resturant servd restaurnat food"]


def canonical(identities: torch.Tensor, known: torch.Tensor) -> list[list[int]]:
    """Identities with the unknown ones renumbered by first appearance (only equality counts)."""
    names: dict[int, int] = {}
    return [[value if is_known or value < 0 else names.setdefault(value, -10 - len(names))
             for value, is_known in zip(row, known_row)]
            for row, known_row in zip(identities.tolist(), known.tolist())]


@pytest.fixture(scope="module")
def training(huse_records) -> list[str]:
    return [record["text"] for record in huse_records[:120]] + ["a\u00a0b", "é", "🙂 the", "a resturant servd"]


@pytest.mark.parametrize("lowercase", [False, True])
def test_the_same_tokens_as_the_tokenizer(training, huse_records, lowercase):
    tokenizer = make_tokenizer("whitespace", lowercase=lowercase)
    typicality = Typicality(training, tokenizer, CPU)
    texts = [record["text"] for record in huse_records[120:160]] + ADVERSARIAL_TEXTS + ODD_TEXTS
    split = split_tokens([text.lower() for text in texts] if lowercase else texts, typicality._runs)
    assert split is not None
    fast = Tokens.of_split(split, typicality.vocab_size, typicality._misspelt_once, "en", CPU)
    slow = Tokens.of(tokenizer.tokenize_many(texts), typicality.vocabulary, typicality.wordlike,
                     typicality._misspelt_once, "en", CPU)
    assert fast.misspelt.any() and not fast.misspelt.all()  # both kinds, unseen tokens among them
    assert (fast.misspelt & (fast.ids == -1)).any() and (fast.misspelt & (fast.ids >= 0)).any()
    for name in ("ids", "lengths", "endings", "characters", "misspelt"):
        assert torch.equal(getattr(fast, name), getattr(slow, name)), name
    known = fast.ids >= 0
    assert canonical(fast.identities, known) == canonical(slow.identities, known)


@pytest.mark.parametrize("lowercase", [False, True])
def test_the_same_statistics_as_through_the_tokenizer(training, huse_records, lowercase):
    typicality = Typicality(training, make_tokenizer("whitespace", lowercase=lowercase), CPU)
    texts = [record["text"] for record in huse_records[120:200]] + ADVERSARIAL_TEXTS + ODD_TEXTS
    calls = [lambda: typicality.of_texts(texts), lambda: typicality.of_texts(training, own=True),
             lambda: typicality.of_texts(texts[:len(training)], originals=training[:len(texts)])]
    fast = [call().numpy() for call in calls]
    typicality.__dict__["_runs"] = None  # the tokenizer's path
    for got, call in zip(fast, calls):
        assert got.tobytes() == call().numpy().tobytes()  # NaN rows alike


def test_colliding_hashes_fall_back_to_the_tokenizer(training, huse_records, monkeypatch):
    """Every hash equal: the vocabulary cannot be indexed (None), and a batch whose unknown
    tokens collide is refused (None); either way the statistics are the tokenizer's."""
    texts = [record["text"] for record in huse_records[120:140]] + ODD_TEXTS
    typicality = Typicality(training, make_tokenizer("whitespace"), CPU)
    expected = typicality.of_texts(texts).numpy()
    vocabulary = typicality._runs
    monkeypatch.setattr(token_runs, "_LOW_63", np.uint64(0))
    assert RunVocabulary.of(["a", "b"]) is None
    assert split_tokens(["x y", "z"], vocabulary) is None
    assert typicality.of_texts(texts).numpy().tobytes() == expected.tobytes()
    assert Typicality(training, make_tokenizer("whitespace"), CPU)._runs is None


def test_an_empty_vocabulary_knows_no_token():
    typicality = Typicality(["", "   "], make_tokenizer("whitespace"), CPU)
    split = split_tokens(["a b", "", "c"], typicality._runs)
    assert split is not None and split.ids.tolist() == [-1, -1, -1] and split.lengths.tolist() == [2, 0, 1]
    assert sorted(split.unknown_rank.tolist()) == [0, 1, 2] and split.endings.tolist() == [ord("b"), -1, ord("c")]


def test_other_tokenizers_keep_their_own_path():
    assert Typicality(["a b"], make_tokenizer("13a"), CPU)._runs is None


def test_a_suggested_match_counts_only_with_the_same_code_points():
    """A hash only suggests a match; the code points decide (here the candidates are given)."""
    from gpu_neighbors.text.characters import CodePoints
    from gpu_neighbors.text.token_runs import Runs

    def runs(tokens: list[str]) -> Runs:
        points = CodePoints.of(tokens)
        return Runs.of(points.codes, np.diff(points.bounds))

    mine, other = runs(["ab", "cd", "ef", "g"]), runs(["ab", "ce", "efg", "g"])
    same = mine.same_as(np.array([0, 1, 2, 0]), np.array([True, True, True, True]), other)
    assert same.tolist() == [True, False, False, False]
    assert mine.same_as(np.array([0, 1, 2, 3]), np.array([False, True, True, True]), other).tolist() == [
        False, False, False, True]
