"""`gpu-neighbors systems`: compare the systems that made the candidates (see
`evaluation.systems`), and, where the training data names each text's system, the same
comparison on the training set by leave-one-out estimates and by the human scores, with the
factor by which the estimate shrinks differences between systems.

The candidates stream through the reader and batch scorer of `score` (`predict_batches`);
only each candidate's system, estimate, input and line are kept (`SystemCollector`)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from gpu_neighbors.cli.commands import (default_encoders, default_threads, default_workers, fit_on_file,
                                        loaded_scorer, read_data, saved_inputs, saved_training)
from gpu_neighbors.cli.options import (
    add_data_options,
    add_model_options,
    add_tuning_options,
    draws,
    positive_int,
    seed,
    thread_count,
    workers,
)
from gpu_neighbors.data import InputError, ScoredData, count_records, iter_candidates
from gpu_neighbors.data.formats import FORMATS, detect_format
from gpu_neighbors.core.saved import TRAINING
from gpu_neighbors.data.output import SafeOutput
from gpu_neighbors.evaluation import tables
from gpu_neighbors.evaluation.significance import RESAMPLES, SEED, TRIALS
from gpu_neighbors.evaluation.systems import (
    Labelled,
    Scale,
    SystemCollector,
    SystemComparison,
    compare_systems,
    leave_one_out_scale,
)
from gpu_neighbors.scorer import NeighborsScorer
from gpu_neighbors.scoring.progress import ScoringProgress
from gpu_neighbors.scoring.streaming import DEFAULT_BATCH_SIZE, predict_batches


def add_systems_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "systems", help="compare systems: mean estimate per system with 95%% intervals, and per pair the "
                        "difference with paired bootstrap and approximate randomization p-values")
    training = parser.add_mutually_exclusive_group(required=True)
    training.add_argument("--train", default=None,
                          help="scored texts: JSONL, CSV or TSV; with the system field too, the comparison is "
                               "also made on them by leave-one-out estimates and by human scores")
    training.add_argument("--scorer", default=None, metavar="FOLDER",
                          help="a saved scorer (gpu-neighbors fit --save) in place of --train: nothing is refitted; "
                               "the training comparison needs the system field kept (fit --keep-fields)")
    parser.add_argument("--candidates", default=None,
                        help="texts to compare: JSONL, CSV, TSV or Parquet, each with its system field "
                             "(default: only the training set's comparison)")
    parser.add_argument("--format", choices=FORMATS, default=None, help="format of --candidates (default: from its extension)")
    parser.add_argument("--system-field", required=True, help="field naming the system that made each text")
    parser.add_argument("--pair-field", default=None,
                        help="field naming each text's input (prompt, source, meaning representation): "
                             "systems are then compared on shared inputs, with paired tests")
    parser.add_argument("--resamples", type=draws, default=RESAMPLES,
                        help=f"bootstrap resamples (default {RESAMPLES}, as sacrebleu)")
    parser.add_argument("--trials", type=draws, default=TRIALS,
                        help=f"approximate randomization trials (default {TRIALS}, as sacrebleu)")
    parser.add_argument("--seed", type=seed, default=SEED, help=f"seed of the draws (default {SEED}, as sacrebleu)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of markdown tables")
    parser.add_argument("--save", default=None, metavar="FILE", help="also write what is printed to FILE")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="a figure of each system's mean with its interval (needs matplotlib)")
    parser.add_argument("--overwrite", action="store_true", help="replace --save and --plot files that exist")
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help=f"candidates scored per step ({DEFAULT_BATCH_SIZE})")
    parser.add_argument("--threads", type=thread_count, default=None, metavar="N", help="CPU threads for torch (as score)")
    parser.add_argument("--workers", type=workers, default=None, metavar="N", help="batches encoded and scored at once (as score)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_data_options(parser, data_format=False)
    add_model_options(parser)
    add_tuning_options(parser)
    parser.set_defaults(handler=command_systems)


def command_systems(args: argparse.Namespace) -> int:
    if args.pair_field is not None and args.pair_field == args.system_field:
        raise ValueError("--pair-field must name another field than --system-field")
    if args.plot is not None and Path(args.plot).suffix.lower() != ".png":
        raise InputError("--plot writes a PNG image: give a name ending in .png", path=args.plot)
    if args.save is not None:
        _check_save_name(args.save, args.json)
    outputs = {flag: path for flag, path in (("--save", args.save), ("--plot", args.plot)) if path is not None}
    training = {"--train": args.train} if args.train is not None else saved_inputs(args.scorer)
    inputs = {**training, "--candidates": args.candidates}
    # The outputs are checked against the inputs, locked, and written as partial files renamed
    # into place at the end: a failed or killed run leaves the earlier files as they were.
    with SafeOutput(outputs, inputs=inputs, overwrite=args.overwrite) as files:
        for path in outputs.values():  # every output, not only the first (SafeOutput's rule)
            if Path(path).exists() and not args.overwrite:
                raise InputError("exists already; pass --overwrite to replace it", path=path)
        text, panels = _compare(args)
        print(text)
        if args.save is not None:
            files.create(args.save).write((text + "\n").encode("utf-8"))
        if args.plot is not None:
            from gpu_neighbors.evaluation.plots import plot_systems

            plot_systems(panels, files.create_path(args.plot))
    return 0


def _check_save_name(path: str, as_json: bool) -> None:
    """--save writes what is printed: markdown tables, or with --json one JSON object. A name of
    a data format that is not it (`s.csv` held markdown; read back, it was misread as CSV) is
    refused before the work."""
    named = detect_format(path)
    if named == "text" or (as_json and named == "jsonl"):
        return
    written, suffix = ("one JSON object", ".json") if as_json else ("markdown tables", ".md")
    raise InputError(f"--save writes {written}, but this is a {named} file's name: give a {suffix} name", path=path)


def _compare(args: argparse.Namespace) -> tuple[str, list[tuple[str, SystemComparison]]]:
    """The comparison as the text to print and save, and the panels of its figure."""
    threads = args.threads or default_threads(args.device)
    if threads:
        import torch

        torch.set_num_threads(threads)
    fields = tuple(name for name in (args.system_field, args.pair_field) if name is not None)
    if args.train is not None:
        path, train = args.train, read_data(args, args.train, keep_fields=fields)
        scorer = None
    else:
        scorer = loaded_scorer(args)
        path, train = os.path.join(args.scorer, TRAINING), saved_training(scorer)
    has_systems = _labelled_training(train, args, path)
    if has_systems is None and args.candidates is None:
        kept = "" if args.train is not None else " (save the scorer with fit --keep-fields to keep it)"
        raise InputError(f"no field '{args.system_field}' in the training data{kept} and no --candidates: "
                         "nothing to compare", path=path, field=args.system_field)
    if scorer is None:
        scorer = fit_on_file(_scorer(args), train, path, args.score_field, args.tune, args.min_coverage)
    draws = {"resamples": args.resamples, "trials": args.trials, "seed": args.seed}
    scale = None if has_systems is None else leave_one_out_scale(
        scorer.leave_one_out().scores, train.scores, has_systems, **draws)
    candidates = None if args.candidates is None else _compare_candidates(args, scorer, fields, draws)
    if args.json:
        text = tables.to_json({"signature": str(scorer.signature),
                               "candidates": None if candidates is None else candidates.as_dict(),
                               "training": None if scale is None else scale.as_dict()})
    else:
        text = render(args, str(scorer.signature), candidates, scale)
    panels = [] if candidates is None else [(f"candidates: estimates ({args.candidates})", candidates)]
    if scale is not None:
        panels += [("training set: leave-one-out estimates", scale.estimated),
                   ("training set: human scores", scale.human)]
    return text, panels


def _scorer(args: argparse.Namespace) -> NeighborsScorer:
    from gpu_neighbors.cli.options import scorer_from_args

    return scorer_from_args(args)


def _labelled_training(train: ScoredData, args: argparse.Namespace, path: str) -> Labelled | None:
    """The training texts' systems (and inputs, when every text has the pair field): None
    when no text has the system field; an error naming the line when only some have it."""
    having = [args.system_field in extra for extra in train.extra]
    if not any(having):
        return None
    if not all(having):
        line = train.lines[having.index(False)]
        raise InputError("missing, though other training texts have it", path=path, line=line,
                         field=args.system_field)
    pairs = [args.pair_field is not None and args.pair_field in extra for extra in train.extra]
    if any(pairs) and not all(pairs):  # not a silently unpaired comparison for one text's lack
        raise InputError("missing, though other training texts have it", path=path,
                         line=train.lines[pairs.index(False)], field=args.pair_field)
    paired = all(pairs) and args.pair_field is not None
    names = [_label(extra[args.system_field], path, line, args.system_field)
             for extra, line in zip(train.extra, train.lines)]
    inputs = [_label(extra[args.pair_field], path, line, args.pair_field)
              for extra, line in zip(train.extra, train.lines)] if paired else None
    collector = SystemCollector(paired=paired)
    collector.add(names, np.zeros(len(names)), train.lines, inputs)
    system_names, input_names, system, _, input_ids, lines = collector.labels()
    return Labelled(system_names, system, lines, input_names, input_ids, path=path,
                    system_field=args.system_field, pair_field=args.pair_field if paired else None)


def _label(value: Any, path: str, line: int, field: str) -> str:
    """A training record's label as the candidates' reader makes it (numbers by their JSON
    text)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return tables.to_json(value)
    raise InputError(f"{tables.to_json(value)} is not a non-empty string or a number", path=path, line=line,
                     field=field)


