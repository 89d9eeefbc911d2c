"""Command-line options made from the parameter table (`core.validation`): each setting's flag,
type, default and help come from there, so the CLI cannot drift from the library. The
registries say which values exist (kernels, smoothings, built-in tokenizers)."""
from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import Any

from gpu_neighbors.cli.parts import kernel_name, parts_from_settings
from gpu_neighbors.core.validation import (
    ESTIMATOR_NAMES,
    NEGATIVE_RULES,
    PARAMETERS,
    SCORER_PARAMETERS,
    THRESHOLD_MODES,
    WEIGHTINGS,
    Parameter,
)
from gpu_neighbors.data.formats import QUOTINGS
from gpu_neighbors.data.readers import DEFAULT_MAX_CHARS, SCORED_FORMATS
from gpu_neighbors.kernels import KERNEL_NAMES
from gpu_neighbors.kernels.bleu_tables import SMOOTHINGS
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.text.tokenizers import BUILT_IN_TOKENIZERS

# Settings whose values are a closed set: argparse refuses anything else.
CHOICES: dict[str, tuple[str, ...]] = {
    "kernel": (*KERNEL_NAMES, "auto", "combined"), "smoothing": SMOOTHINGS, "thresholds": THRESHOLD_MODES,
    "estimator": ESTIMATOR_NAMES, "weighting": WEIGHTINGS, "negatives": NEGATIVE_RULES,
}
# Settings that also take any other name: the help lists the built-in ones.
BUILT_IN: dict[str, tuple[str, ...]] = {"tokenizer": tuple(BUILT_IN_TOKENIZERS)}
# Settings one command or another leaves out (compare takes its own --kernels and --tau).
ONE_KERNEL = ("kernel", "tau", "kernels")
DATA_OPTIONS = ("score_range",)
TUNING_OPTIONS = ("min_coverage",)
MODEL_OPTIONS = tuple(
    name for name, parameter in SCORER_PARAMETERS.items() if parameter.cli and name not in DATA_OPTIONS
)


def integer_at_least(text: str, least: int, most: int | None = None) -> int | None:
    """`text` as an integer of at least `least` (and at most `most`), or None (not an integer,
    or out of bounds): what the integer option types below check, each with its own message."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= least and (most is None or value <= most) else None


# Upper bounds of the integer options: far beyond any real run, yet each refuses a typo that
# would otherwise overflow (--max-chars 1e20 digits) or run until killed (--runs 10^20).
MOST = 1 << 31  # texts, characters, batch sizes, samples
MOST_DRAWS = 10_000_000  # bootstrap resamples, randomization trials
MOST_RUNS = 100_000  # random subsets per size: each is a leave-one-out pass
MOST_WORKERS = 1024
MOST_EXPLAINED = 10_000  # neighbours shown per candidate
MOST_PER_CANDIDATE = 1 << 20  # pairs kept per candidate (pairs --top-k): k entries each in memory
MOST_SEED = (1 << 63) - 1


def bounded(least: int, most: int, what: str) -> Callable[[str], int]:
    """The option type of a whole number of `what` from `least` to `most`."""
    def parse(text: str) -> int:
        value = integer_at_least(text, least, most)
        if value is None:
            raise argparse.ArgumentTypeError(f"{what}: give a whole number from {least:,} to {most:,}, not {text!r}")
        return value

    parse.__name__ = what.replace(" ", "_")  # argparse names the type in its messages
    return parse


positive_int = bounded(1, MOST, "a positive integer")
runs = bounded(1, MOST_RUNS, "a number of runs")
draws = bounded(1, MOST_DRAWS, "a number of draws")
workers = bounded(1, MOST_WORKERS, "a number of workers")
layer = bounded(0, 10_000, "a layer")


def seed(text: str) -> int:
    """A random seed: numpy takes non-negative integers only."""
    value = integer_at_least(text, 0, MOST_SEED)
    if value is None:
        raise argparse.ArgumentTypeError(f"a seed is a non-negative integer, not {text!r}"
                                         if integer_at_least(text, 0) is None else
                                         f"a seed is below 2^63, not {text!r}")
    return value


MIN_MEMORY_BUDGET = 16 << 10  # smaller tiles make a run of any size take practically forever
MAX_MEMORY_BUDGET = 1 << 50


def parse_size(text: str) -> int:
    """Bytes, or a size with a unit: 512M, 2G; at least MIN_MEMORY_BUDGET."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if text[-1:].upper() in units:
            size = int(float(text[:-1]) * units[text[-1].upper()])
        else:
            size = int(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)") from None
    if size < MIN_MEMORY_BUDGET:
        raise argparse.ArgumentTypeError(f"{text!r} is below the smallest budget, 16K: tiles that small "
                                         "would never finish a real run")
    if size > MAX_MEMORY_BUDGET:
        raise argparse.ArgumentTypeError(f"{text!r} is above the largest budget, 1P")
    return size


