"""Every setting of the scorer declared once, in the style of scikit-learn's
`_parameter_constraints`: `NeighborsScorer` validates against this table at `fit`, and the CLI
builds its options, defaults and help from it. Booleans are never numbers here: `tau=True` is a
mistake, not 1.0.

Which values exist for `kernel`, `smoothing` and `tokenizer` is for their registries (kernels,
text) to say: this layer sits below them, so it checks only the type of those settings.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, KeysView, Mapping, Sequence, Set
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch

DEFAULT_MIN_COVERAGE = 0.8
# Tuned by default from this many training texts; below, the paper's thresholds and a warning.
MIN_TUNING_TEXTS = 50
THRESHOLD_MODES = ("auto", "tuned", "paper")
ESTIMATOR_NAMES = ("threshold", "topk", "ridge")
WEIGHTINGS = ("uniform", "similarity")
# The model-free kernels, the first kept on a tie: TF-IDF cosine (level with the TF-IDF + ridge
# baseline on every development set with top-k), BLEU* (better on NLG outputs), ROUGE-L (on
# learner sentences); bertscore joins where a model is given (bench/quality.md).
DEFAULT_AUTO_KERNELS = ("tfidf", "bleu", "rouge")
# kernel=None: the kernel of those three whose leave-one-out on (a sample of) the training set
# is best, unless a setting of the paper's method asks for its BLEU* (cli/parts.py).
DEFAULT_KERNEL, PAPER_KERNEL = "auto", "bleu"
DEFAULT_TOP_K = 50
MAX_TOP_K = 1000
MAX_POWER = 64
DEFAULT_LEVEL = 0.9  # of the conformal intervals (core/conformal.py)
NEGATIVE_RULES = ("lowest_decile", "minimum", "none")
# The word lists of the spelling statistic (text/lexicon.py: pyspellchecker's), by language; none: no list
WORD_LISTS = ("en", "de", "es", "fr", "it", "nl", "pt", "ru", "ar", "eu", "fa", "lv", "none")
DEFAULT_OUTSIDE_LEVEL = 0.05  # of the outlier test (core/outside.py)


class NotFittedError(ValueError, AttributeError, RuntimeError):
    """A fitted-only method called before `fit`. ValueError and AttributeError as in
    scikit-learn; RuntimeError because that is what such calls raised before."""


def plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (anything else as it is): a setting given as
    np.int64(5) or np.float32(0.5) is kept, written to JSON and computed with as 5 or 0.5."""
    return value.item() if isinstance(value, np.generic) else value


def check_is_fitted(estimator: object, attribute: str = "kernel_") -> None:
    """Raise NotFittedError unless `estimator` holds `attribute`, which only `fit` sets."""
    if not hasattr(estimator, attribute):
        raise NotFittedError(
            f"this {type(estimator).__name__} is not fitted yet: call fit(texts, scores) first"
        )


@dataclass(frozen=True)
class Constraint:
    """What a setting accepts, said once for the check and once for the message."""

    description: str
    accepts: Callable[[Any], bool]


def interval(
    low: float | None = None, high: float | None = None, closed: str = "both", *, integer: bool = False
) -> Constraint:
    """Finite numbers (or integers) between `low` and `high`; `closed` says which ends are
    included: both, left, right or neither."""
    left = closed in ("both", "left")
    right = closed in ("both", "right")

    def accepts(value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral if integer else Real):
            return False
        if not isinstance(value, Integral) and not math.isfinite(value):  # an int is finite, however large
            return False
        if low is not None and (value < low or (value == low and not left)):
            return False
        return high is None or value < high or (value == high and right)

    noun = "an integer" if integer else "a finite number"
    if low is not None and high is not None:
        bounds = f" in {'[' if left else '('}{low:g}, {high:g}{']' if right else ')'}"
    elif low is not None:
        bounds = f" {'>=' if left else '>'} {low:g}"
    elif high is not None:
        bounds = f" {'<=' if right else '<'} {high:g}"
    else:
        bounds = ""
    return Constraint(noun + bounds, accepts)


def half_steps(high: float) -> Constraint:
    """Multiples of 1/2 in [0, high]: the weight powers every device computes alike
    (`neighbours.quantised_weights`)."""
    number = interval(0, high)
    return Constraint(f"a multiple of 0.5 in [0, {high:g}]",
                      lambda value: number.accepts(value) and float(value * 2).is_integer())


