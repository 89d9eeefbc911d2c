"""Perturbed copies: what each one does (checked against its definition, word by word), that a
copy depends on nothing but (seed, name, text, vocabulary), and the edge cases."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors.text.perturbations import (
    NEEDS_VOCABULARY,
    PERTURBATIONS,
    WordPool,
    perturb,
)

VOCABULARY = ["alpha", "beta", "gamma", "delta", "the", "food"]
EVERY = sorted(PERTURBATIONS)


def copies(texts: list[str], name: str, seed: int = 0) -> list[str]:
    return perturb(texts, name, seed=seed, vocabulary=VOCABULARY)


def test_the_issue_probes_are_registered() -> None:
    assert {"shuffled", "repeated", "dropped", "truncated", "replaced", "salad", "duplicated",
            "char_swaps", "reversed"} <= set(PERTURBATIONS)


@pytest.mark.parametrize("name", EVERY)
def test_a_copy_depends_on_its_text_alone(name: str, huse_texts: list[str]) -> None:
    texts = huse_texts[:60]
    together = copies(texts, name, seed=3)
    alone = [copies([text], name, seed=3)[0] for text in texts]
    backwards = copies(texts[::-1], name, seed=3)[::-1]
    assert together == alone == backwards
    # the vocabulary counts as a set: order and repeats do not change a copy
    shuffled_vocabulary = perturb(texts, name, seed=3, vocabulary=VOCABULARY[::-1] + VOCABULARY)
    assert shuffled_vocabulary == together


@pytest.mark.parametrize("name", sorted(n for n in PERTURBATIONS if n not in ("repeated", "truncated", "duplicated", "reversed")))
def test_the_seed_changes_random_copies(name: str, huse_texts: list[str]) -> None:
    texts = huse_texts[:40]
    assert copies(texts, name, seed=0) != copies(texts, name, seed=1)


def test_copies_do_not_depend_on_python_hash_randomization(huse_texts: list[str]) -> None:
    texts = huse_texts[:20]
    script = ("import json, sys\nfrom gpu_neighbors.text.perturbations import PERTURBATIONS, perturb\n"
              "texts = json.loads(sys.stdin.read())\n"
              f"print(json.dumps({{n: perturb(texts, n, seed=5, vocabulary={VOCABULARY!r}) for n in PERTURBATIONS}}))")
    runs = []
    for hash_seed in ("1", "2"):
        result = subprocess.run([sys.executable, "-c", script], input=json.dumps(texts), capture_output=True,
                                text=True, check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        runs.append(json.loads(result.stdout))
    assert runs[0] == runs[1] == {name: perturb(texts, name, seed=5, vocabulary=VOCABULARY) for name in PERTURBATIONS}


@pytest.mark.parametrize("name", EVERY)
def test_real_texts_always_change(name: str, huse_texts: list[str]) -> None:
    texts = [text for text in huse_texts[:300] if len(set(text.split())) >= 4]
    for text, copy in zip(texts, copies(texts, name)):
        assert copy.split() != text.split(), (name, text)


@pytest.mark.parametrize("name", EVERY)
def test_empty_and_whitespace_texts_stay_empty(name: str) -> None:
    assert copies(["", "   ", "\t\n"], name) == ["", "", ""]


def test_what_one_word_becomes() -> None:
    # where a copy cannot differ it is the text; where it can (duplicated, random words) it does
    one = {name: copies(["word"], name)[0] for name in EVERY}
    assert {name for name, copy in one.items() if copy == "word"} == {
        "shuffled", "repeated", "dropped", "truncated", "reversed"}
    assert one["char_swaps"] != "word" and sorted(one["char_swaps"]) == sorted("word")
    assert one["duplicated"] == "word word"
    assert one["replaced"] in VOCABULARY and one["salad"] in VOCABULARY


def test_texts_that_cannot_change() -> None:
    assert copies(["a a a"], "shuffled") == ["a a a"]
    assert copies(["a b c a b c a"], "repeated") == ["a b c a b c a"]
    assert copies(["a b a"], "reversed") == ["a b a"]
    assert copies(["aa bb c"], "char_swaps") == ["aa bb c"]
    assert perturb(["only"], "salad", vocabulary=["only"]) == ["only"]  # no other word to draw


word_lists = st.lists(st.sampled_from(["a", "b", "cc", "dog", "ab", "the", "alpha", "xyz"]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(words=word_lists, seed=st.integers(0, 2 ** 40))
def test_each_copy_is_what_its_name_says(words: list[str], seed: int) -> None:
    text = " ".join(words)
    n = len(words)
    out = {name: perturb([text], name, seed=seed, vocabulary=VOCABULARY)[0].split() for name in EVERY}
    assert Counter(out["shuffled"]) == Counter(words)
    assert out["shuffled"] != words or len(set(words)) < 2
    assert out["reversed"] == list(reversed(words))
    assert out["duplicated"] == words * 2
    assert out["truncated"] == words[:max(1, n // 2)]
    phrase = words[:max(1, min(3, n - 1))]
    assert out["repeated"] == [phrase[i % len(phrase)] for i in range(n)]
    # dropped: an order-keeping subsequence, 30% shorter (at least one word gone, one kept)
    kept = out["dropped"]
    expected_length = n if n < 2 else n - min(n - 1, max(1, round(0.3 * n)))
    assert len(kept) == expected_length
    remaining = iter(words)
    assert all(word in remaining for word in kept)
    # replaced: a third of the positions hold another vocabulary word; salad: every position
    changed = [i for i in range(n) if out["replaced"][i] != words[i]]
    assert len(out["replaced"]) == n and len(changed) == (max(1, round(n / 3)) if n else 0)
    assert all(out["replaced"][i] in VOCABULARY for i in changed)
    assert len(out["salad"]) == n
    assert all(new in VOCABULARY and new != old for new, old in zip(out["salad"], words))
    # char_swaps: the same characters, disjoint adjacent pairs swapped inside words
    swapped = " ".join(out["char_swaps"])
    assert len(swapped) == len(text) and Counter(swapped) == Counter(text)
    differing = [i for i in range(len(text)) if swapped[i] != text[i]]
    possible = any(text[i] not in " " and text[i + 1] not in " " and text[i] != text[i + 1]
                   for i in range(len(text) - 1))
    assert (len(differing) > 0) == possible
    assert len(differing) <= 2 * max(1, round(n / 3)) and len(differing) % 2 == 0
    for i in differing[::2]:
        assert swapped[i] == text[i + 1] and swapped[i + 1] == text[i] and " " not in text[i:i + 2]


@pytest.mark.parametrize("name", EVERY)
def test_adversarial_texts(name: str) -> None:
    out = copies(ADVERSARIAL_TEXTS, name)
    assert len(out) == len(ADVERSARIAL_TEXTS)
    for text, copy in zip(ADVERSARIAL_TEXTS, out):
        assert copy == " ".join(copy.split())  # single spaces
        assert bool(copy) == bool(text.split())


def test_refusals() -> None:
    with pytest.raises(ValueError, match="unknown perturbation 'typo'"):
        perturb(["a"], "typo")
    for name in NEEDS_VOCABULARY:
        with pytest.raises(ValueError, match="non-empty vocabulary"):
            perturb(["a"], name)
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError, match="seed must be a non-negative integer"):
            perturb(["a"], "shuffled", seed=seed)  # type: ignore[arg-type]


def test_word_pool_from_texts() -> None:
    pool = WordPool.from_texts(["b a", " c  a ", ""])
    assert pool.words == ("a", "b", "c") and len(pool) == 3
