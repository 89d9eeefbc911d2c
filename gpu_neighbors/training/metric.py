"""`NeighborsQuality`: the neighbour estimate, and `AlignedBleu` and `AlignedRouge`: BLEU and ROUGE
of each sample against its own references, as torchmetrics metrics for validation loops.

Every state is a sum (estimates of covered texts, covered texts, texts seen), so under DDP the
per-rank states add up to exactly the states of one process that saw every batch; the mean is
taken only in `compute`. torchmetrics is an optional extra (`pip install gpu-neighbors[metrics]`).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from gpu_neighbors.core.validation import check_flag
from gpu_neighbors.kernels.aligned_bleu import References, aligned_counts, check_aligned_weights, check_vocab_size
from gpu_neighbors.kernels.aligned_rouge import ROUGE_TYPES, check_rouge_types, rouge
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS, bleu_from_counts
from gpu_neighbors.kernels.bleu_tables import check_smoothing
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.text.tokenizers import Tokenizer, make_tokenizer

try:
    from torchmetrics import Metric
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "NeighborsQuality needs torchmetrics: pip install 'gpu-neighbors[metrics]'"
    ) from error


class NeighborsQuality(Metric):
    """Mean estimated quality of generated texts or token ids, with coverage and count.

    `update(texts)` or `update(input_ids, attention_mask=None)` (token ids need the bleu kernel
    with the model's Hugging Face tokenizer; see `NeighborsScorer.predict_ids`). `compute()`
    returns {"quality": mean estimate over covered texts (NaN if none), "coverage": covered
    share (NaN if nothing seen), "count": texts seen, "low", "high": the means of the covered
    texts' interval ends at the scorer's `level` (each text's interval holds its own truth with
    that probability, `conformal.py`; their mean ends describe how sure the estimates are, and
    are not an interval for the mean quality)}.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    quality_sum: torch.Tensor
    low_sum: torch.Tensor
    high_sum: torch.Tensor
    covered: torch.Tensor
    total: torch.Tensor

    def __init__(self, scorer: NeighborsScorer | str | os.PathLike[str], **kwargs: Any) -> None:
        """`scorer`: a fitted scorer, or a saved scorer's folder (`NeighborsScorer.save`)."""
        super().__init__(**kwargs)
        self.scorer = NeighborsScorer.fitted(scorer)
        for name in ("quality_sum", "low_sum", "high_sum"):
            self.add_state(name, torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("covered", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(
        self, inputs: torch.Tensor | Sequence[str], attention_mask: torch.Tensor | None = None
    ) -> None:
        prediction = self.scorer.predict_tensors(inputs, attention_mask=attention_mask)
        device = self.total.device
        low, high = self.scorer.intervals(prediction)
        for state, values in ((self.quality_sum, prediction.scores), (self.low_sum, low), (self.high_sum, high)):
            state += torch.where(prediction.covered, values, 0.0).sum().to(device, state.dtype)
        self.covered += prediction.covered.sum().to(device)
        self.total += prediction.covered.numel()

    def compute(self) -> dict[str, torch.Tensor]:
        covered = self.covered.to(torch.float64)
        return {
            "quality": self.quality_sum / covered,
            "low": self.low_sum / covered,
            "high": self.high_sum / covered,
            "coverage": covered / self.total.to(torch.float64),
            "count": self.total.clone(),
        }


class AlignedBleu(Metric):
    """Mean sentence BLEU and corpus BLEU of samples against their own references.

    `update(candidates, references, ...)` takes what `gpu_neighbors.sentence_bleu` takes (texts,
    or token ids with masks and `reference_counts`; token ids stay on their device with no host
    sync). `compute()` returns {"sentence_bleu": mean of NLTK's sentence_bleu over the samples
    (NaN before any update), "corpus_bleu": NLTK's corpus_bleu of all of them, "count"}.
    `vocab_size` (token ids: the tokenizer's size) lets the id path skip a sort. Every
    state is a sum (of sentence BLEU, of clipped matches and n-gram totals per order, of lengths),
    so DDP ranks add up to one process that saw every batch.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    bleu_sum: torch.Tensor
    total: torch.Tensor
    matches: torch.Tensor
    totals: torch.Tensor
    lengths: torch.Tensor
    reference_lengths: torch.Tensor

    def __init__(self, weights: Sequence[float] = BLEU4_WEIGHTS, smoothing: str = "none",
                 tokenizer: str | Tokenizer = "whitespace", vocab_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocab_size = None if vocab_size is None else check_vocab_size(vocab_size)
        self.weights = check_aligned_weights(weights)
        self.smoothing = check_smoothing(smoothing)
        self.tokenizer = make_tokenizer(tokenizer)
        orders = len(self.weights)
        self.add_state("bleu_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        for name in ("matches", "totals"):
            self.add_state(name, torch.zeros(orders, dtype=torch.int64), dist_reduce_fx="sum")
        for name in ("lengths", "reference_lengths"):
            self.add_state(name, torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(
        self, candidates: torch.Tensor | Sequence[str], references: References,
        attention_mask: torch.Tensor | None = None, reference_mask: torch.Tensor | None = None,
        reference_counts: torch.Tensor | None = None,
    ) -> None:
        device = self.total.device
        counts = aligned_counts(candidates, references, len(self.weights), tokenizer=self.tokenizer,
                                attention_mask=attention_mask, reference_mask=reference_mask,
                                reference_counts=reference_counts, vocab_size=self.vocab_size, device=device)
        self.bleu_sum += counts.sentence_bleu(self.weights, self.smoothing).sum().to(device)
        self.total += counts.lengths.numel()
        self.matches += counts.matches.sum(0).to(device)
        self.totals += counts.totals.sum(0).to(device)
        self.lengths += counts.lengths.sum().to(device)
        self.reference_lengths += counts.reference_lengths.sum().to(device)

    def compute(self) -> dict[str, torch.Tensor]:
        corpus = bleu_from_counts(self.matches[None], self.totals[None], self.lengths.reshape(1),
                                  self.reference_lengths.reshape(1), self.weights, self.smoothing)[0]
        return {"sentence_bleu": self.bleu_sum / self.total.to(torch.float64),
                "corpus_bleu": corpus, "count": self.total.clone()}


class AlignedRouge(Metric):
    """Mean ROUGE precision, recall and F of samples against their own references.

    `update(candidates, references, ...)` takes what `gpu_neighbors.rouge` takes (texts, or token
    ids with masks and `reference_counts`, which stay on their device with no host sync).
    `compute()` returns {"<type>_precision", "<type>_recall", "<type>_fmeasure": the mean over
    the samples of rouge-score's `score_multi` (NaN before any update), "count"}, the keys of
    torchmetrics' `ROUGEScore`. Every state is a sum, so DDP ranks add up to one process that saw
    every batch.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    total: torch.Tensor

    def __init__(self, rouge_types: Sequence[str] = ROUGE_TYPES, use_stemmer: bool = False,
                 tokenizer: str | Tokenizer | None = None, vocab_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rouge_types = check_rouge_types(rouge_types)
        self.use_stemmer = check_flag("use_stemmer", use_stemmer)
        self.tokenizer = None if tokenizer is None else make_tokenizer(tokenizer)
        self.vocab_size = None if vocab_size is None else check_vocab_size(vocab_size)
        self.keys = [f"{name}_{field}" for name in self.rouge_types for field in ("precision", "recall", "fmeasure")]
        for key in self.keys:
            self.add_state(key, torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(
        self, candidates: torch.Tensor | Sequence[str], references: References,
        attention_mask: torch.Tensor | None = None, reference_mask: torch.Tensor | None = None,
        reference_counts: torch.Tensor | None = None,
    ) -> None:
        device = self.total.device
        text = not isinstance(candidates, torch.Tensor)
        scores = rouge(candidates, references, rouge_types=self.rouge_types,
                       use_stemmer=self.use_stemmer if text else False, tokenizer=self.tokenizer if text else None,
                       attention_mask=attention_mask, reference_mask=reference_mask,
                       reference_counts=reference_counts, vocab_size=self.vocab_size, device=device)
        for name, score in scores.items():
            for field in ("precision", "recall", "fmeasure"):
                state = getattr(self, f"{name}_{field}")
                state += getattr(score, field).sum().to(device)
        self.total += len(candidates)

    def compute(self) -> dict[str, torch.Tensor]:
        count = self.total.to(torch.float64)
        return {**{key: getattr(self, key) / count for key in self.keys}, "count": self.total.clone()}