def instance_of(*types: type, description: str) -> Constraint:
    return Constraint(description, lambda value: isinstance(value, types))


def _is_range(value: Any) -> bool:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        return False
    number = interval()
    return number.accepts(value[0]) and number.accepts(value[1]) and value[0] <= value[1]


def _is_weights(value: Any) -> bool:
    if not isinstance(value, (tuple, list)) or not len(value) >= 1:
        return False
    # each in [0, 1 + 1e-6] first: then the sum cannot pass float range (fsum raises OverflowError)
    weight = interval(0, 1 + 1e-6)
    return all(weight.accepts(each) for each in value) and abs(math.fsum(value) - 1) <= 1e-6


def _is_names(value: Any) -> bool:
    return (
        isinstance(value, (tuple, list)) and len(value) > 0
        and all(isinstance(name, str) and name for name in value)
    )


def _is_tokenizer(value: Any) -> bool:
    return isinstance(value, str) or callable(getattr(value, "tokenize", None))


BOOLEAN = instance_of(bool, np.bool_, description="True or False")


def _is_fluency(value: Any) -> bool:
    """A name or path (str, os.PathLike), None, or a part (anything with `settings` and `files`)."""
    return value is None or isinstance(value, (str, os.PathLike)) and bool(str(value)) or (
        hasattr(value, "settings") and hasattr(value, "files"))


def check_flag(name: str, value: object) -> bool:
    """`value` as a bool, else a ValueError naming `name`: "no", 0 or 1.0 would silently read as
    set or not."""
    if not BOOLEAN.accepts(value):
        raise ValueError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def check_name(value: object, what: str) -> str:
    """A name (a dataset column's, a metric's): a non-empty string, refused when the object that
    reads it is made rather than at its first use (a trainer's first step, every Ray actor)."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be a non-empty string, not {value!r}")
    return value


def check_path(name: str, value: object) -> None:
    """A file or folder name (str or os.PathLike), else a TypeError naming `name` (pathlib's says
    only "expected str, bytes or os.PathLike object")."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), not {type(value).__name__}")


def one_of(*values: str) -> Constraint:
    return Constraint("one of " + ", ".join(values), lambda value: isinstance(value, str) and value in values)


@dataclass(frozen=True)
class Parameter:
    """One setting: its Python type, what it accepts, its default and help. `optional` means
    None is accepted (`none_means` says what it then does); `cli` whether the command line has
    an option for it (named `flag`)."""

    name: str
    type: type
    constraint: Constraint
    default: Any
    help: str
    optional: bool = False
    none_means: str | None = None
    cli: bool = True
    metavar: str | tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def requirement(self) -> str:
        return self.constraint.description + (" or None" if self.optional else "")

    def check(self, value: Any) -> None:
        if value is None and self.optional:
            return
        if not self.constraint.accepts(value):
            raise ParameterError(self, value)


class ParameterError(ValueError):
    """A setting the table refuses; `message` names it as the caller knows it (the CLI: by flag)."""

    def __init__(self, parameter: Parameter, value: Any, requirement: str | None = None) -> None:
        self.parameter = parameter
        self.value = value
        self.requirement = requirement or parameter.requirement  # narrower, given the data
        super().__init__(self.message(parameter.name))

    def message(self, name: str) -> str:
        return f"{name} must be {self.requirement}, not {self.value!r}"


def _table(*parameters: Parameter) -> dict[str, Parameter]:
    return {parameter.name: parameter for parameter in parameters}


