"""gpu-neighbors: reference-less quality estimation by nearest neighbours under a text kernel.

The public surface is `__all__`; every other name is importable but private by convention.
"""
from typing import Any

from gpu_neighbors._version import __version__
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.core.signature import Signature
from gpu_neighbors.core.validation import NotFittedError, ParameterError, check_is_fitted
from gpu_neighbors.data.errors import InputError
from gpu_neighbors.kernels import KERNEL_NAMES
from gpu_neighbors.scorer import NeighborsScorer, ScoreError
from gpu_neighbors.text.tokenizers import (
    CharacterTokenizer,
    HuggingFaceTokenizer,
    Sacrebleu13aTokenizer,
    Tokenizer,
    WhitespaceTokenizer,
    make_tokenizer,
)

__all__ = [
    "KERNEL_NAMES", "CharacterTokenizer", "HuggingFaceTokenizer", "InputError", "NeighborsQuality",
    "NeighborsScorer", "NotFittedError", "ParameterError", "Prediction", "Sacrebleu13aTokenizer",
    "ScoreError", "Signature", "Tokenizer", "WhitespaceTokenizer", "__version__", "check_is_fitted",
    "make_tokenizer",
]


def __getattr__(name: str) -> Any:
    """`NeighborsQuality` loads on first use, so torchmetrics stays an optional extra."""
    if name == "NeighborsQuality":
        from gpu_neighbors.training.metric import NeighborsQuality

        return NeighborsQuality
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
