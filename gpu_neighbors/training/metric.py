"""`NeighborsQuality`: the neighbour estimate as a torchmetrics metric for validation loops.

Every state is a sum (estimates of covered texts, covered texts, texts seen), so under DDP the
per-rank states add up to exactly the states of one process that saw every batch; the mean is
taken only in `compute`. torchmetrics is an optional extra (`pip install gpu-neighbors[metrics]`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gpu_neighbors.scorer import NeighborsScorer

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
    share (NaN if nothing seen), "count": texts seen}.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    quality_sum: torch.Tensor
    covered: torch.Tensor
    total: torch.Tensor

    def __init__(self, scorer: NeighborsScorer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        scorer._check_fitted()
        self.scorer = scorer
        self.add_state("quality_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("covered", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(
        self, inputs: torch.Tensor | Sequence[str], attention_mask: torch.Tensor | None = None
    ) -> None:
        prediction = self.scorer.predict_tensors(inputs, attention_mask=attention_mask)
        device = self.total.device
        covered_scores = torch.where(prediction.covered, prediction.scores, 0.0)
        self.quality_sum += covered_scores.sum().to(device, self.quality_sum.dtype)
        self.covered += prediction.covered.sum().to(device)
        self.total += prediction.covered.numel()

    def compute(self) -> dict[str, torch.Tensor]:
        covered = self.covered.to(torch.float64)
        return {
            "quality": self.quality_sum / covered,
            "coverage": covered / self.total.to(torch.float64),
            "count": self.total.clone(),
        }