# NeighborsScorer's constructor, in its order.
SCORER_PARAMETERS = _table(
    Parameter("kernel", str, instance_of(str, description="a kernel name"), None,
              "similarity kernel", optional=True,
              none_means=f"{DEFAULT_KERNEL} (tfidf, unless bleu or rouge predicts the training scores better by "
                         "leave-one-out on a sample of the training set beyond the sample's noise; bertscore joins "
                         f"with --model); {PAPER_KERNEL} (the paper's BLEU*) when a setting of "
                         "the paper's method is given: paper thresholds, tau, a, b, the threshold estimator, "
                         "smoothing, weights, a tokenizer other than whitespace, lowercase, or kernel options"),
    Parameter("tau", float, interval(), None, "similarity threshold", optional=True,
              none_means="the kernel's default: the paper's, or for tfidf (not in the paper) 0.03"),
    Parameter("min_neighbors", int, interval(1, integer=True), None,
              "a: fewest neighbours for an estimate", optional=True,
              none_means="tuned, else the paper's 5", metavar="A"),
    Parameter("max_fraction", float, interval(0, 1, closed="right"), None,
              "b: most neighbours, as a share of the training set", optional=True,
              none_means="tuned, else the paper's 0.66", metavar="B"),
    Parameter("thresholds", str, one_of(*THRESHOLD_MODES), "auto",
              "auto: tune tau, a, b (and p, k) by leave-one-out on the training set when it has "
              f">= {MIN_TUNING_TEXTS} texts and none is given, else the paper's; tuned: always; "
              "paper: the paper's settings", metavar="MODE"),
    Parameter("estimator", str, one_of(*ESTIMATOR_NAMES), None,
              "threshold: mean q of the neighbours within tau (the paper's rule); topk: weighted "
              "mean q of the k most similar training texts (an estimate for every text with any "
              "similar training text); ridge: kernel ridge regression on the similarities (an "
              "estimate for every text)", optional=True,
              none_means="the kernel's: topk (ridge for bertscore); with --paper-thresholds or tau, a or b "
                         "given: threshold"),
    Parameter("weighting", str, one_of(*WEIGHTINGS), None,
              "uniform: plain mean; similarity: weights k(x, s)^p", optional=True,
              none_means="uniform for threshold, similarity for topk"),
    Parameter("power", float, half_steps(MAX_POWER), None, "p of similarity weighting k^p",
              optional=True, none_means="tuned, else 1", metavar="P"),
    Parameter("top_k", int, interval(1, MAX_TOP_K, integer=True), None,
              "k of the topk estimator (capped at the training set's size)", optional=True,
              none_means=f"tuned, else {DEFAULT_TOP_K}", metavar="K"),
    Parameter("penalty", float, interval(0, closed="neither"), None,
              "lambda of the ridge estimator (in the similarities' units)", optional=True,
              none_means="chosen by exact leave-one-out on the training set", metavar="LAMBDA"),
    Parameter("kernels", tuple, Constraint("a non-empty list of kernel names", _is_names), DEFAULT_AUTO_KERNELS,
              "with kernel auto: the kernels to choose from by inner leave-one-out on the training set; "
              "with kernel combined: the kernels to sum",
              metavar="K1,K2,..."),
    Parameter("device", str, instance_of(str, torch.device, description="a device name or torch.device"),
              "auto", "auto (CUDA when present), cpu, cuda, cuda:N"),
    Parameter("smoothing", str, instance_of(str, description="a smoothing name"), None,
              "BLEU* smoothing", optional=True, none_means="add1"),
    Parameter("weights", tuple, Constraint("non-negative weights (n-gram orders 1, 2, ...) summing to 1",
                                           _is_weights), None,
              "bleu kernel: weight per n-gram order from 1, e.g. 0.25,0.25,0.25,0.25 for BLEU-4",
              optional=True, none_means="BLEU*, 0,1/3,1/3,1/3", metavar="W1,W2,..."),
    Parameter("tokenizer", str, Constraint("a tokenizer name or an object with a tokenize method", _is_tokenizer),
              "whitespace", "a built-in tokenizer, or a Hugging Face tokenizer name or path"),
    Parameter("lowercase", bool, BOOLEAN, False, "fold case before tokenizing"),
    Parameter("allow_download", bool, BOOLEAN, False,
              "let a Hugging Face tokenizer or BERTScore model come from the hub; without it only "
              "local folders and the Hugging Face cache are read (a folder's own code never runs)"),
    Parameter("kernel_options", dict, instance_of(Mapping, description="a mapping of keyword arguments"),
              None, "keyword arguments of the kernel (e.g. model and layer for BERTScore)",
              optional=True, none_means="none", cli=False),
    Parameter("memory_budget", int, interval(1, integer=True), None,
              "tile working memory in bytes",
              optional=True, none_means="from the device", metavar="SIZE"),
    Parameter("chunk_size", int, interval(1, integer=True), None,
              "candidates per chunk; results never depend on it", optional=True,
              none_means="from the memory budget", cli=False),
    Parameter("progress", bool, BOOLEAN, False, "a progress bar on stderr for long predictions", cli=False),
    Parameter("score_range", tuple, Constraint("(low, high) with finite low <= high", _is_range), (0.0, 1.0),
              "range every known score must lie in, as in the paper", optional=True,
              none_means="any finite score", metavar=("LOW", "HIGH")),
    Parameter("level", float, interval(0, 1, closed="neither"), DEFAULT_LEVEL,
              "nominal coverage of each estimate's interval [low, high] (conformal, from the "
              "training set's leave-one-out residuals)"),
    Parameter("negatives", str, one_of(*NEGATIVE_RULES), NEGATIVE_RULES[0],
              "the estimate of a text outside the training distribution (word salad, shuffled or "
              "repeated words, another domain: `outside` in every row): lowest_decile: the mean "
              "score of the training set's lowest tenth; minimum: the score range's low end (the "
              "lowest training score without a range); none: its neighbours' estimate, only flagged",
              metavar="RULE"),
    Parameter("outside_level", float, interval(0, 1, closed="neither"), DEFAULT_OUTSIDE_LEVEL,
              "share of texts from the training distribution that may be flagged outside (a "
              "conformal outlier test on the training set's leave-one-out)", metavar="ALPHA"),
    Parameter("words", str, one_of(*WORD_LISTS), WORD_LISTS[0],
              "language of the word list that tells misspelt or mangled words from new ones (the "
              "outlier test's spelling statistic; pyspellchecker's lists); none: no list, the "
              "statistic off", metavar="LANG"),
    Parameter("fluency", str, Constraint("auto, none, a model's path or a Fluency part", _is_fluency), "auto",
              "a small English language model's judgment beside the neighbours' (docs/fluency.md): auto: the "
              "offline model where fetched (gpu-neighbors fetch-model), in the estimate where leave-one-out on "
              "the training set gains beyond noise, and a column of the outlier test; none: off; PATH: that "
              "GGUF file or Hugging Face causal LM folder, always used", metavar="auto|none|PATH"),
)
# Settings of `fit`: tuning chooses tau, a and b with at least this coverage.
FIT_PARAMETERS = _table(
    Parameter("min_coverage", float, interval(0, 1), DEFAULT_MIN_COVERAGE,
              "with tuning: the least coverage a choice may have", metavar="C"),
)
PARAMETERS = {**SCORER_PARAMETERS, **FIT_PARAMETERS}
DEFAULTS: dict[str, Any] = {name: parameter.default for name, parameter in PARAMETERS.items()}


