"""Kernels as parts of a scorer: a name and the kernel's own settings, nothing fitted.

`NeighborsScorer(kernel=Bleu(smoothing="exp"))` keeps the part as given and, at `fit`, builds
from it the `Kernel` (`base.py`) that holds the fitted training encoding. A part accepts exactly
the settings its kernel's constructor takes (read from that constructor, so the two cannot
drift) plus the text settings every kernel shares; anything else is a TypeError at once, as in
any Python call. `settings()` says what a part is, as JSON, so a saved scorer can rebuild it.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from gpu_neighbors.core.validation import DEFAULT_AUTO_KERNELS, SCORER_PARAMETERS, interval, plain
from gpu_neighbors.kernels import KERNEL_NAMES, Kernel, kernel_class
from gpu_neighbors.kernels.combined import CombinedKernel
from gpu_neighbors.text.tokenizers import BUILT_IN_TOKENIZERS, Tokenizer, make_tokenizer

AUTO, COMBINED = "auto", "combined"
# Training texts (a seeded sample of the training set, the same whatever its order) on which
# `Auto` chooses its kernel and `Combined` its weights: one pass of each kernel over their pairs,
# not a fit per kernel (ROUGE-L, the slowest, ~0.6 s for 1,000 MLQE texts on one core).
CHOICE_TEXTS = 1000
# A combination's weights: every grid point is a ridge fit, cubic in the sample (one inverse per
# penalty where BLEU* makes the sum asymmetric: 15 points x 13 penalties at 500 texts, ~2 s).
COMBINED_CHOICE_TEXTS = 500
_SHARED = ("tokenizer", "lowercase", "allow_download")  # every part's text settings


class KernelPart:
    """A similarity kernel's settings: `tokenizer` (a built-in name, a Hugging Face tokenizer
    name or path, or an object with a `tokenize` method), `lowercase`, `allow_download` (let a
    tokenizer or model come from the hub), and the kernel's own keyword arguments (None: the
    kernel's default)."""

    name: ClassVar[str]

    def __init__(self, *, tokenizer: str | Tokenizer = "whitespace", lowercase: bool = False,
                 allow_download: bool = False, **options: Any) -> None:
        own = kernel_options(self.name)
        options = {key: value for key, value in options.items() if value is not None}  # None: the kernel's default
        for key in options:
            if key not in own:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {key!r}"
                                f" (it takes {', '.join([*_SHARED, *own])})")
        for key, value in (("tokenizer", tokenizer), ("lowercase", lowercase), ("allow_download", allow_download)):
            SCORER_PARAMETERS[key].check(value)
        if "weights" in options:
            SCORER_PARAMETERS["weights"].check(options["weights"])
            options["weights"] = tuple(plain(weight) for weight in options["weights"])
        self.tokenizer, self.lowercase, self.allow_download = tokenizer, lowercase, allow_download
        self.options = dict(options)

    @property
    def default_estimator(self) -> str:
        """The estimator a scorer uses with this kernel when none is given (`Kernel`)."""
        return kernel_class(self.name).default_estimator

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return (self.name,)

    def build(self, device: torch.device) -> Kernel[Any]:
        """A new, unfitted kernel with these settings on `device`."""
        options = dict(self.options)
        if "allow_download" in kernel_options(self.name):
            options["allow_download"] = self.allow_download
        tokenizer = make_tokenizer(self.tokenizer, self.lowercase, self.allow_download)
        return kernel_class(self.name)(tokenizer=tokenizer, device=device, **options)

    def check_available(self) -> None:
        """Refuse now, before any work, a model or tokenizer this part's kernel would load and
        cannot here (not on this machine, and downloads not allowed): its load's own refusal."""
        make_tokenizer(self.tokenizer, self.lowercase, self.allow_download)

    def settings(self) -> dict[str, Any]:
        """What this part is, as JSON: a tokenizer object by the name or path that makes it again
        (a built-in or Hugging Face one; any other cannot be written down)."""
        options = {key: list(value) if isinstance(value, tuple) else value for key, value in self.options.items()}
        return {"name": self.name, **self._text_settings(), **options}

    def _text_settings(self) -> dict[str, Any]:
        tokenizer, lowercase = self.tokenizer, self.lowercase
        if not isinstance(tokenizer, str):
            name = getattr(tokenizer, "name", None)
            if not isinstance(tokenizer, Tokenizer) or not isinstance(name, str) or not (
                    name in BUILT_IN_TOKENIZERS or name.startswith("hf:")):
                raise ValueError(f"the tokenizer {tokenizer!r} cannot be saved: give it by name (a built-in "
                                 "one, or a Hugging Face tokenizer's name or path)")
            lowercase = tokenizer.lowercase
            tokenizer = name
        return {"tokenizer": tokenizer, "lowercase": lowercase, "allow_download": self.allow_download}

    def __repr__(self) -> str:
        given = {key: value for key, value in self.settings().items() if key != "name"}
        defaults = {"tokenizer": "whitespace", "lowercase": False, "allow_download": False}
        shown = [f"{key}={value!r}" for key, value in given.items() if defaults.get(key, not value) != value]
        return f"{type(self).__name__}({', '.join(shown)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelPart) and other.settings() == self.settings()

    def __hash__(self) -> int:
        return hash(repr(self))


