"""The perturbation checklist: its figures recomputed here from the scorer's estimates (means
over covered texts, a bootstrap drawn here, the lowest decile counted here), and verdicts that
follow what the scorer does: a bag-of-words scorer fails the shuffled row and passes word salad."""
from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence

import numpy as np
import pytest

from gpu_neighbors import NeighborsScorer
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.evaluation import tables
from gpu_neighbors.core.outside import lowest_decile_mean
from gpu_neighbors.evaluation.checklist import run_checklist, top_rated
from gpu_neighbors.text.perturbations import PERTURBATIONS, WordPool, perturb

TRAIN_SCORES = np.linspace(0.0, 1.0, 41)  # lowest decile: the 5 lowest (ceil(4.1)), mean 0.05


def prediction(scores: np.ndarray) -> Prediction:
    covered = np.isfinite(scores)
    return Prediction(scores, covered.astype(np.int64), np.zeros_like(scores), covered)


class BagOfWords:
    """Rates a text by its words alone, order ignored: 0.9 for the good texts' words, 0.1 for
    any other word (averaged); no estimate for an empty text."""

    train_scores_ = TRAIN_SCORES

    def __init__(self, good: Sequence[str]) -> None:
        self.words = {word for text in good for word in text.split()}

    def rate(self, text: str) -> float:
        words = text.split()
        return float(np.mean([0.9 if w in self.words else 0.1 for w in words])) if words else math.nan

    def predict(self, candidates: Sequence[str]) -> Prediction:
        return prediction(np.array([self.rate(text) for text in candidates]))


class Memorised:
    """0.9 for the exact good texts, 0.1 for anything else; no estimate for some copies (those
    whose CRC-32 is divisible by 3), so coverage is below 1."""

    train_scores_ = TRAIN_SCORES

    def __init__(self, good: Sequence[str]) -> None:
        self.good = set(good)

    def rate(self, text: str) -> float:
        if text in self.good:
            return 0.9
        return math.nan if zlib.crc32(text.encode()) % 3 == 0 else 0.1

    def predict(self, candidates: Sequence[str]) -> Prediction:
        return prediction(np.array([self.rate(text) for text in candidates]))


@pytest.fixture(scope="module")
def good(huse_texts: list[str]) -> list[str]:
    return list(dict.fromkeys(text for text in huse_texts if len(set(text.split())) >= 4))[:40]


@pytest.fixture(scope="module")
def pool(huse_texts: list[str]) -> WordPool:
    return WordPool.from_texts(huse_texts[100:])


def test_lowest_decile_and_top_rated() -> None:
    assert lowest_decile_mean(TRAIN_SCORES) == pytest.approx(np.mean(sorted(TRAIN_SCORES)[:5]))
    assert lowest_decile_mean([0.7, 0.2, 0.9]) == 0.2  # one score at least
    assert top_rated([0.1, 0.5, 0.49, 0.9], TRAIN_SCORES).tolist() == [1, 3]  # median 0.5
    with pytest.raises(ValueError, match="no training scores"):
        lowest_decile_mean([])


def test_a_bag_of_words_scorer_fails_the_shuffled_row(good: list[str], pool: WordPool) -> None:
    scorer = BagOfWords(good)
    result = run_checklist(scorer, good, vocabulary=pool, resamples=200)
    rows = {row.perturbation: row for row in result.rows}
    # independently: the means of the rated copies, and the target from the lowest decile
    original = np.mean([scorer.rate(text) for text in good])
    needed = (original - np.mean(sorted(TRAIN_SCORES)[:5])) / 2
    assert result.original_mean == pytest.approx(original) and result.needed == pytest.approx(needed)
    for name, row in rows.items():
        copies = perturb(good, name, seed=0, vocabulary=pool)
        assert row.mean == pytest.approx(np.mean([scorer.rate(copy) for copy in copies]))
        assert row.drop == pytest.approx(original - row.mean)
        assert row.passed == (original - row.mean >= needed)
    for name in ("shuffled", "reversed", "repeated", "duplicated", "truncated", "dropped"):
        assert rows[name].drop == pytest.approx(0.0, abs=1e-12) and not rows[name].passed, name
    assert rows["salad"].passed and rows["salad"].drop > 0.5  # salad words are rated 0.1 unless a good one
    assert not result.passed


