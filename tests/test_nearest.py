"""Each candidate's nearest similarity read off the running top k where it keeps the same pairs
(`TopKReduction.nearest`), instead of a second reduction over every tile: the same bits in every
output, and the second reduction gone from the passes that may skip it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core import neighbours
from gpu_neighbors.core.neighbours import TrainingSubset
from gpu_neighbors.core.topk import TopKReduction


def _outputs(scorer: NeighborsScorer, texts: list[str]) -> list[np.ndarray]:
    """Every array of predict (with neighbours shown and without) and of leave-one-out."""
    arrays = []
    for prediction in (scorer.predict(texts), scorer.predict(texts, return_neighbors=3), scorer.leave_one_out()):
        for field in dataclasses.fields(prediction):
            value = getattr(prediction, field.name)
            if isinstance(value, np.ndarray):
                arrays.append(value)
            elif isinstance(value, neighbours.Neighbors):
                arrays.extend([value.index, value.similarity, value.score])
    return arrays


def _fit(texts: list[str], scores: list[float]) -> NeighborsScorer:
    return NeighborsScorer(kernel="tfidf", device="cpu", fluency=None).fit(texts[:150], scores[:150], tune=False)


@pytest.fixture(scope="module")
def fitted(huse_texts, huse_scores) -> NeighborsScorer:
    return _fit(huse_texts, huse_scores)


def test_the_nearest_off_the_top_k_is_the_second_reductions(fitted, huse_texts, huse_scores, monkeypatch):
    """Fitting too (its calibration passes leave each sampled training text out of its own
    neighbours: `WithoutOwn`), and leave-one-out."""
    candidates = huse_texts[150:260]
    fused = _outputs(fitted, candidates)
    monkeypatch.setattr(TopKReduction, "keeps_nearest", lambda self, leave_one_out: False)
    apart = _outputs(_fit(huse_texts, huse_scores), candidates)
    assert len(fused) == len(apart)
    for one, other in zip(fused, apart):
        assert one.dtype == other.dtype
        assert np.array_equal(one.view(np.uint8), other.view(np.uint8))  # bit for bit, NaN and signed zeros too


def test_a_default_predict_and_leave_one_out_feed_no_nearest_reduction(fitted, huse_texts, monkeypatch):
    """The nearest comes off the top k: no second reduction reads the tiles (it read each tile
    once more, 3% of a default predict)."""
    fed = []
    monkeypatch.setattr(neighbours.NearestReduction, "add", lambda self, tile: fed.append(tile))
    fitted.predict(huse_texts[150:200])
    fitted.leave_one_out()
    assert not fed


def test_a_subsets_nearest_is_still_to_the_whole_training_set(fitted, huse_texts):
    """With a subset the top k keeps only its texts, while the nearest is to every training
    text: the nearest there still comes from its own reduction."""
    candidates = huse_texts[150:200]
    mask = torch.zeros(150, dtype=torch.bool)
    mask[:10] = True
    inside = fitted.predict_tensors(candidates, subset=TrainingSubset(mask, 10))
    whole = fitted.predict_tensors(candidates)
    assert torch.equal(inside.nearest, whole.nearest)
