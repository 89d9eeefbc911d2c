"""Rewards and metrics given what a trainer or a user may hand them by mistake: refused when
made, by name, rather than at the trainer's first step or as a silently other setting."""
from __future__ import annotations

import re

import pytest

from gpu_neighbors import AlignedBleu, AlignedRouge, BleuReward, NeighborsScorer, RougeReward, reward_function

TRAIN = ["the cat sat on the mat", "a dog barked at night", "stocks fell sharply today", "the cat slept"]
QUALITY = [0.2, 0.4, 0.9, 0.3]


@pytest.fixture(scope="module")
def scorer() -> NeighborsScorer:
    return NeighborsScorer(kernel="bleu", device="cpu", fluency="none").fit(TRAIN, QUALITY)


@pytest.mark.parametrize("make", [
    lambda scorer: reward_function(scorer, token_ids="no"),  # made the ids path, asking for completion_ids
    lambda scorer: BleuReward(effective_order="no"),  # "no" averaged over the orders reached
    lambda scorer: BleuReward(auto_reweigh="no"),
])
def test_flags_are_true_or_false(scorer, make):
    with pytest.raises(ValueError, match=r"(token_ids|effective_order|auto_reweigh) must be True or False, not 'no'"):
        make(scorer)


def test_one_conversation_as_completions_is_refused(scorer):
    """A message dict passed as `completions` was iterated as its keys: "role" and "content"
    scored as two completions (or refused as a count mismatch with one prompt)."""
    message = {"role": "assistant", "content": "the cat sat"}
    for function in (reward_function(scorer), reward_function(BleuReward())):
        with pytest.raises(TypeError, match="completions must be a list of completions .*not a dict"):
            function(["p", "p"], message, reference=["the cat", "the cat"])


def test_a_reference_column_that_is_one_string_is_refused():
    """reference="the cat" (one string, not a column) was read one character a row: "references:
    give one entry per candidate (1), got 7"."""
    with pytest.raises(ValueError, match="the column 'reference' is one string, not one entry per completion"):
        reward_function(BleuReward())(["p"], ["the cat"], reference="the cat")


@pytest.mark.parametrize("make", [
    lambda: BleuReward(column=3), lambda: RougeReward(column=None), lambda: BleuReward(column=""),
    lambda scorer=None: reward_function(BleuReward(), name=3), lambda: reward_function(BleuReward(), name=""),
])
def test_column_and_name_are_non_empty_strings(make):
    """A column of 3 or None was taken and failed at the trainer's first step ("the dataset has no
    column 3"); name="" became "bleu" silently, and name=3 made a __name__ that is not a string."""
    with pytest.raises(TypeError, match=r"(column|name) must be a non-empty string, not"):
        make()


@pytest.mark.parametrize(("make", "message"), [
    (lambda: AlignedBleu(vocab_size=0), "vocab_size must be a positive integer"),
    (lambda: AlignedRouge(vocab_size="x"), "vocab_size must be a positive integer"),
    (lambda: AlignedRouge(use_stemmer="no"), "use_stemmer must be True or False"),
    (lambda: AlignedRouge(tokenizer=3), "tokenizer must be a tokenizer name or a Tokenizer, not int"),
    (lambda: AlignedBleu(tokenizer=3), "tokenizer must be a tokenizer name or a Tokenizer, not int"),
    (lambda: BleuReward(tokenizer=None), "tokenizer must be a tokenizer name or a Tokenizer, not NoneType"),
])
def test_metric_settings_are_checked_when_made(make, message):
    """Each was taken by the constructor and failed at the first update or compute; a tokenizer
    of 3 with "'int' object has no attribute 'removeprefix'"."""
    with pytest.raises((TypeError, ValueError), match=message):
        make()


@pytest.mark.parametrize("setting", [BleuReward(column="gold"), RougeReward(column="gold")])
def test_a_reference_column_of_another_length_is_named(setting):
    """A column one entry short read "references: give one entry per candidate (2), got 1", naming
    neither the column nor the reward."""
    reward = reward_function(setting)
    with pytest.raises(ValueError, match=rf"{reward.__name__}: the column 'gold' has 1 entry but there are 2 "
                                         "completions"):
        reward(["p", "p"], ["the cat", "a dog"], gold=["the cat"])


def test_a_folder_that_is_not_there_is_named(tmp_path):
    """reward_function("scorre") said "... not str (no such folder)": which string, it did not say;
    and a saved scorer's file (not its folder) was called no such folder."""
    (tmp_path / "scorer.json").write_text("{}", encoding="utf-8")
    for path in ("scorre", tmp_path / "scorer.json"):
        with pytest.raises(TypeError, match=re.escape(f"not {type(path).__name__} {str(path)!r} (not a folder)")):
            reward_function(path)
