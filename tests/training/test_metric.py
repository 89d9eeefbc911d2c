"""NeighborsQuality: a torchmetrics metric whose states add up across (simulated) DDP ranks."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import gpu_neighbors
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
from minilm import MODEL_PATH

# The [metrics] extra: CI installs it; where it is absent (a bare environment) the tests that
# use it skip, named, and those about its absence still run.
needs_torchmetrics = pytest.mark.skipif(importlib.util.find_spec("torchmetrics") is None,
                                        reason="torchmetrics (the [metrics] extra) is not installed")

TRAIN_SIZE = 150


@pytest.fixture(scope="module")
def scorer(huse_texts, huse_scores) -> NeighborsScorer:
    return NeighborsScorer(kernel=Bleu(tokenizer=HuggingFaceTokenizer(MODEL_PATH)), device="cpu").fit(
        huse_texts[:TRAIN_SIZE], huse_scores[:TRAIN_SIZE]
    )


@pytest.fixture(scope="module")
def candidates(huse_texts) -> list[str]:
    return huse_texts[TRAIN_SIZE:] + huse_texts[:20] + ["", "   ", "zzz qqq"]


def batches(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def expected(scorer: NeighborsScorer, texts: list[str]) -> tuple[float, float, int, float, float]:
    """What `predict` says of the texts: the metric's figures computed from its output."""
    prediction = scorer.predict(texts)
    return (float(np.nanmean(prediction.scores)), float(prediction.covered.mean()), len(texts),
            float(np.nanmean(prediction.low)), float(np.nanmean(prediction.high)))


def assert_result(result: dict, quality: float, coverage: float, count: int, low: float, high: float) -> None:
    assert set(result) == {"quality", "coverage", "count", "low", "high"}
    assert result["quality"].item() == pytest.approx(quality, rel=1e-12)
    assert result["coverage"].item() == pytest.approx(coverage, rel=1e-12)
    assert result["count"].item() == count
    assert result["low"].item() == pytest.approx(low, rel=1e-12)
    assert result["high"].item() == pytest.approx(high, rel=1e-12)
    assert low < quality < high


@needs_torchmetrics
def test_lazy_export_is_the_metric():
    from gpu_neighbors.training.metric import NeighborsQuality

    assert gpu_neighbors.NeighborsQuality is NeighborsQuality
    assert issubclass(NeighborsQuality, importlib.import_module("torchmetrics").Metric)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        gpu_neighbors.Nope  # noqa: B018


def test_importing_the_package_does_not_import_torchmetrics():
    code = "import sys, gpu_neighbors; sys.exit('torchmetrics' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_without_torchmetrics_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchmetrics", None)
    monkeypatch.delitem(sys.modules, "gpu_neighbors.training.metric", raising=False)
    with pytest.raises(ImportError, match=r"gpu-neighbors\[metrics\]"):
        gpu_neighbors.NeighborsQuality  # noqa: B018


@needs_torchmetrics
def test_texts_over_batches_equal_one_prediction(scorer, candidates):
    metric = gpu_neighbors.NeighborsQuality(scorer)
    for batch in batches(candidates, 16):
        metric.update(batch)
    assert_result(metric.compute(), *expected(scorer, candidates))
    metric.reset()
    metric.update(candidates[:5])
    assert_result(metric.compute(), *expected(scorer, candidates[:5]))


@needs_torchmetrics
def test_token_ids_equal_texts(scorer, candidates):
    hf = scorer.kernel_.tokenizer.hf
    metric = gpu_neighbors.NeighborsQuality(scorer)
    decoded = []
    for batch in batches(candidates, 16):
        encoded = hf(batch, padding=True, return_tensors="pt")
        metric.update(encoded["input_ids"], attention_mask=encoded["attention_mask"])
        decoded += hf.batch_decode(encoded["input_ids"], skip_special_tokens=True)
    assert_result(metric.compute(), *expected(scorer, decoded))


