"""The scorer given what a training loop may hand it by mistake: each refused in one line naming
the argument, never paired or scored silently in an order the caller did not give."""
from __future__ import annotations

import pytest

from gpu_neighbors import NeighborsScorer

TRAIN = ["the cat sat on the mat", "a dog barked at night", "stocks fell sharply today"]
QUALITY = [0.2, 0.4, 0.9]


def scorer() -> NeighborsScorer:
    return NeighborsScorer(kernel="bleu", device="cpu", fluency="none")


@pytest.mark.parametrize("texts", [set(TRAIN), frozenset(TRAIN), dict.fromkeys(TRAIN)])
def test_unordered_or_mapped_training_texts_are_refused(texts):
    """A set fitted before, its texts in hash order against the scores in the caller's order: every
    score could land on another text. A dict fitted its keys."""
    with pytest.raises(TypeError, match=rf"training texts must be a sequence of strings in order, not a "
                                        rf"{type(texts).__name__}"):
        scorer().fit(texts, QUALITY)


@pytest.mark.parametrize("scores", [set(QUALITY), dict(zip(TRAIN, QUALITY)), {0: 0.2, 1: 0.4, 2: 0.9}])
def test_unordered_or_mapped_scores_are_refused(scores):
    """A dict of scores was read as its keys: {0: 0.2, 1: 0.4, 2: 0.9} fitted the scores 0, 1, 2,
    and a {text: score} mapping failed on "scores[0]: 'the cat...' (str) is not a number"."""
    with pytest.raises(TypeError, match=rf"scores must be a sequence of numbers in order, not a {type(scores).__name__}"):
        scorer().fit(TRAIN, scores)


def test_candidates_that_are_not_a_sequence_are_refused_by_name():
    """None and a number failed with "'NoneType' object is not iterable"; a set's estimates came
    back in an order the caller cannot map to its texts."""
    fitted = scorer().fit(TRAIN, QUALITY)
    for candidates, kind in ((None, "NoneType"), (3, "int"), (set(TRAIN), "set")):
        with pytest.raises(TypeError, match=f"candidates must be a sequence of strings.*not a {kind}"):
            fitted.predict(candidates)
    with pytest.raises(TypeError, match="training texts must be a sequence of strings.*not a NoneType"):
        scorer().fit(None, QUALITY)


def test_a_mappings_keys_and_values_views_fit_in_their_order():
    labelled = dict(zip(TRAIN, QUALITY))
    fitted = scorer().fit(labelled.keys(), labelled.values())
    assert list(fitted.kernel_.train_texts) == TRAIN and fitted.train_scores_.tolist() == QUALITY


def test_save_overwrite_is_true_or_false(tmp_path):
    """overwrite="no" replaced the saved scorer (any truthy value did)."""
    fitted = scorer().fit(TRAIN, QUALITY)
    fitted.save(tmp_path / "s")
    with pytest.raises(ValueError, match="overwrite must be True or False, not 'no'"):
        fitted.save(tmp_path / "s", overwrite="no")


def test_a_folder_that_is_not_a_path_is_refused_by_name():
    """load(None) failed in pathlib with "expected str, bytes or os.PathLike object"."""
    for folder in (None, 3):
        with pytest.raises(TypeError, match=f"folder must be a path .*not {type(folder).__name__}"):
            NeighborsScorer.load(folder)
    with pytest.raises(TypeError, match="folder must be a path .*not NoneType"):
        scorer().fit(TRAIN, QUALITY).save(None)
