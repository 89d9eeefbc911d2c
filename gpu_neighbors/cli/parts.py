"""The command line's flags mapped onto a scorer's parts.

The library composes a scorer from explicit parts (`NeighborsScorer(kernel=Bleu(...),
estimator=Threshold(...))`); the command line keeps its flat flags and their documented
defaults: no --kernel means auto (tfidf, unless bleu or rouge -- bertscore too when --model is
given -- predicts the training scores better by leave-one-out on a sample of the training set
beyond the sample's noise), or the paper's bleu when a setting of the paper's method is
given (--paper-thresholds, --tau, -a, -b, --estimator threshold, or a BLEU* setting); no
--estimator means the kernel's, or the threshold rule when --paper-thresholds, --tau, -a or -b
is given. A flag the chosen estimator never reads is named in a warning and left out.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.intervals import Intervals
from gpu_neighbors.core.validation import DEFAULT_AUTO_KERNELS, DEFAULT_KERNEL, PAPER_KERNEL, SCORER_PARAMETERS
from gpu_neighbors.estimators import Estimator, Ridge, Threshold, TopK
from gpu_neighbors.kernels import KERNEL_NAMES, kernel_class
from gpu_neighbors.kernels.parts import AUTO, COMBINED, Auto, Combined, KernelPart, kernel_part

TUNING = {"auto": "auto", "tuned": "always", "paper": "never"}  # --thresholds MODE -> the part's tuning
PAPER_RULE = ("tau", "min_neighbors", "max_fraction")
BLEU_ONLY = ("smoothing", "weights")
# What each estimator reads of the flat settings.
READS = {"threshold": (*PAPER_RULE, "weighting", "power"), "topk": ("top_k", "weighting", "power"),
         "ridge": ("penalty",)}
ESTIMATOR_FLAGS = ("tau", "min_neighbors", "max_fraction", "weighting", "power", "top_k", "penalty")


def kernel_name(settings: Mapping[str, Any]) -> str:
    """--kernel, else auto, or bleu where a setting of the paper's method is given."""
    if settings.get("kernel") is not None:
        return str(settings["kernel"])
    bleu_settings = (any(settings.get(name) is not None for name in BLEU_ONLY)
                     or settings.get("tokenizer", "whitespace") != "whitespace" or settings.get("lowercase")
                     or bool(settings.get("kernel_options")))
    paper = _asks_for_paper_rule(settings) or settings.get("estimator") == "threshold" or bleu_settings
    return PAPER_KERNEL if paper else DEFAULT_KERNEL


def _asks_for_paper_rule(settings: Mapping[str, Any]) -> bool:
    return settings.get("thresholds") == "paper" or any(settings.get(name) is not None for name in PAPER_RULE)


def kernel_from_settings(settings: Mapping[str, Any]) -> KernelPart | Auto:
    """The kernel part the flat settings describe; with auto or combined, `kernel_options` is
    keyed by kernel name."""
    name = kernel_name(settings)
    options = dict(settings.get("kernel_options") or {})
    if name not in (AUTO, COMBINED):
        return _one_kernel(name, settings, options)
    kernels = tuple(settings.get("kernels") or DEFAULT_AUTO_KERNELS)
    stray = sorted(set(options) - set(kernels))
    if stray:
        raise ValueError(f"with kernel {name!r}, kernel options are keyed by kernel name; {stray} "
                         f"are not among the kernels {kernels}")
    parts = [_one_kernel(kernel, settings, options.get(kernel) or {}, auto=True) for kernel in dict.fromkeys(kernels)]
    if name == AUTO:
        return Auto(parts)
    text = {key: settings[key] for key in ("tokenizer", "lowercase", "allow_download") if key in settings}
    return Combined(parts, **text)