def _compare_candidates(args: argparse.Namespace, scorer: NeighborsScorer, fields: tuple[str, ...],
                        draws: dict[str, int]) -> SystemComparison:
    """Streams the candidates through the scorer, keeping per candidate only its system,
    estimate, input and line, then compares the systems."""
    stream = iter_candidates(args.candidates, text_field=args.text_field, file_format=args.format,
                             quoting=args.quoting, max_chars=args.max_chars, keep_fields=fields)
    collector = SystemCollector(paired=args.pair_field is not None)
    total = None if args.quiet else count_records(args.candidates, file_format=args.format, quoting=args.quoting)
    workers = args.workers or default_workers(args.device)
    with ScoringProgress(total, pairs_per_text=scorer.num_train, enabled=not args.quiet) as bar:
        for batch, prediction in predict_batches(scorer, stream.batches(args.batch_size), workers,
                                                 args.workers or default_encoders()):
            # the hook for per-text intervals: once Prediction carries low/high (conformal
            # intervals, issue 20), they are collected here (e.g. each system's mean width)
            collector.add(batch.labels[args.system_field], prediction.scores, batch.lines,
                          batch.labels.get(args.pair_field) if args.pair_field else None)
            bar.update(len(batch))
    names, input_names, system, estimates, inputs, lines = collector.labels()
    if not names:
        raise InputError("no candidates", path=args.candidates)
    labelled = Labelled(names, system, lines, input_names, inputs, path=args.candidates,
                        system_field=args.system_field, pair_field=args.pair_field)
    return compare_systems(estimates, labelled, resamples=draws["resamples"], trials=draws["trials"], seed=draws["seed"])