MAX_THREADS_PER_CORE = 4  # beyond, OpenMP aborts (20,000) or crashes (40,000) for no speed


def thread_count(text: str) -> int:
    """A positive number of threads, at most MAX_THREADS_PER_CORE per core of this machine."""
    value = positive_int(text)
    most = MAX_THREADS_PER_CORE * (os.cpu_count() or 1)
    if value > most:
        raise argparse.ArgumentTypeError(f"{value} threads: at most {most} on this machine "
                                         f"({MAX_THREADS_PER_CORE} per core)")
    return value


def number_list(text: str) -> list[float]:
    """`1,2,5` or `start:stop:step` (stop included)."""
    try:
        if ":" in text:
            start, stop, step = (float(part) for part in text.split(":"))
            if step <= 0:
                raise ValueError
            count = (stop - start) / step + 1e-9 + 1
            if not math.isfinite(count):
                raise ValueError
            if count < 1:
                raise argparse.ArgumentTypeError(f"{text!r} is an empty range: its start is past its stop")
            if count > MAX_VALUES:
                raise argparse.ArgumentTypeError(f"{text!r} gives {count:,.0f} values: at most {MAX_VALUES:,}")
            return [round(start + index * step, 10) for index in range(max(int(math.floor(count)), 0))]
        values = [float(part) for part in text.split(",") if part.strip()]
        if not values:  # nothing to sweep or plot: an empty report figure was an IndexError
            raise argparse.ArgumentTypeError(f"{text!r} holds no values: give a list (1,2,5) or range (start:stop:step)")
        if len(values) > MAX_VALUES:
            raise argparse.ArgumentTypeError(f"{len(values):,} values: at most {MAX_VALUES:,}")
        if not all(math.isfinite(value) for value in values):
            raise ValueError
        return values
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list (1,2,5) or range (start:stop:step): {text!r}") from None


MAX_VALUES = 10_000  # of a list or range: each value is a pass over the data


def size_list(text: str) -> list[int]:
    """`number_list` of training sizes: whole numbers from 1 to MOST."""
    values = number_list(text)
    wrong = [value for value in values if not (value.is_integer() and 1 <= value <= MOST)]
    if wrong:
        raise argparse.ArgumentTypeError(f"sizes are whole numbers from 1 to {MOST:,}, not {wrong[0]:g}")
    return [int(value) for value in values]


