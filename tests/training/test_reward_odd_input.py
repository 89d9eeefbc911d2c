"""Rewards and metrics given what a trainer or a user may hand them by mistake: refused when
made, by name, rather than at the trainer's first step or as a silently other setting."""
from __future__ import annotations

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
