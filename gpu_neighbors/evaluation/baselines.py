"""Supervised baselines printed beside every neighbour figure, on the same folds: does the
neighbour model beat the obvious alternative on this data?

- TF-IDF + ridge: word 1-2-grams and character 2-5-grams (within word boundaries), sublinear tf,
  ridge regression with its penalty chosen by the training fold's own leave-one-out (RidgeCV).
- Embedding + ridge: mean-pooled token embeddings of a transformer (the BERTScore kernel's model
  loader, all layers by default: as sentence-transformers pools MiniLM), then the same ridge.

scikit-learn is an optional extra (`pip install gpu-neighbors[baselines]`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpu_neighbors.core.caller_warnings import beyond_float_is_inf
from gpu_neighbors.core.correlation import RESAMPLES
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.evaluation.agreement import Agreement, agreement

ALPHAS = tuple(np.logspace(-3, 3, 13))
TFIDF_NAME = "TF-IDF + ridge"
EMBEDDING_NAME = "embedding + ridge"


def available() -> bool:
    """Whether scikit-learn (the `baselines` extra) is installed."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return False
    return True


def tfidf_ridge() -> Any:
    """The TF-IDF (word + character n-grams) + ridge pipeline, unfitted."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline, make_union

    features = make_union(
        TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b"),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True),
    )
    return make_pipeline(features, RidgeCV(alphas=ALPHAS))


def embedding_ridge() -> Any:
    """Ridge on fixed embedding features, unfitted."""
    from sklearn.linear_model import RidgeCV

    return RidgeCV(alphas=ALPHAS)


def embed(texts: Sequence[str], model: str, layer: int | None = None, device: str = "cpu",
          batch_size: int = 64) -> np.ndarray:
    """Mean-pooled token embeddings [len(texts), hidden] of `model` (local folder or cache) at
    `layer` (None: all its layers), through the BERTScore kernel's loader."""
    from transformers import AutoConfig

    from gpu_neighbors.kernels.bertscore import load_model

    if layer is None:
        layer = int(AutoConfig.from_pretrained(model, local_files_only=True).num_hidden_layers)
    tokenizer, network, limit = load_model(model, layer)
    network.to(device)
    vectors = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer([text.strip() for text in texts[start:start + batch_size]], padding=True,
                              truncation=True, max_length=limit, return_tensors="pt").to(device)
            hidden = network(**batch)[0].float()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            vectors.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).cpu().numpy())
    return np.concatenate(vectors) if vectors else np.zeros((0, 0))


@beyond_float_is_inf
def out_of_fold(make: Callable[[], Any], features: Any, scores: np.ndarray,
                folds: Sequence[np.ndarray]) -> np.ndarray:
    """Each fold's test items predicted by a model fitted on the other items."""
    scores = np.asarray(scores, dtype=np.float64)
    predicted = np.full(scores.size, np.nan)
    everything = np.arange(scores.size)
    for test in folds:
        train = np.setdiff1d(everything, test)
        model = make().fit(_take(features, train), scores[train])
        predicted[test] = model.predict(_take(features, test))
    return predicted


def fit_predict(make: Callable[[], Any], train_features: Any, train_scores: Sequence[float],
                test_features: Any) -> np.ndarray:
    """Fitted on the training set, predictions for the test set (train -> test protocols)."""
    model = make().fit(train_features, np.asarray(train_scores, dtype=np.float64))
    return np.asarray(model.predict(test_features), dtype=np.float64)


def as_prediction(scores: np.ndarray) -> Prediction:
    """Baseline scores as a `Prediction`: every item covered, no neighbours."""
    scores = np.asarray(scores, dtype=np.float64)
    return Prediction(scores=scores, num_neighbors=np.zeros(scores.size, dtype=np.int64),
                      std=np.full(scores.size, np.nan), covered=np.isfinite(scores), estimator="baseline")


@dataclass(frozen=True)
class BaselineRow:
    name: str
    agreement: Agreement
    seconds: float


def baseline_rows(
    texts: Sequence[str],
    scores: Sequence[float] | np.ndarray,
    folds: Sequence[np.ndarray],
    *,
    model: str | None = None,
    layer: int | None = None,
    device: str = "cpu",
    resamples: int = RESAMPLES,
) -> list[BaselineRow]:
    """TF-IDF + ridge (and embedding + ridge when a model is given) on `folds`; none when
    scikit-learn is missing."""
    if not available():
        return []
    truth = np.asarray(scores, dtype=np.float64)
    texts = list(texts)
    rows = []
    start = time.perf_counter()
    predicted = out_of_fold(tfidf_ridge, np.array(texts, dtype=object), truth, folds)
    rows.append(BaselineRow(TFIDF_NAME, agreement(as_prediction(predicted), truth, resamples=resamples),
                            time.perf_counter() - start))
    if model is not None:
        start = time.perf_counter()
        vectors = embed(texts, model, layer, device)
        predicted = out_of_fold(embedding_ridge, vectors, truth, folds)
        rows.append(BaselineRow(EMBEDDING_NAME, agreement(as_prediction(predicted), truth, resamples=resamples),
                                time.perf_counter() - start))
    return rows


def _take(features: Any, rows: np.ndarray) -> Any:
    return features[rows]
