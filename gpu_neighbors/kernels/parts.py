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

from gpu_neighbors.core.validation import SCORER_PARAMETERS
from gpu_neighbors.kernels import KERNEL_NAMES, Kernel, kernel_class
from gpu_neighbors.text.tokenizers import BUILT_IN_TOKENIZERS, Tokenizer, make_tokenizer

AUTO = "auto"
DEFAULT_AUTO_KERNELS = ("bleu", "rouge", "tfidf", "bertscore")
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
            options["weights"] = tuple(options["weights"])
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

    def settings(self) -> dict[str, Any]:
        """What this part is, as JSON: a tokenizer object by the name or path that makes it again
        (a built-in or Hugging Face one; any other cannot be written down)."""
        tokenizer, lowercase = self.tokenizer, self.lowercase
        if not isinstance(tokenizer, str):
            name = getattr(tokenizer, "name", None)
            if not isinstance(tokenizer, Tokenizer) or not isinstance(name, str) or not (
                    name in BUILT_IN_TOKENIZERS or name.startswith("hf:")):
                raise ValueError(f"the tokenizer {tokenizer!r} cannot be saved: give it by name (a built-in "
                                 "one, or a Hugging Face tokenizer's name or path)")
            lowercase = tokenizer.lowercase
            tokenizer = name
        options = {key: list(value) if isinstance(value, tuple) else value for key, value in self.options.items()}
        return {"name": self.name, "tokenizer": tokenizer, "lowercase": lowercase,
                "allow_download": self.allow_download, **options}

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


class Tfidf(KernelPart):
    """Cosine of the TF-IDF + ridge baseline's word and char_wb n-gram features."""

    name = "tfidf"


PART_CLASSES: dict[str, type[KernelPart]] = {cls.name: cls for cls in (Bleu, Rouge, Meteor, BertScore, Tfidf)}


class Auto:
    """A choice among kernels, made at `fit` by inner leave-one-out on the training set (each
    kernel with the scorer's estimator, tuned as `fit` tunes): `kernels` are names (default
    settings) or parts."""

    name = AUTO

    def __init__(self, kernels: Sequence[str | KernelPart] = DEFAULT_AUTO_KERNELS) -> None:
        if isinstance(kernels, str) or not isinstance(kernels, Sequence) or not kernels:
            raise ValueError(f"kernels must be a non-empty list of kernel names or parts, not {kernels!r}")
        parts = [kernel_part(kernel) for kernel in kernels]
        self.kernels = tuple(part for part in parts if isinstance(part, KernelPart))
        if len(self.kernels) < len(parts):
            raise ValueError("kernels: 'auto' cannot choose among itself")

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.kernels)

    def settings(self) -> dict[str, Any]:
        return {"name": AUTO, "kernels": [part.settings() for part in self.kernels]}

    def __repr__(self) -> str:
        return f"Auto({list(self.kernels)!r})"


def kernel_part(kernel: str | KernelPart | Auto, **settings: Any) -> KernelPart | Auto:
    """The part `kernel` stands for: a part as given, a name as that kernel's part with
    `settings` (none: its defaults), "auto" as `Auto()`."""
    if isinstance(kernel, (KernelPart, Auto)):
        if settings:
            raise TypeError(f"settings {sorted(settings)} go on the part itself: {kernel!r}")
        return kernel
    if kernel == AUTO:
        return Auto(**settings)
    if not isinstance(kernel, str) or kernel not in PART_CLASSES:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join((*KERNEL_NAMES, AUTO))}")
    return PART_CLASSES[kernel](**settings)


def part_from_settings(settings: Mapping[str, Any]) -> KernelPart | Auto:
    """The part `settings()` described (what a saved scorer holds)."""
    if settings.get("name") == AUTO:
        return Auto([_single_part(kernel) for kernel in settings["kernels"]])
    return _single_part(settings)


def _single_part(settings: Mapping[str, Any]) -> KernelPart:
    name = settings.get("name")
    if name not in PART_CLASSES:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join((*KERNEL_NAMES, AUTO))}")
    return PART_CLASSES[name](**{key: value for key, value in settings.items() if key != "name"})