def kernel_options(name: str) -> tuple[str, ...]:
    """The keyword settings kernel `name`'s constructor takes besides tokenizer and device."""
    parameters = inspect.signature(kernel_class(name).__init__).parameters
    return tuple(key for key, parameter in parameters.items()
                 if parameter.kind is parameter.KEYWORD_ONLY and key not in ("tokenizer", "device", *_SHARED))


class Bleu(KernelPart):
    """BLEU* (the paper's kernel): `smoothing` ("add1", "epsilon", "exp", "none"), `weights` per
    n-gram order from 1 (BLEU*'s (0, 1/3, 1/3, 1/3) by default; BLEU-4 is four 0.25)."""

    name = "bleu"


class Rouge(KernelPart):
    """ROUGE-L F on the tokenizer's tokens."""

    name = "rouge"


class Meteor(KernelPart):
    """METEOR as NLTK computes it (exact, Porter stem and WordNet synonym stages)."""

    name = "meteor"


class BertScore(KernelPart):
    """BERTScore F: `model` (name or local path; referenced, never copied into a saved scorer),
    `layer`, `idf`, `rescale`, ..."""

    name = "bertscore"

    def check_available(self) -> None:
        """The tokenizer's check, the model's (`bertscore.check_model`) and, with no layer
        given, that bert-score knows the model's (`bertscore.default_layer`)."""
        from gpu_neighbors.kernels.bertscore import DEFAULT_MODEL, check_model, default_layer

        super().check_available()
        model = str(self.options.get("model", DEFAULT_MODEL))
        if self.options.get("layer") is None:
            default_layer(model)
        check_model(model, self.allow_download)


class Tfidf(KernelPart):
    """Cosine of the TF-IDF + ridge baseline's word and char_wb n-gram features."""

    name = "tfidf"


PART_CLASSES: dict[str, type[KernelPart]] = {cls.name: cls for cls in (Bleu, Rouge, Meteor, BertScore, Tfidf)}
ALL_NAMES = (*KERNEL_NAMES, AUTO, COMBINED)


def _single_parts(kernels: Sequence[str | KernelPart], owner: str, **text: Any) -> tuple[KernelPart, ...]:
    """`kernels` as single kernels' parts (names with the text settings `text`), for `owner`."""
    if isinstance(kernels, str) or not isinstance(kernels, Sequence) or not kernels:
        raise ValueError(f"kernels must be a non-empty list of kernel names or parts, not {kernels!r}")
    names = [kernel if isinstance(kernel, str) else getattr(kernel, "name", None) for kernel in kernels]
    if AUTO in names or COMBINED in names:  # by name, before the text settings (Auto takes none)
        raise ValueError(f"kernels: {owner!r} takes single kernels, not 'auto' or 'combined'")
    parts = [kernel if isinstance(kernel, KernelPart) else kernel_part(kernel, **text) for kernel in kernels]
    return tuple(part for part in parts if isinstance(part, KernelPart))


class Combined(KernelPart):
    """A weighted sum of kernels (`kernels/combined.py`): `kernels` are names (with this part's
    text settings) or parts, each kernel at most once; `weights` one per kernel, non-negative,
    summing to 1, or None: chosen at `fit` with the estimator's settings by exact leave-one-out
    on a sample of `sample` training texts (None: all), and kept in the fitted part. Its
    default estimator is kernel ridge (multiple kernel learning); top-k works as well."""

    name = COMBINED

    def __init__(self, kernels: Sequence[str | KernelPart] = DEFAULT_AUTO_KERNELS,
                 weights: Sequence[float] | None = None, *, sample: int | None = COMBINED_CHOICE_TEXTS,
                 tokenizer: str | Tokenizer = "whitespace", lowercase: bool = False,
                 allow_download: bool = False) -> None:
        for key, value in (("tokenizer", tokenizer), ("lowercase", lowercase), ("allow_download", allow_download)):
            SCORER_PARAMETERS[key].check(value)
        self.tokenizer, self.lowercase, self.allow_download = tokenizer, lowercase, allow_download
        self.kernels = _single_parts(kernels, COMBINED, tokenizer=tokenizer, lowercase=lowercase,
                                     allow_download=allow_download)
        names = [part.name for part in self.kernels]
        if len(set(names)) < len(names):
            raise ValueError(f"kernels: each kernel at most once in a combination, not {names}")
        self.weights = None if weights is None else _check_weights(weights, len(self.kernels))
        self.sample = _check_sample(sample)
        self.options = {}

    @property
    def default_estimator(self) -> str:
        return CombinedKernel.default_estimator

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.kernels)

    def check_available(self) -> None:
        for part in self.kernels:
            part.check_available()

    def with_weights(self, weights: Sequence[float]) -> Combined:
        """This combination with `weights` (what `fit` keeps once it has chosen them)."""
        return Combined(self.kernels, weights, sample=self.sample, tokenizer=self.tokenizer,
                        lowercase=self.lowercase, allow_download=self.allow_download)

    def build(self, device: torch.device) -> Kernel[Any]:
        """The weighted sum of the kernels of positive weight."""
        if self.weights is None:
            raise ValueError("a combined kernel's weights are chosen at fit: fit the scorer, or give weights")
        used = [(part, weight) for part, weight in zip(self.kernels, self.weights) if weight > 0]
        return CombinedKernel(kernels=[part.build(device) for part, _ in used], weights=[weight for _, weight in used],
                              tokenizer=make_tokenizer(self.tokenizer, self.lowercase, self.allow_download),
                              device=device)

    def settings(self) -> dict[str, Any]:
        return {"name": COMBINED, "kernels": [part.settings() for part in self.kernels],
                "weights": None if self.weights is None else list(self.weights), "sample": self.sample,
                **self._text_settings()}

    def __repr__(self) -> str:
        weights = "" if self.weights is None else f", weights={list(self.weights)!r}"
        return f"Combined({list(self.kernels)!r}{weights})"