@needs_torchmetrics
def test_nothing_covered_or_nothing_seen_is_nan(scorer):
    metric = gpu_neighbors.NeighborsQuality(scorer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics warns about compute before update
        empty = metric.compute()
    assert empty["quality"].isnan() and empty["coverage"].isnan() and empty["count"] == 0
    metric.update(["zzz qqq", ""])
    result = metric.compute()
    assert result["quality"].isnan() and result["coverage"] == 0 and result["count"] == 2


class SimulatedGroup:
    """all_gather across metrics that stand for the ranks of one process group: gathering a
    rank's state returns that state from every rank, in rank order (what torch.distributed's
    all_gather gives torchmetrics under DDP)."""

    def __init__(self) -> None:
        self.ranks: list = []  # the metrics of the simulated ranks

    def gather(self, tensor: torch.Tensor, group=None) -> list[torch.Tensor]:
        for rank in self.ranks:
            for name in rank._defaults:
                if getattr(rank, name) is tensor:
                    return [getattr(other, name).clone() for other in self.ranks]
        raise AssertionError("gathered a tensor that is no metric state")


@needs_torchmetrics
@pytest.mark.parametrize("split", [[0, 0, 1, 1, 0, 1], [0, 0, 0, 0, 0, 1]])
def test_two_ranks_reduce_to_the_single_process_result(scorer, candidates, split):
    """Each rank sees some batches (unevenly in the second split); after the DDP reduction both
    ranks report what one process that saw every batch reports."""
    group = SimulatedGroup()
    ranks = [
        gpu_neighbors.NeighborsQuality(
            scorer, dist_sync_fn=group.gather, distributed_available_fn=lambda: True
        )
        for _ in range(2)
    ]
    group.ranks = ranks
    single = gpu_neighbors.NeighborsQuality(scorer)
    for rank, batch in zip(split, batches(candidates, 13)):
        ranks[rank].update(batch)
        single.update(batch)
    assert ranks[0].total.item() + ranks[1].total.item() == len(candidates)
    assert all(rank.total.item() > 0 for rank in ranks)
    want = single.compute()
    for rank in ranks:
        got = rank.compute()
        assert got["count"].item() == len(candidates)
        assert torch.equal(got["count"], want["count"])
        assert got["quality"].item() == pytest.approx(want["quality"].item(), rel=1e-12)
        assert got["coverage"].item() == pytest.approx(want["coverage"].item(), rel=1e-12)
    assert_result(want, *expected(scorer, candidates))
    assert ranks[0].total.item() < len(candidates)  # compute() left the local state in place


@needs_torchmetrics
def test_fitted_scorer_required():
    with pytest.raises(RuntimeError, match="not fitted"):
        gpu_neighbors.NeighborsQuality(NeighborsScorer())


@needs_torchmetrics
def test_aligned_bleu_over_ranks_equals_nltk(huse_texts):
    """AlignedBleu on two simulated ranks (uneven batches) reports NLTK's corpus BLEU and the
    mean of NLTK's sentence BLEU over every sample, as one process would."""
    from nltk.translate import bleu_score

    candidates = huse_texts[:60] + ["", "a"]
    references = [[huse_texts[(i + 1) % 60], text] if i % 2 else [text[: len(text) // 2]]
                  for i, text in enumerate(candidates)]
    method = bleu_score.SmoothingFunction().method3
    nltk_refs = [[r.split() for r in refs] for refs in references]
    nltk_hyps = [c.split() for c in candidates]
    sentence = np.mean([bleu_score.sentence_bleu(r, h, smoothing_function=method)
                        for r, h in zip(nltk_refs, nltk_hyps)])
    corpus = bleu_score.corpus_bleu(nltk_refs, nltk_hyps, smoothing_function=method)
    group = SimulatedGroup()
    ranks = [gpu_neighbors.AlignedBleu(smoothing="exp", dist_sync_fn=group.gather,
                                       distributed_available_fn=lambda: True) for _ in range(2)]
    group.ranks = ranks
    for index, first in enumerate(range(0, len(candidates), 11)):
        ranks[int(index >= 4)].update(candidates[first:first + 11], references[first:first + 11])
    for rank in ranks:
        got = rank.compute()
        assert got["count"].item() == len(candidates)
        assert got["sentence_bleu"].item() == pytest.approx(sentence, abs=1e-9)
        assert got["corpus_bleu"].item() == pytest.approx(corpus, abs=1e-9)


@needs_torchmetrics
def test_aligned_bleu_on_token_ids_takes_the_vocabulary_size():
    """With vocab_size the id path skips a sort and gives the same values; an id at or above it
    is refused (on the CPU the device-side check raises at once)."""
    generator = torch.Generator().manual_seed(0)
    candidates = torch.randint(1, 50, (6, 12), generator=generator)
    references = torch.where(torch.rand((6, 12), generator=generator) < 0.3,
                             torch.randint(1, 50, (6, 12), generator=generator), candidates)
    results = []
    for vocab_size in (None, 50):
        metric = gpu_neighbors.AlignedBleu(smoothing="epsilon", vocab_size=vocab_size)
        metric.update(candidates, references)
        results.append(metric.compute())
    for key in ("sentence_bleu", "corpus_bleu"):
        assert results[0][key].item() == results[1][key].item()
    with pytest.raises(RuntimeError):
        gpu_neighbors.AlignedBleu(vocab_size=10).update(candidates, references)


def test_aligned_rouge_over_ranks_equals_rouge_score(huse_texts):
    """AlignedRouge on two simulated ranks (uneven batches) reports the mean of rouge-score's
    score_multi over every sample, under torchmetrics' ROUGEScore keys, as one process would."""
    from rouge_score import rouge_scorer

    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    candidates = huse_texts[:60] + ["", "A b.\nC d"]
    references = [[huse_texts[(i + 1) % 60], text.replace(" ", "\n", 2)] if i % 2 else [text[: len(text) // 2]]
                  for i, text in enumerate(candidates)]
    scorer = rouge_scorer.RougeScorer(types, use_stemmer=True)
    scores = [scorer.score_multi(refs, candidate) for candidate, refs in zip(candidates, references)]
    group = SimulatedGroup()
    ranks = [gpu_neighbors.AlignedRouge(use_stemmer=True, dist_sync_fn=group.gather,
                                        distributed_available_fn=lambda: True) for _ in range(2)]
    group.ranks = ranks
    for index, first in enumerate(range(0, len(candidates), 11)):
        ranks[int(index >= 4)].update(candidates[first:first + 11], references[first:first + 11])
    for rank in ranks:
        got = rank.compute()
        assert got["count"].item() == len(candidates)
        for name in types:
            for field in ("precision", "recall", "fmeasure"):
                want = np.mean([getattr(score[name], field) for score in scores])
                assert got[f"{name}_{field}"].item() == pytest.approx(want, abs=1e-12)
    ids = gpu_neighbors.AlignedRouge(rouge_types=["rougeL"], vocab_size=50)
    ids.update(torch.tensor([[1, 2, 3, 4]]), torch.tensor([[1, 3, 4, 9]]))
    assert ids.compute()["rougeL_fmeasure"].item() == 0.75
