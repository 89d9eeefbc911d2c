"""gpu-neighbors: reference-less quality estimation by nearest neighbours under a text kernel.

The public surface is `__all__`; every other name is importable but private by convention.
Names load on first use (PEP 562), so `import gpu_neighbors` is cheap: the command line can
start, and answer Ctrl-C, before torch and transformers load; torchmetrics and the all-pairs
jobs stay optional until used.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from gpu_neighbors._version import __version__

_PUBLIC = {
    "AlignedBleu": "gpu_neighbors.training.metric",
    "Auto": "gpu_neighbors.kernels.parts",
    "BertScore": "gpu_neighbors.kernels.parts",
    "Bleu": "gpu_neighbors.kernels.parts",
    "Combined": "gpu_neighbors.kernels.parts",
    "Estimator": "gpu_neighbors.estimators",
    "Fluency": "gpu_neighbors.fluency",
    "Intervals": "gpu_neighbors.intervals",
    "KernelPart": "gpu_neighbors.kernels.parts",
    "Meteor": "gpu_neighbors.kernels.parts",
    "Ridge": "gpu_neighbors.estimators",
    "Rouge": "gpu_neighbors.kernels.parts",
    "Tfidf": "gpu_neighbors.kernels.parts",
    "Threshold": "gpu_neighbors.estimators",
    "TopK": "gpu_neighbors.estimators",
    "AlignedRouge": "gpu_neighbors.training.metric",
    "BleuReward": "gpu_neighbors.training.rewards",
    "RougeReward": "gpu_neighbors.training.rewards",
    "CharacterTokenizer": "gpu_neighbors.text.tokenizers",
    "HuggingFaceTokenizer": "gpu_neighbors.text.tokenizers",
    "InputError": "gpu_neighbors.data.errors",
    "KERNEL_NAMES": "gpu_neighbors.kernels",
    "NeighborsQuality": "gpu_neighbors.training.metric",
    "NeighborsScorer": "gpu_neighbors.scorer",
    "NotFittedError": "gpu_neighbors.core.validation",
    "ParameterError": "gpu_neighbors.core.validation",
    "Prediction": "gpu_neighbors.core.neighbours",
    "Sacrebleu13aTokenizer": "gpu_neighbors.text.tokenizers",
    "ScoreError": "gpu_neighbors.core.inputs",
    "Signature": "gpu_neighbors.core.signature",
    "Tokenizer": "gpu_neighbors.text.tokenizers",
    "WhitespaceTokenizer": "gpu_neighbors.text.tokenizers",
    "check_is_fitted": "gpu_neighbors.core.validation",
    "compare_systems": "gpu_neighbors.evaluation.systems",
    "corpus_bleu": "gpu_neighbors.kernels.aligned_bleu",
    "leave_one_out_scale": "gpu_neighbors.evaluation.systems",
    "make_tokenizer": "gpu_neighbors.text.tokenizers",
    "mbr": "gpu_neighbors.allpairs.mbr",
    "pairs": "gpu_neighbors.allpairs.pairs",
    "reward_function": "gpu_neighbors.training.rewards",
    "rouge": "gpu_neighbors.kernels.aligned_rouge",
    "self_bleu": "gpu_neighbors.allpairs.self_bleu",
    "sentence_bleu": "gpu_neighbors.kernels.aligned_bleu",
}

__all__ = sorted([*_PUBLIC, "__version__"])

if TYPE_CHECKING:
    from gpu_neighbors.allpairs.mbr import mbr
    from gpu_neighbors.allpairs.pairs import pairs
    from gpu_neighbors.allpairs.self_bleu import self_bleu
    from gpu_neighbors.core.neighbours import Prediction
    from gpu_neighbors.core.signature import Signature
    from gpu_neighbors.core.validation import NotFittedError, ParameterError, check_is_fitted
    from gpu_neighbors.data.errors import InputError
    from gpu_neighbors.estimators import Estimator, Ridge, Threshold, TopK
    from gpu_neighbors.evaluation.systems import compare_systems, leave_one_out_scale
    from gpu_neighbors.fluency import Fluency
    from gpu_neighbors.intervals import Intervals
    from gpu_neighbors.kernels import KERNEL_NAMES
    from gpu_neighbors.kernels.aligned_bleu import corpus_bleu, sentence_bleu
    from gpu_neighbors.kernels.aligned_rouge import rouge
    from gpu_neighbors.kernels.parts import Auto, BertScore, Bleu, Combined, KernelPart, Meteor, Rouge, Tfidf
    from gpu_neighbors.core.inputs import ScoreError
    from gpu_neighbors.scorer import NeighborsScorer
    from gpu_neighbors.text.tokenizers import (
        CharacterTokenizer,
        HuggingFaceTokenizer,
        Sacrebleu13aTokenizer,
        Tokenizer,
        WhitespaceTokenizer,
        make_tokenizer,
    )
    from gpu_neighbors.training.metric import AlignedBleu, AlignedRouge, NeighborsQuality
    from gpu_neighbors.training.rewards import BleuReward, RougeReward, reward_function


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