def test_a_scorer_that_knows_good_texts_passes_every_row(good: list[str], pool: WordPool) -> None:
    result = run_checklist(Memorised(good), good, vocabulary=pool, resamples=200)
    assert result.passed and all(row.drop == pytest.approx(0.8) for row in result.rows)
    assert all(row.coverage < 1 for row in result.rows) and result.original_coverage == 1


def test_intervals_are_a_bootstrap_over_texts(good: list[str], pool: WordPool) -> None:
    scorer = Memorised(good[:20])  # half the texts rated 0.1 as originals: the drops vary
    resamples, seed = 300, 7
    result = run_checklist(scorer, good, vocabulary=pool, resamples=resamples, bootstrap_seed=seed,
                           perturbations=["shuffled", "salad"])
    texts = sorted(good)
    values = np.array([[scorer.rate(text) for text in batch]
                       for batch in (texts, *(perturb(texts, n, seed=0, vocabulary=pool) for n in ("shuffled", "salad")))]).T
    drawn = np.random.default_rng(seed).choice(len(texts), size=(resamples, len(texts)), replace=True)
    means = np.nanmean(values[drawn], axis=1)  # [resamples, originals + copies], each over its covered texts
    for j, row in enumerate(result.rows, start=1):
        drops = np.sort(means[:, 0] - means[:, j])
        low = resamples // 40
        assert (row.drop_low, row.drop_high) == pytest.approx((drops[low], drops[resamples - low - 1]))
        assert row.coverage == pytest.approx(np.isfinite(values[:, j]).mean())
        assert row.drop_low <= row.drop <= row.drop_high


def test_the_result_does_not_depend_on_the_texts_order(good: list[str], pool: WordPool) -> None:
    scorer = Memorised(good[:25])
    scores = np.linspace(0.5, 1.0, len(good))
    forward = run_checklist(scorer, good, scores=scores, vocabulary=pool, resamples=100)
    backward = run_checklist(scorer, good[::-1], scores=scores[::-1], vocabulary=list(pool.words)[::-1],
                             resamples=100)
    assert forward == backward


def test_a_real_scorer_and_the_outputs(huse_records: list[dict], pool: WordPool) -> None:
    train, held = huse_records[:150], huse_records[150:]
    scorer = NeighborsScorer(kernel="bleu").fit([r["text"] for r in train], [r["score"] for r in train])
    chosen = top_rated([r["score"] for r in held], scorer.train_scores_)
    texts, scores = [held[i]["text"] for i in chosen], [held[i]["score"] for i in chosen]
    result = run_checklist(scorer, texts, scores=scores, vocabulary=pool, resamples=100)
    assert result.texts == len(texts) and result.rated_mean == pytest.approx(np.mean(scores))
    assert result.original_mean == pytest.approx(np.nanmean(scorer.predict(texts).scores))
    assert result.decile_mean == pytest.approx(np.mean(sorted(r["score"] for r in train)[:15]))
    assert [row.perturbation for row in result.rows] == list(PERTURBATIONS)
    as_json = json.loads(tables.to_json(result.as_dict()))
    assert as_json["passed"] == result.passed and len(as_json["rows"]) == len(PERTURBATIONS)
    table = result.table()
    assert table.count("\n| ") == len(PERTURBATIONS) + 2  # the header, the originals, the copies
    assert "| original |" in table and "needed drop" in table


def test_refusals(good: list[str], pool: WordPool) -> None:
    scorer = BagOfWords(good)
    with pytest.raises(ValueError, match="at least one held-out text"):
        run_checklist(scorer, [], vocabulary=pool)
    with pytest.raises(ValueError, match="2 scores for 3 held-out texts"):
        run_checklist(scorer, good[:3], scores=[0.5, 0.5], vocabulary=pool)
    with pytest.raises(ValueError, match="unknown perturbation"):
        run_checklist(scorer, good[:3], vocabulary=pool, perturbations=["nonsense"])
