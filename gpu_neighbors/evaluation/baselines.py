"""Supervised baselines printed beside every neighbour figure, on the same folds: does the
neighbour model beat the obvious alternative on this data?

- TF-IDF + ridge: word 1-2-grams and character 2-5-grams (within word boundaries), sublinear tf,
  ridge regression with its penalty chosen by the training side's own leave-one-out (RidgeCV's
  rule and grid).
- Embedding + ridge: mean-pooled token embeddings of a transformer (the BERTScore kernel's model
  loader, all layers by default: as sentence-transformers pools MiniLM), then the same ridge.

`baseline_rows` fits both as kernel ridge on the linear kernel of their features
(`core.kernel_ridge`; the tfidf kernel is the TF-IDF features' dot product, halved): leave-one-out
in closed form, each left-out text's penalty chosen by the others' exact leave-one-out
(`kernel_ridge.nested_leave_one_out`), other folds one fit each, instead of a scikit-learn
refit per left-out text (75 of 76 s of `compare` on 200 texts). The one difference from such a
refit: the TF-IDF weights (idf) come from all the texts, the held-out ones too, as the tfidf
kernel's do in every protocol cut from one pass (`NeighborsScorer.splits_pass` says so).

The scikit-learn pipelines (`tfidf_ridge`, `embedding_ridge`, with `out_of_fold`) stay as the
reference the tests and bench/quality.py hold the kernels to; scikit-learn is an optional extra
(`pip install gpu-neighbors[baselines]`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpu_neighbors.choice import ChoiceRun, Sample, kernel_pass
from gpu_neighbors.core import kernel_ridge
from gpu_neighbors.core.caller_warnings import beyond_float_is_inf
from gpu_neighbors.core.correlation import RESAMPLES
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.core.tiling import resolve_device
from gpu_neighbors.evaluation.agreement import Agreement, agreement
from gpu_neighbors.kernels.parts import Tfidf

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
) -> Iterator[BaselineRow]:
    """TF-IDF + ridge (and embedding + ridge when a model is given) on `folds`, each row as
    soon as it is made."""
    truth = np.asarray(scores, dtype=np.float64)
    texts = list(texts)
    start = time.perf_counter()
    # halved features' dot products: scikit-learn's alpha is twice the penalty (tests/kernels/test_tfidf.py)
    predicted = ridge_out_of_fold(tfidf_matrix(texts, truth, device), truth, folds, [alpha / 2 for alpha in ALPHAS])
    yield BaselineRow(TFIDF_NAME, agreement(as_prediction(predicted), truth, resamples=resamples),
                      time.perf_counter() - start)
    if model is not None:
        start = time.perf_counter()
        vectors = embed(texts, model, layer, device).astype(np.float64)
        predicted = ridge_out_of_fold(vectors @ vectors.T, truth, folds, ALPHAS)
        yield BaselineRow(EMBEDDING_NAME, agreement(as_prediction(predicted), truth, resamples=resamples),
                          time.perf_counter() - start)


def tfidf_matrix(texts: list[str], scores: np.ndarray, device: str = "cpu") -> np.ndarray:
    """The tfidf kernel over every pair of `texts` (one pass; its idf from all of them)."""
    run = ChoiceRun(resolve_device(device), None, None, None, 0.0)
    return kernel_pass(Tfidf(), Sample(texts, scores), run).similarities.matrix.numpy()


def ridge_out_of_fold(matrix: np.ndarray, scores: np.ndarray, folds: Sequence[np.ndarray],
                      penalties: Sequence[float]) -> np.ndarray:
    """Each fold's items estimated by kernel ridge fitted on the other items, at the penalty
    their own exact leave-one-out chooses: leave-one-out folds (one item each, every item once)
    in closed form (`kernel_ridge.nested_leave_one_out`), other folds one fit each."""
    size = scores.size
    if len(folds) == size and all(fold.size == 1 for fold in folds) and \
            np.array_equal(np.sort(np.concatenate(folds)), np.arange(size)):
        return kernel_ridge.nested_leave_one_out(matrix, scores, penalties)
    predicted = np.full(size, np.nan)
    everything = np.arange(size)
    for test in folds:
        train = np.setdiff1d(everything, test)
        fitted = kernel_ridge.fit(matrix[np.ix_(train, train)], scores[train], penalties)
        predicted[test] = fitted.predict(matrix[np.ix_(test, train)])
    return predicted


def _take(features: Any, rows: np.ndarray) -> Any:
    return features[rows]