def warn_unread_text_settings(name: str, settings: Mapping[str, Any]) -> None:
    """Warns of --tokenizer and --lowercase given to a kernel that brings its own tokenization
    (tfidf's analyzers, BERTScore's model): they change no estimate."""
    if name not in KERNEL_NAMES or kernel_class(name).uses_tokenizer:
        return
    for key, default in (("tokenizer", "whitespace"), ("lowercase", False)):
        if settings.get(key, default) != default:
            warn(f"{key} ({SCORER_PARAMETERS[key].flag}) = {settings[key]!r} is not read by the {name} kernel, "
                 "which tokenizes in its own way: it changes no estimate")


def _one_kernel(name: str, settings: Mapping[str, Any], options: Mapping[str, Any], auto: bool = False) -> KernelPart:
    if name in (AUTO, COMBINED):  # Auto() takes no tokenizer: a TypeError traceback otherwise
        raise ValueError(f"kernels ({SCORER_PARAMETERS['kernels'].flag}): {name!r} is not a single kernel")
    shared = {key: settings[key] for key in ("tokenizer", "lowercase", "allow_download") if key in settings}
    if not auto:
        warn_unread_text_settings(name, settings)
    for key in BLEU_ONLY:
        if settings.get(key) is None:
            continue
        if name == "bleu":
            shared[key] = settings[key]
        elif not auto:
            raise ValueError(f"{key} applies to the bleu kernel only, not {name!r}")
    part = kernel_part(name, **shared, **options)
    if not isinstance(part, KernelPart) or isinstance(part, Combined):
        raise ValueError(f"kernels: {name!r} is not a single kernel")
    return part


def estimator_from_settings(settings: Mapping[str, Any], kernel: KernelPart | Auto) -> Estimator | None:
    """The estimator part the flat settings describe, or None for the kernel's default."""
    name = settings.get("estimator")
    if name is None and _asks_for_paper_rule(settings):
        name = "threshold"
    given = {key: settings.get(key) for key in ESTIMATOR_FLAGS if settings.get(key) is not None}
    mode = TUNING[settings.get("thresholds") or "auto"]
    if name is None and not given and mode == "auto":
        return None
    if name is None:
        name = kernel.default_estimator if isinstance(kernel, KernelPart) else "topk"
    weighting = given.get("weighting") or ("uniform" if name == "threshold" else "similarity")
    unread = {key for key in given if key not in READS[name]}
    if weighting != "similarity" and "power" in given:
        unread.add("power")
    for key in sorted(unread, key=ESTIMATOR_FLAGS.index):
        warn(f"{key} ({SCORER_PARAMETERS[key].flag}) = {given[key]!r} is not read by the {name} estimator "
             "(threshold reads tau, a and b; topk k; ridge lambda; p weights threshold and topk): it changes no "
             "estimate")
        del given[key]
    if name == "ridge":
        return Ridge(penalty=given.get("penalty"), tuning=mode)
    if name == "topk":
        return TopK(k=given.get("top_k"), weighting=weighting, power=given.get("power"), tuning=mode)
    return Threshold(tau=given.get("tau"), min_neighbors=given.get("min_neighbors"),
                     max_fraction=given.get("max_fraction"), weighting=weighting, power=given.get("power"),
                     tuning=mode)


def parts_from_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`NeighborsScorer`'s keyword arguments for the flat settings (the table's names)."""
    if kernel_name(settings) not in (AUTO, COMBINED) and "kernels" in settings \
            and tuple(settings["kernels"]) != tuple(SCORER_PARAMETERS["kernels"].default):
        warn(f"kernels ({SCORER_PARAMETERS['kernels'].flag}) = {','.join(settings['kernels'])} is read only with "
             "kernel 'auto' or 'combined': it changes no estimate")
    kernel = kernel_from_settings(settings)
    run = {key: settings[key] for key in ("level", "device", "memory_budget", "chunk_size", "progress",
                                          "score_range", "fluency") if key in settings}
    if "level" in run:
        outside = {key: settings[key] for key in ("outside_level", "negatives", "words") if key in settings}
        run["level"] = Intervals(run["level"], **outside)
    return {"kernel": kernel, "estimator": estimator_from_settings(settings, kernel), **run}
