"""A fitted scorer as settings (JSON) and tensors, and back (`core/saved.py` writes and reads
the folder).

What the training set alone decides is read back where it is saved (the typicality tables, and
the kernel's encoding for kernels that save one: TF-IDF) and otherwise rebuilt on load from the
saved texts and scores, the same deterministic way `fit` built it (the other kernels' encodings,
the scores' exact limbs and tie ranks; the tie ranks are saved too and must come out equal).
Everything `fit` chose or learned on top is stored exactly -- tuned settings, the tuning's
figures, the automatic kernel choice, the ridge model, the calibration -- so a loaded scorer
predicts the same bits as the one saved.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from gpu_neighbors._version import __version__
from gpu_neighbors.core import kernel_ridge
from gpu_neighbors.core.conformal import Calibration
from gpu_neighbors.core.discriminant import LinearScore
from gpu_neighbors.core.outside import OutlierTest, OutsideRule
from gpu_neighbors.core.neighbours import Thresholds
from gpu_neighbors.core.saved import TENSORS, SavedScorer, SavedScorerError, pack_strings, unpack_strings
from gpu_neighbors.core.tuning import TuningResult
from gpu_neighbors.estimators import Estimator, RidgeFit, estimator_from_settings
from gpu_neighbors.estimators.stacking import Stacking
from gpu_neighbors.fitted import FittedScorer
from gpu_neighbors.fluency import FittedFluency, Fluency, check_weights
from gpu_neighbors.fluency.outlier import FLUENCY_ALONE, FLUENCY_LOW_IS_ATYPICAL, WithinLength
from gpu_neighbors.intervals import Intervals
from gpu_neighbors.kernels.base import Kernel
from gpu_neighbors.kernels.parts import Auto, KernelPart, part_from_settings
from gpu_neighbors.text.tokenizers import Tokenizer
from gpu_neighbors.text.typicality import STATISTICS, TEST_ALONE, TEST_LOW_IS_ATYPICAL, Typicality

# Name prefixes of the saved encoding's tensors.
KERNEL, TYPICALITY = "kernel.", "typicality."


def state_of(scorer: FittedScorer, kernel: KernelPart, fields: dict[str, list[Any]]) -> SavedScorer:
    """What `scorer` (fitted with `kernel`) is and learned, with `fields` beside its texts."""
    ridge = scorer._ridge
    tensors = {"tie_rank": scorer._quality.tie_rank.cpu(),
               "calibration_residuals": torch.as_tensor(scorer.calibration_.residuals, dtype=torch.float64),
               **{f"outside_{index}": torch.as_tensor(column, dtype=torch.float64)
                  for index, column in enumerate(scorer.outside_.test.columns)},
               "outside_products": torch.as_tensor(scorer.outside_.test.products, dtype=torch.float64),
               **encoding_tensors(scorer)}
    if scorer.within_ is not None:
        tensors.update(fluency_center=torch.as_tensor(scorer.within_.center),
                       fluency_scale=torch.as_tensor(scorer.within_.scale))
    if ridge is not None:
        tensors.update(ridge_alpha=torch.as_tensor(ridge.model.alpha), ridge_loo=torch.as_tensor(ridge.model.loo),
                       ridge_similar=torch.as_tensor(ridge.loo.num_neighbors))
        if ridge.sample is not None:
            tensors["ridge_sample"] = torch.as_tensor(ridge.sample, dtype=torch.int64)
    tuned = None if scorer.tuning_ is None else {**asdict(scorer.tuning_), "thresholds": asdict(scorer.tuning_.thresholds)}
    config = {
        "package_version": __version__,
        "signature": str(scorer.signature),
        "parts": {"kernel": scorer.kernel.settings(),
                  "estimator": None if scorer.estimator is None else scorer.estimator.settings(),
                  "intervals": scorer.intervals_part.settings(),
                  "fluency": None if scorer.fluency is None else scorer.fluency.settings()},
        "run": {"memory_budget": scorer.memory_budget, "chunk_size": scorer.chunk_size,
                "score_range": None if scorer.score_range is None else list(scorer.score_range)},
        "fitted": {"kernel": kernel.settings(), "kernel_settings": dict(scorer.signature.kernel_settings),
                   "estimator": scorer.estimator_.settings(),
                   "thresholds": asdict(scorer.thresholds_), "tuning": tuned, "selection": scorer.selection_,
                   "calibration_floor": scorer.calibration_.floor,
                   "outside_texts": scorer.outside_.test.size,
                   "degeneracy": _degeneracy_settings(scorer.outside_.degeneracy),
                   "ridge": None if ridge is None else {"intercept": ridge.model.intercept,
                                                        "penalty": ridge.model.penalty},
                   "fluency": _fluency_settings(scorer)},
    }
    return SavedScorer(config, tensors, list(scorer.kernel_.train_texts), scorer.train_scores_.tolist(), fields)


def _fluency_settings(scorer: FittedScorer) -> dict[str, Any] | None:
    """The fluency model a scorer ran (its name and weights' SHA-256, never the weights), the
    dtype, whether it joined the estimate (the stacked model) and the figures that decided it."""
    fluency = scorer.fluency_
    if fluency is None:
        return None
    return {"name": fluency.files.name, "sha256": fluency.files.sha256,
            "dtype": str(fluency.dtype).removeprefix("torch."),
            "stacking": None if scorer.stacking_ is None else scorer.stacking_.settings(),
            "selection": scorer.fluency_selection_}


def fluency_of(saved: SavedScorer, part: Fluency | None, device: torch.device) -> FittedFluency | None:
    """The fluency model a saved scorer was fitted with, found where `part` says (the saved
    part's place, or one given at load) and refused unless its weights are those saved."""
    fitted = _section(saved, "fitted").get("fluency")
    if fitted is None:
        return None
    try:
        name, digest, dtype = str(fitted["name"]), str(fitted["sha256"]), getattr(torch, str(fitted["dtype"]))
    except (KeyError, TypeError, AttributeError) as error:
        raise SavedScorerError(f"scorer.json: the fluency model cannot be named ({error})") from None
    try:
        files = None if part is None else part.files()
    except ValueError:  # moved or removed
        files = None
    if files is None:
        raise SavedScorerError(f"scorer.json: the scorer was fitted with fluency model {name}, which is not here: "
                               "fetch it (gpu-neighbors fetch-model) or give its path (fluency=PATH, --fluency PATH)")
    try:
        check_weights(files, name, digest)
    except ValueError as error:
        raise SavedScorerError(f"scorer.json: {error}") from None
    return FittedFluency(files, dtype, device)


def encoding_tensors(scorer: FittedScorer) -> dict[str, torch.Tensor]:
    """What the training set alone decides, saved so that `load` need not rebuild it: the
    kernel's encoding (where it saves one) and the typicality tables."""
    tokens, tables = scorer.typicality_.state()
    token_bytes, token_ends = pack_strings(tokens)
    return {**_with_prefix(KERNEL, scorer.kernel_.saved_encoding()),
            **_with_prefix(TYPICALITY, {"tokens": token_bytes, "token_ends": token_ends, **tables})}


def load_encoding(kernel: Kernel[Any], stored: SavedScorer) -> None:
    """`kernel.fit` of the saved training texts, from the saved encoding where there is one."""
    try:
        kernel.load_encoding(stored.texts, _prefixed(stored, KERNEL))
    except ValueError as error:
        raise SavedScorerError(f"{TENSORS}: the kernel's encoding cannot be read ({error})") from None


def typicality_of(stored: SavedScorer, tokenizer: Tokenizer, device: torch.device, words: str) -> Typicality:
    """The training set's typicality tables as saved (`words`: the word list's language)."""
    tables = _prefixed(stored, TYPICALITY)
    try:
        tokens = unpack_strings(tables.pop("tokens"), tables.pop("token_ends"))
        return Typicality.from_state(tokens, tables, tokenizer, device, words)
    except (KeyError, ValueError) as error:
        raise SavedScorerError(f"{TENSORS}: the typicality tables cannot be read ({error})") from None


def _with_prefix(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {prefix + name: tensor for name, tensor in tensors.items()}


def _prefixed(stored: SavedScorer, prefix: str) -> dict[str, torch.Tensor]:
    return {name.removeprefix(prefix): tensor for name, tensor in stored.tensors.items() if name.startswith(prefix)}


def constructor_of(saved: SavedScorer) -> dict[str, Any]:
    """The constructor's settings of the scorer that was saved (device aside)."""
    parts, run = _section(saved, "parts"), _section(saved, "run")
    try:
        estimator = None if parts.get("estimator") is None else estimator_from_settings(parts["estimator"])
        score_range = run.get("score_range")
        return {"kernel": part_from_settings(parts["kernel"]), "estimator": estimator,
                "level": Intervals(**parts["intervals"]), "memory_budget": run.get("memory_budget"),
                "fluency": None if parts.get("fluency") is None else Fluency(**parts["fluency"]),
                "chunk_size": run.get("chunk_size"),
                "score_range": None if score_range is None else (float(score_range[0]), float(score_range[1]))}
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise SavedScorerError(f"scorer.json: the parts' settings cannot be rebuilt ({error})") from None


def fitted_parts(saved: SavedScorer) -> tuple[KernelPart, Estimator]:
    """The kernel and estimator the scorer was fitted with (with `Auto`, the chosen kernel)."""
    fitted = _section(saved, "fitted")
    try:
        kernel = part_from_settings(fitted["kernel"])
        estimator = estimator_from_settings(fitted["estimator"])
    except (KeyError, TypeError, ValueError) as error:
        raise SavedScorerError(f"scorer.json: the fitted parts cannot be rebuilt ({error})") from None
    if isinstance(kernel, Auto):
        raise SavedScorerError("scorer.json: the fitted kernel must be one kernel, not auto")
    return kernel, estimator


def restore(scorer: FittedScorer, saved: SavedScorer) -> None:
    """Set on `scorer` (its training set already encoded) what `fit` chose and learned."""
    fitted, tensors = _section(saved, "fitted"), saved.tensors
    if not torch.equal(scorer._quality.tie_rank.cpu(), tensors["tie_rank"]):
        raise SavedScorerError(f"{TENSORS}: the tie ranks are not those of its training texts and scores")
    try:
        scorer.thresholds_ = Thresholds(**fitted["thresholds"])
        tuned = fitted["tuning"]
        scorer.tuning_ = None if tuned is None else TuningResult(**{**tuned, "thresholds": Thresholds(**tuned["thresholds"])})
        scorer.selection_ = fitted["selection"]
        scorer.calibration_ = Calibration(tensors["calibration_residuals"].numpy(), float(fitted["calibration_floor"]))
        _restore_fluency(scorer, fitted["fluency"], tensors)
        scorer.outside_ = _outside(scorer, tensors, int(fitted["outside_texts"]), fitted["degeneracy"])
        scorer._ridge = None if fitted["ridge"] is None else _ridge(fitted["ridge"], tensors, len(saved.texts))
        expected = fitted["kernel_settings"]
    except (KeyError, TypeError, ValueError) as error:
        raise SavedScorerError(f"scorer.json: the fitted state cannot be rebuilt ({error})") from None
    here = dict(scorer.signature.kernel_settings)
    if here != expected:
        differ = ", ".join(f"{name} {expected.get(name)} -> {here.get(name)}"
                           for name in sorted(set(here) | set(expected)) if here.get(name) != expected.get(name))
        raise SavedScorerError(f"scorer.json: the kernel was saved with settings this machine cannot rebuild "
                               f"({differ}): its numbers would differ")


def _restore_fluency(scorer: FittedScorer, settings: dict[str, Any] | None, tensors: dict[str, torch.Tensor]) -> None:
    """The stacked estimate and, where fluency is in use, the outlier column's table, as fitted
    (JSON numbers: float64 written and read back exactly)."""
    if settings is None:
        return
    stacking = settings["stacking"]
    scorer.stacking_ = None if stacking is None else Stacking(
        float(stacking["intercept"]), tuple(float(weight) for weight in stacking["weights"]), scorer.score_range)
    if scorer.stacking_ is not None:
        scorer.within_ = WithinLength(tensors["fluency_center"].numpy(), tensors["fluency_scale"].numpy())
    scorer.fluency_selection_ = settings["selection"]


def _degeneracy_settings(score: LinearScore | None) -> dict[str, Any]:
    assert score is not None  # every fit learns one
    return {"intercept": score.intercept, "weights": list(score.weights)}


def _outside(scorer: FittedScorer, tensors: dict[str, torch.Tensor], size: int,
             degeneracy: dict[str, Any]) -> OutsideRule:
    """The outlier test as fitted: each statistic's sorted calibration values (`size` texts),
    their sorted products of p-values, and the degeneracy score's coefficients (JSON numbers:
    float64 written and read back exactly)."""
    weights = tuple(float(weight) for weight in degeneracy["weights"])
    if len(weights) != len(STATISTICS):
        raise ValueError(f"the degeneracy score has {len(weights)} weights, not {len(STATISTICS)}")
    score = LinearScore(float(degeneracy["intercept"]), weights)
    if not np.isfinite([score.intercept, *score.weights]).all():
        raise ValueError("the degeneracy score's coefficients are not all finite")
    fluency = scorer.stacking_ is not None  # fluency in use: the test has its column
    low, alone = (FLUENCY_LOW_IS_ATYPICAL, FLUENCY_ALONE) if fluency else (TEST_LOW_IS_ATYPICAL, TEST_ALONE)
    columns = tuple(tensors[f"outside_{index}"].numpy() for index in range(len(low)))
    products = tensors["outside_products"].numpy()
    if any(column.ndim != 1 or column.size > size or np.any(np.diff(column) < 0) for column in columns) or (
            products.ndim != 1 or products.size != size or np.any(np.diff(products) < 0)):
        raise ValueError("the outlier test's tensors are not sorted calibration values")
    test = OutlierTest(columns, low, size, products, alone)
    return scorer.intervals_part.outside_rule(test, score, scorer.train_scores_, scorer.score_range)


def _ridge(settings: dict[str, Any], tensors: dict[str, torch.Tensor], num_train: int) -> RidgeFit:
    loo = tensors["ridge_loo"].numpy()
    model = kernel_ridge.KernelRidge(tensors["ridge_alpha"].numpy(), float(settings["intercept"]),
                                     float(settings["penalty"]), loo)
    sample = tensors["ridge_sample"].numpy() if "ridge_sample" in tensors else None
    if model.alpha.shape != (num_train,) or loo.shape != tensors["ridge_similar"].shape:
        raise ValueError("the ridge model's tensors do not fit the training set")
    return RidgeFit(model, sample, kernel_ridge.leave_one_out_prediction(loo, tensors["ridge_similar"].numpy()))


def _section(saved: SavedScorer, name: str) -> dict[str, Any]:
    section = saved.config.get(name)
    if not isinstance(section, dict):
        raise SavedScorerError(f"scorer.json: no {name!r} section")
    return section


def training_scores(saved: SavedScorer) -> np.ndarray:
    """The training scores, float64 bits as saved."""
    scores = np.asarray(saved.scores, dtype=np.float64)
    if not np.isfinite(scores).all():
        raise SavedScorerError(f"{TENSORS}: a training score is not a finite number")
    return scores