def validate_parameters(values: Mapping[str, Any], table: Mapping[str, Parameter] = PARAMETERS) -> None:
    """Raise ParameterError for the first of `values` (name -> value) its table entry refuses."""
    for name, value in values.items():
        table[name].check(value)


def unordered(values: object) -> bool:
    """Whether `values` is a set or a mapping, whose order is not one the caller gave: a set
    iterates in hash order (its texts would meet other texts' scores), a mapping its keys. A
    mapping's keys view is in insertion order, as its values view is, so it passes."""
    return isinstance(values, Mapping) or (isinstance(values, Set) and not isinstance(values, KeysView))


def first_not_a_number(values: Iterable[object]) -> tuple[int, object] | None:
    """The index and value of the first of `values` that is not a real number, or None: a bool
    is not one, nor a string "0.5" or None, which numpy would convert to a float in silence."""
    for index, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
            return index, value
    return None


def first_not_a_string(values: Sequence[object]) -> tuple[int, object] | None:
    """The index and value of the first of `values` that is not a string, or None (a look per
    type, not per value, where all are strings)."""
    if all(issubclass(kind, str) for kind in set(map(type, values))):
        return None
    return next((index, value) for index, value in enumerate(values) if not isinstance(value, str))


def shown(value: object) -> str:
    """A value in a message about what it should have been: its type and the start of its repr."""
    return "None" if value is None else f"a {type(value).__name__} ({value!r:.60})"


def check_texts(texts: Sequence[str], what: str, at_least: int = 0) -> list[str]:
    """`texts` as a list of strings, naming the first that is not one; one string alone is a
    mistake, not a sequence of characters."""
    if isinstance(texts, str):
        raise TypeError(f"{what} must be a sequence of strings, not one string")
    if unordered(texts) or not isinstance(texts, Iterable):
        raise TypeError(f"{what} must be a sequence of strings in order, not a {type(texts).__name__}")
    texts = list(texts)
    wrong = first_not_a_string(texts)
    if wrong is not None:
        raise TypeError(f"{what}[{wrong[0]}] is {type(wrong[1]).__name__}, not str")
    if len(texts) < at_least:
        raise ValueError(f"{what}: {len(texts)} text{'s' if len(texts) != 1 else ''}; need at least {at_least}")
    return texts
