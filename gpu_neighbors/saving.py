"""A fitted scorer as settings (JSON) and tensors, and back (`core/saved.py` writes and reads
the folder).

What the training set alone decides is read back where it is saved (the typicality tables, and
the kernel's encoding for kernels that save one: TF-IDF) and otherwise rebuilt on load from the
saved texts and scores, the same deterministic way `fit` built it (the other kernels' encodings,
the scores' exact limbs and tie ranks; the tie ranks are saved too and must come out equal).
Everything `fit` chose or learned on top is stored exactly -- tuned settings, the tuning's
figures, the automatic kernel choice, the ridge model, the calibration -- so a loaded scorer
predicts the same bits as the one saved.

Nothing read back is trusted for being in scorer.json (which no digest covers) or in tensors
scorer.json vouches for: every fitted setting, figure and calibration value is checked on load
against what the constructor, its flag or `fit` would have allowed (`saved_settings`,
`SAVED_TENSORS`: one entry a value), and a value outside it is refused naming its place.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from numbers import Real
from typing import Any

import numpy as np
import torch

from gpu_neighbors._version import __version__
from gpu_neighbors.core import kernel_ridge
from gpu_neighbors.core.conformal import Calibration
from gpu_neighbors.core.inputs import ScoreError, validate_scores
from gpu_neighbors.core.discriminant import LinearScore
from gpu_neighbors.core.outside import OutlierTest, OutsideRule
from gpu_neighbors.core.neighbours import Thresholds
from gpu_neighbors.core.saved import CONFIG, TENSORS, SavedScorer, SavedScorerError, pack_strings, unpack_strings
from gpu_neighbors.core.tuning import DEFAULT_MIN_NEIGHBORS, TuningResult
from gpu_neighbors.core.validation import BOOLEAN, PARAMETERS, Constraint, interval
from gpu_neighbors.estimators import Estimator, RidgeFit, estimator_from_settings
from gpu_neighbors.estimators.stacking import Stacking
from gpu_neighbors.fitted import FittedScorer
from gpu_neighbors.fluency import FittedFluency, Fluency, ModelFiles, check_weights
from gpu_neighbors.fluency.model import MAX_TOKENS
from gpu_neighbors.fluency.outlier import FLUENCY_ALONE, FLUENCY_LOW_IS_ATYPICAL, WithinLength
from gpu_neighbors.fluency.part import STATISTIC_COLUMNS
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
               "outside_smallest": torch.as_tensor(scorer.outside_.test.smallest, dtype=torch.float64),
               **encoding_tensors(scorer)}
    if scorer.within_ is not None:
        assert scorer.fluency_ is not None and scorer.fluency_.unigram is not None  # calibrated at fit
        for index, (center, scale) in enumerate(zip(scorer.within_.center, scorer.within_.scale)):
            tensors.update({f"fluency_center_{index}": torch.as_tensor(center),
                            f"fluency_scale_{index}": torch.as_tensor(scale)})
        tensors["fluency_unigram"] = scorer.fluency_.unigram
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
                   "fluency": _fluency_settings(scorer), "fluency_english": scorer.fluency_english_},
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
    part's place, or one given at load) and refused unless its weights are those saved; where
    fluency is not in use (left out by `auto`), never run, so known by its record alone."""
    fitted = _section(saved, "fitted").get("fluency")
    if fitted is None:
        return None
    try:
        name, digest, dtype = str(fitted["name"]), str(fitted["sha256"]), getattr(torch, str(fitted["dtype"]))
    except (KeyError, TypeError, AttributeError) as error:
        raise SavedScorerError(f"scorer.json: the fluency model cannot be named ({error})") from None
    if fitted.get("stacking") is None:  # fluency left out: no model runs, so none is looked for
        return FittedFluency(ModelFiles.recorded(name, digest), dtype, device)
    if part is None:
        raise SavedScorerError(f"scorer.json: its estimate stacks on fluency model {name}, so it cannot run without it "
                               "(fluency='none', --fluency none): leave that out, or give the model's path")
    try:
        files, why = part.files(), ""
    except ValueError as error:  # moved, removed, or a path given at load that is no model
        files, why = None, f" ({error})"
    if files is None:
        raise SavedScorerError(f"scorer.json: the scorer was fitted with fluency model {name}, which is not here{why}: "
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


def constructor_of(saved: SavedScorer, allow_download: bool = False) -> dict[str, Any]:
    """The constructor's settings of the scorer that was saved (device aside), its parts
    allowed to download only where `allow_download` (`with_downloads`)."""
    parts, run = _section(saved, "parts"), _section(saved, "run")
    try:
        estimator = None if parts.get("estimator") is None else estimator_from_settings(parts["estimator"])
        score_range = run.get("score_range")
        return {"kernel": part_from_settings(with_downloads(parts["kernel"], allow_download)), "estimator": estimator,
                "level": Intervals(**parts["intervals"]), "memory_budget": run.get("memory_budget"),
                "fluency": None if parts.get("fluency") is None else Fluency(**parts["fluency"]),
                "chunk_size": run.get("chunk_size"),
                "score_range": None if score_range is None else (float(score_range[0]), float(score_range[1]))}
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise SavedScorerError(f"scorer.json: the parts' settings cannot be rebuilt ({error})") from None


def fitted_parts(saved: SavedScorer, allow_download: bool = False) -> tuple[KernelPart, Estimator]:
    """The kernel and estimator the scorer was fitted with (with `Auto`, the chosen kernel),
    allowed to download only where `allow_download`."""
    fitted = _section(saved, "fitted")
    try:
        kernel = part_from_settings(with_downloads(fitted["kernel"], allow_download))
        estimator = estimator_from_settings(fitted["estimator"])
    except (KeyError, TypeError, ValueError) as error:
        raise SavedScorerError(f"scorer.json: the fitted parts cannot be rebuilt ({error})") from None
    if isinstance(kernel, Auto):
        raise SavedScorerError("scorer.json: the fitted kernel must be one kernel, not auto")
    return kernel, estimator


def with_downloads(settings: Any, allow_download: bool) -> Any:
    """A kernel part's saved settings with `allow_download` in place of the saved one (and in
    the kernels of a choice or a combination): the caller of a load decides whether it may
    reach the hub, never the folder. Anything else as it is, for the part to refuse."""
    if not isinstance(settings, dict):
        return settings
    given = {**settings, **({"allow_download": allow_download} if "allow_download" in settings else {})}
    if isinstance(given.get("kernels"), list):
        given["kernels"] = [{**kernel, "allow_download": allow_download} if isinstance(kernel, dict) else kernel
                            for kernel in given["kernels"]]
    return given


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
        scorer.fluency_english_ = fitted.get("fluency_english")
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
        assert scorer.fluency_ is not None  # `fluency_of` found it
        if len(scorer.stacking_.weights) != 1 + STATISTIC_COLUMNS:
            raise ValueError(f"the stacked estimate has {len(scorer.stacking_.weights)} weights, not "
                             f"{1 + STATISTIC_COLUMNS} (the neighbour estimate and the fluency statistics)")
        missing = [name for name in FLUENCY_TENSORS if name not in tensors]
        if missing:
            raise ValueError(f"fluency is in use but {', '.join(missing)} is missing")
        center, scale = (np.stack([tensors[f"fluency_{kind}_{index}"].numpy() for index in range(STATISTIC_COLUMNS)])
                         for kind in ("center", "scale"))
        scorer.within_ = WithinLength(center, scale)
        scorer.fluency_.unigram = tensors["fluency_unigram"]
        scorer.fluency_.check_unigram()
    scorer.fluency_selection_ = settings["selection"]


def _degeneracy_settings(score: LinearScore | None) -> dict[str, Any]:
    assert score is not None  # every fit learns one
    return {"intercept": score.intercept, "weights": list(score.weights)}


def _outside(scorer: FittedScorer, tensors: dict[str, torch.Tensor], size: int,
             degeneracy: dict[str, Any]) -> OutsideRule:
    """The outlier test as fitted: each statistic's sorted calibration values (`size` texts),
    their sorted products of p-values and beside each the text's smallest p-value, and the
    degeneracy score's coefficients (JSON numbers: float64 written and read back exactly)."""
    weights = tuple(float(weight) for weight in degeneracy["weights"])
    if len(weights) != len(STATISTICS):
        raise ValueError(f"the degeneracy score has {len(weights)} weights, not {len(STATISTICS)}")
    score = LinearScore(float(degeneracy["intercept"]), weights)
    if not np.isfinite([score.intercept, *score.weights]).all():
        raise ValueError("the degeneracy score's coefficients are not all finite")
    fluency = scorer.stacking_ is not None  # fluency in use: the test has its column
    low, alone = (FLUENCY_LOW_IS_ATYPICAL, FLUENCY_ALONE) if fluency else (TEST_LOW_IS_ATYPICAL, TEST_ALONE)
    if f"outside_{len(low) - 1}" not in tensors:
        raise ValueError(f"the outlier test has {len(low)} columns with fluency {'on' if fluency else 'off'}: "
                         f"outside_{len(low) - 1} is missing")
    columns = tuple(tensors[f"outside_{index}"].numpy() for index in range(len(low)))
    products = tensors["outside_products"].numpy()  # their values: checked on load (SAVED_TENSORS)
    smallest = tensors["outside_smallest"].numpy()
    if any(column.size > size for column in columns) or products.size != size or smallest.size != size:
        raise ValueError(f"the outlier test's tensors are not the calibration values of {size} texts")
    test = OutlierTest(columns, low, size, products, smallest, alone)
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
    """The training scores, float64 bits as saved, checked as `fit` checks them: finite, and in
    the saved score range."""
    score_range = _section(saved, "run").get("score_range")
    try:
        return validate_scores(np.asarray(saved.scores, dtype=np.float64), len(saved.texts),
                               None if score_range is None else (score_range[0], score_range[1]))
    except ScoreError as error:
        raise SavedScorerError(f"{TENSORS}: training score {error.index}: {error.reason}") from None


@dataclass(frozen=True)
class Expected:
    """What a saved value must be; null (or no entry) passes where `optional`."""

    constraint: Constraint
    optional: bool = False


OBJECT = Constraint("an object", lambda value: isinstance(value, dict))
# A figure that may be undefined (NaN: a rho with no estimate to rank), but a number.
FIGURE = Constraint("a number", lambda value: isinstance(value, Real) and not isinstance(value, bool))
FIGURES = Constraint("an object of numbers", lambda value: isinstance(value, dict) and all(
    FIGURE.accepts(figure) for figure in value.values()))
TEXT = Constraint("a string", lambda value: isinstance(value, str) and bool(value))
SHA256 = Constraint("64 hexadecimal digits", lambda value: isinstance(value, str)
                    and len(value) == 64 and all(digit in "0123456789abcdef" for digit in value))
FINITE_LIST = Constraint("a non-empty list of finite numbers", lambda value: isinstance(value, list) and bool(value)
                         and all(interval().accepts(item) for item in value))
FLUENCY_SELECTION = Constraint("an object of the rho 'without' and 'with' fluency and whether it is 'used'",
                               lambda value: isinstance(value, dict) and set(value) == {"without", "with", "used"}
                               and FIGURE.accepts(value["without"]) and FIGURE.accepts(value["with"])
                               and BOOLEAN.accepts(value["used"]))
FLUENCY_DTYPES = ("bfloat16", "float32")  # what a fitted fluency model ran in (`Fluency`'s dtypes but auto)


def _setting(name: str, optional: bool = False) -> Expected:
    """What the constructor's (or fit's) setting `name` takes, from the one parameter table."""
    return Expected(PARAMETERS[name].constraint, optional)


def _thresholds(section: str, num_train: int) -> dict[str, Expected]:
    """A `Thresholds` saved at `section`: each field as its setting takes it; a, which no
    setting bounds, at most the training texts or the most the tuning grid tries (past the
    training texts every estimate is undefined, past int64 a load failed)."""
    neighbours = interval(1, max(num_train, *DEFAULT_MIN_NEIGHBORS), integer=True)
    return {section: Expected(OBJECT), f"{section}.tau": _setting("tau"),
            f"{section}.min_neighbors": Expected(neighbours), f"{section}.max_fraction": _setting("max_fraction"),
            f"{section}.power": _setting("power"), f"{section}.estimator": _setting("estimator"),
            f"{section}.top_k": _setting("top_k", optional=True),
            f"{section}.penalty": _setting("penalty", optional=True)}


def saved_settings(num_train: int) -> dict[str, Expected]:
    """Every value of scorer.json that `load` uses as it is (the parts' settings go through the
    parts' constructors), by its dotted place, a section before what it holds; for a scorer of
    `num_train` training texts. A new saved value is one entry here."""
    return {
        "run": Expected(OBJECT), "run.memory_budget": _setting("memory_budget", optional=True),
        "run.chunk_size": _setting("chunk_size", optional=True),
        "run.score_range": _setting("score_range", optional=True),
        "fitted": Expected(OBJECT),
        **_thresholds("fitted.thresholds", num_train),
        "fitted.tuning": Expected(OBJECT, optional=True),
        **_thresholds("fitted.tuning.thresholds", num_train),
        "fitted.tuning.spearman": Expected(FIGURE), "fitted.tuning.coverage": Expected(interval(0, 1)),
        "fitted.tuning.min_coverage": _setting("min_coverage"), "fitted.tuning.feasible": Expected(BOOLEAN),
        "fitted.tuning.settings_tried": Expected(interval(1, integer=True)),
        "fitted.selection": Expected(FIGURES, optional=True),
        "fitted.calibration_floor": Expected(interval(0, closed="neither")),
        "fitted.outside_texts": Expected(interval(1, integer=True)),
        "fitted.ridge": Expected(OBJECT, optional=True),
        "fitted.ridge.intercept": Expected(interval()), "fitted.ridge.penalty": _setting("penalty"),
        "fitted.fluency": Expected(OBJECT, optional=True),
        "fitted.fluency.name": Expected(TEXT), "fitted.fluency.sha256": Expected(SHA256),
        "fitted.fluency.dtype": Expected(Constraint("bfloat16 or float32", lambda value: value in FLUENCY_DTYPES)),
        "fitted.fluency.stacking": Expected(OBJECT, optional=True),
        "fitted.fluency.stacking.intercept": Expected(interval()),
        "fitted.fluency.stacking.weights": Expected(FINITE_LIST),
        "fitted.fluency.selection": Expected(FLUENCY_SELECTION, optional=True),
        "fitted.fluency_english": Expected(interval(0, 1), optional=True),
    }


def _float64s(description: str, accepts: Callable[[np.ndarray], bool]) -> Constraint:
    return Constraint(description, lambda tensor: isinstance(tensor, torch.Tensor) and tensor.dim() == 1
                      and tensor.dtype == torch.float64 and accepts(tensor.numpy()))


def _ascending(values: np.ndarray) -> bool:
    return bool(np.isfinite(values).all() and (np.diff(values) >= 0).all())


FINITE = _float64s("finite float64 values", lambda values: bool(np.isfinite(values).all()))
# The saved tensors `load` uses as they are (the encoding's are checked by the kernel and the
# typicality tables as they are read), by name: a new one is one entry here.
SAVED_TENSORS: dict[str, Expected] = {
    "calibration_residuals": Expected(_float64s("ascending finite non-negative float64 values",
                                                lambda values: _ascending(values) and bool((values >= 0).all()))),
    **{f"outside_{index}": Expected(_float64s("ascending finite float64 values", _ascending),
                                    optional=index >= len(TEST_LOW_IS_ATYPICAL))  # the last: fluency's columns
       for index in range(len(FLUENCY_LOW_IS_ATYPICAL))},
    # fluency's outlier columns by token count, 0 to MAX_TOKENS (index 0, no token, unused)
    **{f"fluency_center_{index}": Expected(_float64s(
        f"{MAX_TOKENS + 1} float64 values finite past the first",
        lambda values: values.size == MAX_TOKENS + 1 and bool(np.isfinite(values[1:]).all())), optional=True)
       for index in range(STATISTIC_COLUMNS)},
    **{f"fluency_scale_{index}": Expected(_float64s(
        f"{MAX_TOKENS + 1} float64 values positive and finite past the first",
        lambda values: values.size == MAX_TOKENS + 1 and bool(np.isfinite(values[1:]).all() and (values[1:] > 0).all())),
        optional=True) for index in range(STATISTIC_COLUMNS)},
    # the unigram table of SLOR, one log-probability per token id (`fluency.part.unigram_table`)
    "fluency_unigram": Expected(_float64s("finite non-positive float64 values", lambda values: values.size > 0 and bool(
        np.isfinite(values).all() and (values <= 0).all())), optional=True),
    "outside_products": Expected(_float64s("ascending float64 values in (0, 1]", lambda values: _ascending(values)
                                           and bool(((values > 0) & (values <= 1)).all()))),
    "outside_smallest": Expected(_float64s("float64 values in (0, 1]", lambda values: bool(
        ((values > 0) & (values <= 1)).all()))),
    "ridge_alpha": Expected(FINITE, optional=True),
    "ridge_loo": Expected(FINITE, optional=True),
}
FLUENCY_TENSORS = [name for name in SAVED_TENSORS if name.startswith("fluency_")]


def check_saved(saved: SavedScorer) -> None:
    """Refuse, naming it, the first saved value outside what `saved_settings` and
    `SAVED_TENSORS` say it must be."""
    for place, expected in saved_settings(len(saved.texts)).items():
        *sections, name = place.split(".")
        holder: Any = saved.config
        for section in sections:
            holder = holder.get(section) if isinstance(holder, dict) else None
        if holder is None:  # an optional section that is null: its own entry said so
            continue
        _check(f"{CONFIG}: {place}", holder.get(name), expected)
    for name, expected in SAVED_TENSORS.items():
        _check(f"{TENSORS}: tensor {name!r}", saved.tensors.get(name), expected)


def _check(what: str, value: Any, expected: Expected) -> None:
    if value is None:
        if expected.optional:
            return
        problem = "but is missing"
    elif expected.constraint.accepts(value):
        return
    else:
        problem = "and is not" if isinstance(value, torch.Tensor) else f"not {value!r:.60}"
    raise SavedScorerError(f"{what} must be {expected.constraint.description}"
                           f"{' or null' if expected.optional else ''}, {problem}")