# -- markdown -----------------------------------------------------------------------------


def _interval(low: float, high: float) -> str:
    return f"{tables.cell(low)} to {tables.cell(high)}"


def _p(value: float) -> str:
    return tables.cell(value)


def _draws(comparison: SystemComparison) -> str:
    settings = comparison.settings
    how = (f"paired on field '{settings['pair_field']}' (inputs resampled; each pair on the inputs where both "
           "have an estimate)" if settings["paired"] else "unpaired (each system's texts resampled on their own; "
           "randomization is a permutation test)")
    return (f"{how}; {settings['resamples']} bootstrap resamples, {settings['trials']} randomization trials, "
            f"seed {settings['seed']}; texts without an estimate are left out of every mean; "
            f"significant: both p < {settings['alpha']}")


def system_table(comparison: SystemComparison) -> str:
    rows = [{"system": row.system, "texts": row.texts, "covered": row.covered, "coverage": row.coverage,
             "mean estimate": row.mean, "95% interval": _interval(row.low, row.high)} for row in comparison.systems]
    return tables.markdown_table(rows)


def pair_table(comparison: SystemComparison) -> str:
    rows = [{"pair": f"{row.first} - {row.second}", "difference": row.difference,
             "95% interval": _interval(row.low, row.high), "p (paired bootstrap)": _p(row.p_bootstrap),
             "p (randomization)": _p(row.p_randomization), "texts compared": row.compared,
             "significant": row.significant} for row in comparison.pairs]
    return tables.markdown_table(rows)


def scale_tables(scale: Scale) -> str:
    human = {row.system: row for row in scale.human.systems}
    systems = [{"system": row.system, "texts": row.texts, "covered": row.covered,
                "leave-one-out estimate": row.mean, "95% interval": _interval(row.low, row.high),
                "human score": human[row.system].mean,
                "human score 95% interval": _interval(human[row.system].low, human[row.system].high)}
               for row in scale.estimated.systems]
    pairs = [{"pair": f"{row['first']} - {row['second']}", "estimated difference": row["difference"],
              "p bootstrap": _p(row["p_bootstrap"]), "p randomization": _p(row["p_randomization"]),
              "human difference": row["human_difference"], "human p bootstrap": _p(row["human_p_bootstrap"]),
              "human p randomization": _p(row["human_p_randomization"]), "same verdict": row["same_verdict"]}
             for row in scale.pairs()]
    agreement = scale.agreement()
    return "\n\n".join([
        tables.markdown_table(systems), tables.markdown_table(pairs),
        f"Shrinkage factor (least-squares slope of the systems' mean estimates on their mean human scores): "
        f"**{tables.cell(scale.shrinkage)}** (95% interval {_interval(scale.shrinkage_low, scale.shrinkage_high)}): "
        f"a difference of d between mean estimates stands for a human difference of about d / "
        f"{tables.cell(scale.shrinkage)}{_unmeasured(scale)}. Same order of systems: "
        f"{tables.cell(agreement['same_order'])}; "
        f"same verdict on {agreement['same_verdict']} of {agreement['pairs']} pairs."])


def _unmeasured(scale: Scale) -> str:
    if scale.shrinkage_low <= 0 <= scale.shrinkage_high:
        return " (its interval holds 0: on these systems the estimate does not measure the difference)"
    return ""


def render(args: argparse.Namespace, signature: str, candidates: SystemComparison | None, scale: Scale | None) -> str:
    parts = [f"scorer: {signature}"]
    training = args.train if args.train is not None else f"of the saved scorer {args.scorer}"
    if candidates is not None:
        parts += [f"## Systems in {args.candidates}", _draws(candidates), system_table(candidates),
                  pair_table(candidates)]
    if scale is not None:
        parts += [f"## The training set {training} by leave-one-out: estimate against human score",
                  _draws(scale.estimated) + "; human means over the same texts (those with an estimate)",
                  scale_tables(scale)]
    else:
        parts.append(f"(no field '{args.system_field}' in the training set {training}: no leave-one-out comparison of scale)")
    return "\n\n".join(parts)