def similarity(text: str) -> float:
    """A similarity threshold: a finite number of at most 1, the largest similarity of every
    kernel (a higher one would select nothing)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value <= 1):
        raise argparse.ArgumentTypeError(f"a similarity is a finite number of at most 1 (every kernel's "
                                         f"largest), not {text!r}")
    return value


def folds(text: str) -> int | None:
    """A number of folds, 2 or more, or `loo` (None: leave-one-out)."""
    if text == "loo":
        return None
    return _fold_number(text, ", or 'loo'")


def fold_count(text: str) -> int:
    """A number of folds, 2 or more (report's k-fold comparison: its leave-one-out always runs)."""
    return _fold_number(text, "")


def _fold_number(text: str, other: str) -> int:
    value = integer_at_least(text, 2, MOST)
    if value is None:
        raise argparse.ArgumentTypeError(f"--folds takes a number of folds, 2 or more{other}, not {text!r}")
    return value


# Settings the command line spells its own way: the parser, and what the help adds.
ONE_PASS = ("it writes its output in one pass, readable only when complete, so a stopped run "
            "leaves nothing to continue from: rerun it (with --overwrite to replace a finished output)")


def refuse_resume(parser: argparse.ArgumentParser) -> None:
    """`--resume` on a command that cannot resume: refused with the reason, not 'unrecognized'."""

    class Refuse(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            parser.error(f"--resume: {parser.prog.split()[-1]} cannot resume: {ONE_PASS}")

    parser.add_argument("--resume", nargs=0, action=Refuse, help="not possible here (one pass): rerun instead")


def weight_list(text: str) -> tuple[float, ...]:
    """`0.25,0.25,0.25,0.25`: one weight per n-gram order (the table checks length and sum)."""
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of weights (e.g. 0.25,0.25,0.25,0.25): {text!r}") from None


def name_list(text: str) -> tuple[str, ...]:
    """`bleu,rouge,bertscore`: names, comma-separated (the scorer says which it does not know)."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"not a comma list of names: {text!r}")
    return names


SPELLINGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "kernels": (name_list, "comma-separated"),
    "memory_budget": (parse_size, "or a size such as 512M or 2G"),
    "weights": (weight_list, "comma-separated"),
}


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(_shown(part) for part in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def option_help(parameter: Parameter) -> str:
    """The table's help, the built-in names where the set is open, and the default."""
    text = parameter.help
    if parameter.name in BUILT_IN:
        text += f"; built-in: {', '.join(BUILT_IN[parameter.name])}"
    if parameter.name in SPELLINGS:
        text += f", {SPELLINGS[parameter.name][1]}"
    if parameter.type is bool:
        return text
    default = parameter.none_means if parameter.default is None else _shown(parameter.default)
    return f"{text} (default: {default})"


def add_parameter(group: Any, name: str) -> None:
    """The option of table entry `name`: `--min-neighbors A` for min_neighbors."""
    parameter = PARAMETERS[name]
    parse = SPELLINGS[name][0] if name in SPELLINGS else float if parameter.type is tuple else parameter.type
    if parameter.type is bool:
        group.add_argument(parameter.flag, action="store_true", default=parameter.default,
                           help=option_help(parameter))
        return
    group.add_argument(
        parameter.flag,
        type=parse,
        nargs=len(parameter.metavar) if isinstance(parameter.metavar, tuple) else None,
        default=parameter.default,
        choices=CHOICES.get(name),
        metavar=parameter.metavar,
        help=option_help(parameter),
    )


# Options of a scorer's run, not of its fit: they go with a saved scorer (--scorer) too.
RUN_OPTIONS = ("device", "allow_download", "fluency", "memory_budget")  # fluency: where a saved scorer's model is
# The fitting options that are not table entries, with their defaults.
OTHER_FITTING_OPTIONS = {"--model": ("model", None), "--layer": ("layer", None), "--idf": ("idf", False),
                         "--rescale": ("rescale", None), "--tune": ("tune", None)}


def fitting_options_given(args: argparse.Namespace) -> list[str]:
    """The flags given that set how a scorer is fitted (a saved scorer has its own)."""
    names = [name for name in (*MODEL_OPTIONS, *DATA_OPTIONS, *TUNING_OPTIONS) if name not in RUN_OPTIONS]
    given = [PARAMETERS[name].flag for name in names
             if hasattr(args, name) and getattr(args, name) != PARAMETERS[name].default]
    return given + [flag for flag, (name, default) in OTHER_FITTING_OPTIONS.items()
                    if getattr(args, name, default) != default]


def add_model_options(parser: argparse.ArgumentParser, one_kernel: bool = True) -> None:
    """Options that define the estimator; shared by every command that builds one (`compare`,
    which runs several kernels, takes its own --kernels and --tau)."""
    group = parser.add_argument_group("model")
    for name in MODEL_OPTIONS:
        if one_kernel or name not in ONE_KERNEL:
            add_parameter(group, name)
    group.add_argument("--paper-thresholds", dest="thresholds", action="store_const", const="paper",
                       help="the paper's settings (tau, a 5, b 0.66, plain mean), never tuned: "
                            "same as --thresholds paper")
    group.add_argument("--model", default=None, help="BERTScore: model name or local path")
    group.add_argument("--layer", type=layer, default=None, help="BERTScore: hidden layer to use")
    group.add_argument("--idf", action="store_true", help="BERTScore: idf weights from the training set")
    group.add_argument("--rescale", action=argparse.BooleanOptionalAction, default=None,
                       help="BERTScore: rescale F with a baseline (default on: the paper's tau is on that scale)")


def add_data_options(parser: argparse.ArgumentParser, data_format: bool = True) -> None:
    """The fields and format of the scored files; `data_format` false where --format names
    another file's (score's and systems' --candidates)."""
    if data_format:
        parser.add_argument("--format", dest="data_format", choices=SCORED_FORMATS, default=None,
                            help="format of the scored files (default: from each one's extension: .jsonl, .csv, "
                                 ".tsv, each maybe .gz)")
    parser.add_argument("--text-field", default="text", help="field holding the text (JSONL/CSV/TSV)")
    parser.add_argument("--score-field", default="score", help="field holding the known quality")
    parser.add_argument("--quoting", choices=QUOTINGS, default="none",
                        help="TSV quote rules: none (a quote is an ordinary character) or csv "
                             "(fields quoted as in CSV); CSV files always follow RFC 4180 (default: none)")
    parser.add_argument("--max-chars", type=positive_int, default=DEFAULT_MAX_CHARS, metavar="N",
                        help=f"refuse texts longer than N characters (default: {DEFAULT_MAX_CHARS:,})")
    for name in DATA_OPTIONS:
        add_parameter(parser, name)


def add_baseline_option(parser: argparse.ArgumentParser) -> None:
    """--no-baselines: leave out the supervised baseline rows (`commands._baselines`)."""
    parser.add_argument("--no-baselines", action="store_true",
                        help="leave out the TF-IDF + ridge row (and the embedding + ridge row of --model): "
                             "kernel ridge on all pairs, one n x n inverse per penalty (cubic in the texts: "
                             "seconds at 1,000, minutes from about 5,000)")


def add_tuning_options(parser: argparse.ArgumentParser, tune: bool = True) -> None:
    group = parser.add_argument_group("tuning")
    if tune:
        group.add_argument("--tune", action="store_const", const=True, default=None,
                           help="always choose tau, a and b (and p, k) on the training data (inner "
                                "leave-one-out over a grid); by default they are tuned when the training "
                                "data has 50 texts or more and no threshold is given (--thresholds)")
    for name in TUNING_OPTIONS:
        add_parameter(group, name)


def bertscore_options(args: argparse.Namespace) -> dict[str, Any]:
    """The BERTScore kernel's options given on the command line (unset ones keep its defaults)."""
    options = {"model": args.model, "layer": args.layer, "idf": args.idf, "rescale": args.rescale}
    return {key: value for key, value in options.items() if value is not None}


def scorer_from_args(args: argparse.Namespace, progress: bool = False) -> NeighborsScorer:
    """The scorer the options describe: every table setting the command line has, by name."""
    options: dict[str, Any] = {}
    settings = {name: getattr(args, name) for name in (*MODEL_OPTIONS, *DATA_OPTIONS) if hasattr(args, name)}
    name = kernel_name(settings)
    several = name in ("auto", "combined")
    if several:
        settings["kernels"] = tuple(settings.get("kernels") or SCORER_PARAMETERS["kernels"].default)
        if args.model and "bertscore" not in settings["kernels"]:
            settings["kernels"] = (*settings["kernels"], "bertscore")  # a model given: bertscore joins
    if name == "bertscore":
        options = bertscore_options(args)
    elif several and "bertscore" in settings["kernels"]:
        options = {"bertscore": bertscore_options(args)}
    elif args.model or args.layer is not None or args.idf or args.rescale:
        raise ValueError("--model, --layer, --idf and --rescale apply to the bertscore kernel only (--kernel "
                         "bertscore, or auto or combined, which --model makes it join)")
    if not several and settings.get("kernels") is None:  # a list given means nothing then: parts warns
        settings.pop("kernels", None)
    if settings["score_range"] is not None:
        settings["score_range"] = tuple(settings["score_range"])
    # the kernel named as found above: bertscore's options, keyed by name for auto, would read as a
    # BLEU* setting (the paper's kernel) if the name were worked out again from them
    return NeighborsScorer(**parts_from_settings({**settings, "kernel": name, "kernel_options": options,
                                                  "progress": progress}))