def _check_weights(weights: Sequence[float], size: int) -> tuple[float, ...]:
    if isinstance(weights, str) or not isinstance(weights, Sequence) or len(weights) != size or not all(
            interval(0).accepts(weight) for weight in weights) or abs(sum(weights) - 1) > 1e-9:
        raise ValueError(f"weights must be {size} non-negative numbers summing to 1 (one per kernel), not {weights!r}")
    return tuple(float(weight) for weight in weights)


def _check_sample(sample: int | None) -> int | None:
    if sample is not None and not interval(3, integer=True).accepts(sample):
        raise ValueError(f"sample must be a whole number of training texts, at least 3, or None, not {sample!r}")
    return None if sample is None else int(sample)


class Auto:
    """A choice among kernels, made at `fit` by inner leave-one-out of each kernel with the
    scorer's estimator (tuned as `fit` tunes) on `sample` training texts (a seeded sample, the
    same texts in the same order whatever the training set's order; None: all of them): the
    highest rho wins, ties (to 1e-9) the first kernel. `kernels` are names (default settings)
    or parts. The default scorer's kernel: tfidf, bleu and rouge."""

    name = AUTO

    def __init__(self, kernels: Sequence[str | KernelPart] = DEFAULT_AUTO_KERNELS,
                 sample: int | None = CHOICE_TEXTS) -> None:
        self.kernels = _single_parts(kernels, AUTO)
        self.sample = _check_sample(sample)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.kernels)

    def check_available(self) -> None:
        """Each kernel's `KernelPart.check_available`."""
        for part in self.kernels:
            part.check_available()

    def settings(self) -> dict[str, Any]:
        return {"name": AUTO, "kernels": [part.settings() for part in self.kernels], "sample": self.sample}

    def __repr__(self) -> str:
        return f"Auto({list(self.kernels)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Auto) and other.settings() == self.settings()

    def __hash__(self) -> int:
        return hash(repr(self))


def kernel_part(kernel: str | KernelPart | Auto, **settings: Any) -> KernelPart | Auto:
    """The part `kernel` stands for: a part as given, a name as that kernel's part with
    `settings` (none: its defaults), "auto" as `Auto()`, "combined" as `Combined()`."""
    if isinstance(kernel, (KernelPart, Auto)):
        if settings:
            raise TypeError(f"settings {sorted(settings)} go on the part itself: {kernel!r}")
        return kernel
    if kernel == AUTO:
        return Auto(**settings)
    if kernel == COMBINED:
        return Combined(**settings)
    if not isinstance(kernel, str) or kernel not in PART_CLASSES:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(ALL_NAMES)}")
    return PART_CLASSES[kernel](**settings)


def part_from_settings(settings: Mapping[str, Any]) -> KernelPart | Auto:
    """The part `settings()` described (what a saved scorer holds)."""
    given = {key: value for key, value in settings.items() if key != "name"}
    if settings.get("name") == AUTO:
        return Auto([_single_part(kernel) for kernel in given.pop("kernels")], **given)
    if settings.get("name") == COMBINED:
        return Combined([_single_part(kernel) for kernel in given.pop("kernels")], **given)
    return _single_part(settings)


def _single_part(settings: Mapping[str, Any]) -> KernelPart:
    name = settings.get("name")
    if name not in PART_CLASSES:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(ALL_NAMES)}")
    return PART_CLASSES[name](**{key: value for key, value in settings.items() if key != "name"})
