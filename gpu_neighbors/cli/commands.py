"""The handlers of the `gpu-neighbors` commands: each reads its files, builds the scorer the
options describe (`options.scorer_from_args`) and prints or writes the results."""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gpu_neighbors.cli.options import bertscore_options, scorer_from_args
from gpu_neighbors.cli.rows import RowPrinter, interactive, progress_bar
from gpu_neighbors.core.caller_warnings import warn
from gpu_neighbors.core.host_memory import leave_allocator_alone
from gpu_neighbors.core.neighbours import Thresholds
from gpu_neighbors.core.pairwise import PairwiseSimilarities
from gpu_neighbors.core.saved import CONFIG, TENSORS, TRAINING, check_folder
from gpu_neighbors.core.tiling import resolve_device
from gpu_neighbors.core.tuning import MIN_TUNING_ITEMS
from gpu_neighbors.core.validation import DEFAULT_MIN_COVERAGE, PARAMETERS
from gpu_neighbors.data import InputError, ScoredData, read_scored
from gpu_neighbors.data.output import check_outputs, locked, refuse_other_format_name
from gpu_neighbors.data.paths import spelled_once
from gpu_neighbors.evaluation import tables
from gpu_neighbors.evaluation.agreement import agreement
from gpu_neighbors.evaluation.checklist import Checklist, held_out_checklist, held_out_split
from gpu_neighbors.evaluation.protocols import (
    PARAMETERS as SWEPT,
    SplitFluency,
    cross_task,
    cross_validate,
    fold_indices,
    learning_curve,
    sweep,
    warn_training_texts,
)
from gpu_neighbors.intervals import Intervals
from gpu_neighbors.kernels import KERNEL_NAMES
from gpu_neighbors.kernels.parts import Combined
from gpu_neighbors.scorer import NeighborsScorer, ScoreError
from gpu_neighbors.scoring.streaming import RESULT_COLUMNS, score_file


def read_data(args: argparse.Namespace, path: str, keep_fields: Sequence[str] = ()) -> ScoredData:
    """A scored file as the data options say (format, fields, TSV quoting, the cap on text length)."""
    return read_scored(path, text_field=args.text_field, score_field=args.score_field, keep_fields=keep_fields,
                       file_format=getattr(args, "data_format", None), quoting=args.quoting, max_chars=args.max_chars)


BASELINE_LEAST = 2  # training texts the TF-IDF + ridge baseline's nested ridge needs
BASELINE_USE = " for the TF-IDF + ridge baseline (--no-baselines leaves it out)"


def enough_to_train(path: str, count: int, folds: int | None, seed: int, least: int, use: str) -> None:
    """Refuse, before the work and naming the file and flag, scored data whose splits would
    train `use` on fewer than `least` texts (`folds` None: leave-one-out): it ended in an
    internal message (tuning, the baseline's ridge), or in rows with nothing measured."""
    s = "s" * (count != 1)
    if folds is None:
        if count - 1 < least:
            raise InputError(f"{count} scored text{s}: leave-one-out needs at least {least + 1}{use}", path=path)
        return
    if folds > count:
        raise InputError(f"--folds {folds}: more folds than its {count} scored text{s}", path=path)
    part = count - max(len(fold) for fold in fold_indices(count, folds, seed))
    if part < least:
        raise InputError(f"--folds {folds}: {count} scored text{s} in {folds} folds leave {part} to train on, "
                         f"too few{use}: it takes {least}", path=path)


def warn_alike(data: ScoredData, path: str) -> None:
    """Scores all alike leave nothing to rank: agreement with them is undefined (nan, or a dash)."""
    if len(data) > 1 and bool((data.scores == data.scores[0]).all()):
        warn(f"{path}: every score is {data.scores[0]:g}, so agreement with them (spearman, pearson) is "
             "undefined: evaluate on scores that differ")


def enough_to_tune(path: str, count: int, tune: bool | None) -> None:
    """--tune on a whole training set of fewer texts than tuning takes, refused naming the file."""
    if tune and count < MIN_TUNING_ITEMS:
        raise InputError(f"{count} scored text{'s' * (count != 1)}: --tune needs at least {MIN_TUNING_ITEMS}", path=path)


def fit_on_file(scorer: NeighborsScorer, data: ScoredData, path: str, score_field: str,
                tune: bool | None = None, min_coverage: float = DEFAULT_MIN_COVERAGE,
                announce: bool = False) -> NeighborsScorer:
    """`scorer.fit` on data read from `path`, naming the file line of a score it refuses; with
    `announce` (fit, score), what it chose on the training set (the kernel, or a combination's
    weights) in one line on stderr."""
    enough_to_tune(path, len(data), tune)
    try:
        scorer.fit(data.texts, data.scores, tune=tune, min_coverage=min_coverage)
    except ScoreError as error:
        flag = None if error.setting is None else PARAMETERS[error.setting].flag
        raise InputError(error.explain(flag), path=path, line=data.lines[error.index], field=score_field) from None
    if scorer.selection_ is not None and announce:
        print(choice_line(scorer), file=sys.stderr)
    return scorer


def choice_line(scorer: NeighborsScorer) -> str:
    """What `fit` chose on the training set (the kernel, or a combination's weights) and each
    candidate's leave-one-out rho there, in one line."""
    assert scorer.selection_ is not None
    sample = min(scorer.num_train, getattr(scorer.kernel, "sample", None) or scorer.num_train)
    rhos = ", ".join(f"{name} {rho:.3f}" for name, rho in scorer.selection_.items())
    chosen = scorer.kernel_part_
    what = f"kernel {chosen.name}" if not isinstance(chosen, Combined) else "weights " + ", ".join(
        f"{part.name} {weight:g}" for part, weight in zip(chosen.kernels, chosen.weights or ()))
    return f"{what}, chosen by leave-one-out rho on {sample:,} of the {scorer.num_train:,} training texts ({rhos})"


def command_score(args: argparse.Namespace) -> int:
    if args.skip_bad and args.rejects is None:  # `run` names one beside a file output
        raise ValueError("--skip-bad with --output - needs --rejects FILE: the records it sets aside "
                         "would be kept nowhere")
    if args.rejects is not None and not args.skip_bad:
        raise ValueError("--rejects names where --skip-bad puts the records it sets aside: give --skip-bad too")
    threads = args.threads or default_threads(args.device)
    if threads:
        from gpu_neighbors.core.threads import set_threads

        set_threads(threads)
    # The batches' tiles run in worker threads while the reader bounds the run: keeping freed
    # memory saved no time and raised the peak resident size (core.host_memory).
    leave_allocator_alone()
    if (args.train is None) == (args.scorer is None):
        raise ValueError("give --train FILE (the scorer is fitted here) or --scorer FOLDER (a saved one): one of them")
    training = {"--train": args.train} if args.train is not None else saved_inputs(args.scorer)
    check_outputs({"--output": args.output, "--rejects": args.rejects},
                  {**training, "--candidates": args.candidates},
                  overwrite=args.overwrite or args.resume,  # before the training set is read
                  resumable=not str(args.output).lower().endswith(".parquet"), standard_output=True)
    refuse_other_format_name(args.output, "--output", parquet=True)
    refuse_other_format_name(args.rejects, "--rejects")
    score_batches = None
    if args.ray or args.ray_address:  # the same run, scored by a Ray actor pool (distributed.py)
        from gpu_neighbors.scoring.distributed import RayBatchScorer

        score_batches = RayBatchScorer(address=args.ray_address)
    if args.explain and score_batches is not None:
        raise ValueError("--explain needs the one-process scorer: leave out --ray")
    if args.workers is not None and args.workers > 1 and score_batches is not None:
        raise ValueError("--workers is for the one-process scorer (Ray has its own actors): leave out --ray")
    workers = 1 if score_batches is not None else args.workers or default_workers(args.device)
    encoders = args.workers or default_encoders()
    if args.explain_text and not args.explain:
        raise ValueError("--explain-text goes with --explain K")
    kept = _kept_fields(args, (*RESULT_COLUMNS, args.text_field), "a column of the results already (or the text)")
    if args.train is not None:
        train = read_data(args, args.train)
        scorer = fit_on_file(scorer_from_args(args), train, args.train, args.score_field, args.tune, args.min_coverage,
                             announce=not args.quiet)
        header = {"train": spelled_once(args.train), "train_content_sha256": train.digest()}
    else:  # the run records which scorer it used: --resume refuses another
        scorer = loaded_scorer(args)
        header = {"scorer": spelled_once(args.scorer), "scorer_sha256": file_digest(saved_file(args.scorer))}
    summary = score_file(
        scorer, args.candidates, args.output, text_field=args.text_field, resume=args.resume,
        skip_bad=args.skip_bad, rejects=args.rejects, batch_size=args.batch_size,
        progress=not args.quiet, header=header, score_batches=score_batches, explain=args.explain,
        train_texts=scorer.kernel_.train_texts if args.explain_text else None, overwrite=args.overwrite,
        file_format=args.format, quoting=args.quoting, max_chars=args.max_chars, workers=workers,
        inputs=training, encoders=encoders, keep_fields=kept,
    )
    if not args.quiet:
        resumed = f" ({summary.rows - summary.scored} from before)" if args.resume else ""
        print(f"scored {summary.rows} candidates{resumed} -> {args.output} in {summary.seconds:.2f} s, "
              f"{summary.texts_per_second:,.0f} texts/s, {summary.pairs_per_second:,.0f} pairs/s "
              f"({scorer.signature})", file=sys.stderr)
        if summary.rejected:
            print(f"skipped {summary.rejected} bad records -> {args.rejects}", file=sys.stderr)
        print(f"{summary.outside} of the {summary.scored} candidates scored lie outside the training distribution "
              f"(\"outside\": true; estimate {_negative_rule(scorer)}, interval the whole score range)",
              file=sys.stderr)
    return 0


def saved_file(folder: str) -> str:
    """The file whose digest names a saved scorer: its scorer.json records every other file's."""
    return os.path.join(folder, CONFIG)


def saved_inputs(folder: str) -> dict[str, str]:
    """Every file of a saved scorer, as inputs no output may be: a scorer is read from all three
    (a folder that is not there is refused first, by that name: `saved_folder`)."""
    saved_folder(folder)
    return {"--scorer": saved_file(folder), **{f"--scorer's {name}": os.path.join(folder, name)
                                                for name in (TENSORS, TRAINING)}}


def loaded_scorer(args: argparse.Namespace) -> NeighborsScorer:
    """The saved scorer of --scorer, with the run's options (`options.RUN_OPTIONS`)."""
    return NeighborsScorer.load(args.scorer, device=args.device, allow_download=args.allow_download,
                                fluency=args.fluency, memory_budget=args.memory_budget)


def saved_folder(folder: str) -> None:
    """Refuse a --scorer that is no folder at all (a typo) as such, before the question of
    whether a folder holds a saved scorer (`core.saved.read`)."""
    if not os.path.exists(folder):
        raise InputError("no such folder (--scorer takes the folder fit --save wrote)", path=folder)
    if not os.path.isdir(folder):
        raise InputError("is a file, not a folder (--scorer takes the folder fit --save wrote)", path=folder)


def file_digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _kept_fields(args: argparse.Namespace, taken: Sequence[str], why: str) -> list[str]:
    """--keep-fields' names, none of `taken` (`why` they are)."""
    names = [] if args.keep_fields is None else [name.strip() for name in args.keep_fields.split(",") if name.strip()]
    clashes = sorted(set(taken) & set(names))
    if clashes:
        raise ValueError(f"--keep-fields: {', '.join(clashes)} is {why}")
    return list(dict.fromkeys(names))


def saved_training(scorer: NeighborsScorer) -> ScoredData:
    """A saved scorer's training set as if read from its training.jsonl, with the fields kept
    beside it (`fit --keep-fields`; a null is a missing field)."""
    fields = scorer.training_fields_
    extra = [{name: values[index] for name, values in fields.items() if values[index] is not None}
             for index in range(scorer.num_train)]
    return ScoredData(list(scorer.kernel_.train_texts), scorer.train_scores_.copy(),
                      list(range(1, scorer.num_train + 1)), extra)


def command_fit(args: argparse.Namespace) -> int:
    """Fit once and save: the signature, and the leave-one-out agreement the settings were
    tuned on (or, untuned, the scorer's leave-one-out rho on its training set)."""
    kept = _kept_fields(args, (args.text_field, args.score_field), "kept already (the text and its score)")
    with locked(args.save):  # the lock every writing command takes: a second run on the folder fails at once
        check_folder(args.save, args.overwrite, replace="pass --overwrite")  # before the fit, not after it
        data = read_data(args, args.train, keep_fields=kept)
        for name in kept:
            if not any(name in extra for extra in data.extra):
                raise InputError("no record has it (--keep-fields)", path=args.train, field=name)
        scorer = fit_on_file(scorer_from_args(args), data, args.train, args.score_field, args.tune,
                             args.min_coverage, announce=True)
        fields = {name: [extra.get(name) for extra in data.extra] for name in kept}
        folder = scorer.save(args.save, overwrite=args.overwrite, fields=fields)
    if scorer.tuning_ is not None:
        figures = f"tuned by leave-one-out: rho {scorer.tuning_.spearman:.3f}, coverage {scorer.tuning_.coverage:.2f}"
    else:
        figures = f"leave-one-out rho {scorer.inner_spearman():.3f} (not tuned)"
    print(f"saved -> {folder} ({len(data.texts)} training texts; {figures})\n{scorer.signature}")
    return 0


def command_fetch_model(args: argparse.Namespace) -> int:
    """Fetch the offline fluency model (once; its SHA-256 checked), de-quantise it once, and say
    where it is."""
    from gpu_neighbors.fluency import fetch_model, model_files
    from gpu_neighbors.fluency.model import prepare

    path = fetch_model(quiet=args.quiet)
    prepare(model_files(path))
    print(f"fluency model: {path}")
    return 0


def _negative_rule(scorer: Any) -> str:
    """How a fitted scorer estimates texts it flags outside, in words."""
    negative = scorer.outside_.negative_score
    return "their neighbours'" if negative is None else f"{negative:.3g}, the {scorer.intervals_part.negatives} rule"


def default_threads(device: str) -> int | None:
    """torch threads when --threads is not given: one on the CPU, where torch's default (one
    per core) spins waiting OpenMP threads that, on a machine busy with other work, made
    `predict` 2-10x slower than one thread (bench/bench_threads.py); torch's own on a GPU."""
    return 1 if resolve_device(device).type == "cpu" else None


MAX_DEFAULT_WORKERS = 2  # measured on 2 cores; more workers hold more tiles: raise with --workers


def default_workers(device: str) -> int:
    """Batches scored at once when --workers is not given: on the CPU one per core it may run on (at most
    MAX_DEFAULT_WORKERS), each on one torch thread, so both cores of a 2-core machine score
    (1.4x at 2,000 training texts, faster under load too; bench/results.md); one on a GPU,
    which a second Python thread would not make faster."""
    if resolve_device(device).type != "cpu":
        return 1
    return min(MAX_DEFAULT_WORKERS, usable_cores())


def default_encoders() -> int:
    """Threads that encode candidates ahead of the scoring when --workers is not given: one per
    core this process may run on (the encodings are numpy work and compiled loops that release
    the GIL)."""
    return usable_cores()


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container or taskset sets it; the
    machine's count where the platform has none): what the default thread counts divide."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def command_evaluate(args: argparse.Namespace) -> int:
    if not args.checklist and (args.heldout is not None or args.seed is not None):
        raise ValueError(f"{'--heldout' if args.heldout is not None else '--seed'} goes with --checklist")
    if args.scorer is not None:
        return _evaluate_saved(args)
    scorer = checked_scorer(args)
    data = read_data(args, args.data)
    warn_alike(data, args.data)
    enough_to_train(args.data, len(data), None, 0, MIN_TUNING_ITEMS if args.tune else 1,
                    " for --tune" if args.tune else "")
    scorer = fit_on_file(scorer, data, args.data, args.score_field, tune=False)
    tuned = args.tune or scorer.tunes(len(data.texts) - 1)
    if tuned:  # nested: each left-out text's thresholds are tuned on the other texts only
        with progress_bar(len(data.texts), "text", "leave-one-out, tuned per text") as bar:
            nested = cross_validate(scorer.training_pass(), scorer.thresholds_, folds=None, tune_thresholds=True,
                                    min_coverage=args.min_coverage, grid=scorer.tuning_grid(), progress=bar.update)
        result, chosen, chosen_json = nested.agreement, nested.chosen_thresholds(), nested.as_dict()["thresholds"]
    else:
        result, chosen, chosen_json = agreement(scorer.leave_one_out(), data.scores), [], None
    row = {"kernel": scorer.kernel_name, **result.as_dict()}
    checklist = _checklist(args, data) if args.checklist else None
    if args.json:
        extras = {"tuned_thresholds": chosen_json} if chosen_json is not None else {}
        if checklist is not None:
            extras["checklist"] = checklist.as_dict()
        print(tables.to_json({**row, **extras}))
    else:
        note = f", settings tuned per text (min coverage {args.min_coverage})" if tuned else ""
        print(f"leave-one-out on {args.data} ({scorer.signature}{note})")
        _print_row(row, 14)
        for thresholds, count in chosen:
            print(f"  chosen in {count} fold{'s' * (count != 1)}: {thresholds.summary()}")
        if checklist is not None:
            held = args.heldout or f"a fifth of {args.data} (seed {args.seed or 0})"
            print(f"\nperturbation checklist on {held}\n\n{checklist.table()}")
    return 0


def _evaluate_saved(args: argparse.Namespace) -> int:
    """evaluate --scorer: a saved scorer's estimates of --data's texts against their scores."""
    if args.heldout is not None:
        raise ValueError("--heldout is for a scorer fitted here: with --scorer, --data holds the held-out texts")
    saved_folder(args.scorer)
    scorer = loaded_scorer(args)
    data = read_data(args, args.data)
    warn_alike(data, args.data)
    warn_training_texts(scorer.kernel_.train_texts, data.texts, "held-out texts",
                        "to measure a training set use evaluate --data (leave-one-out)")
    prediction = scorer.predict(data.texts)
    assert prediction.low is not None and prediction.high is not None and prediction.outside is not None
    covered = prediction.covered
    inside = (prediction.low[covered] <= data.scores[covered]) & (data.scores[covered] <= prediction.high[covered])
    row = {"kernel": scorer.kernel_name, **agreement(prediction, data.scores).as_dict(),
           "interval_coverage": float(inside.mean()) if covered.any() else float("nan"),
           "outside": float(prediction.outside.mean())}
    checklist = None if not args.checklist else held_out_checklist(
        scorer, scorer.kernel_.train_texts, data.texts, data.scores, seed=args.seed or 0)
    if args.json:
        print(tables.to_json({**row, **({} if checklist is None else {"checklist": checklist.as_dict()})}))
        return 0
    print(f"held out: {args.data} scored by the saved scorer {args.scorer} ({scorer.signature})")
    _print_row(row, 17)
    if checklist is not None:
        print(f"\nperturbation checklist on {args.data}\n\n{checklist.table()}")
    return 0


def _print_row(row: dict[str, Any], width: int) -> None:
    """evaluate's figures a line each, as its tables write them (an undefined one as a dash, not nan)."""
    for key, value in row.items():
        print(f"  {key:<{width}} {tables.cell(value)}")


def _checklist(args: argparse.Namespace, data: ScoredData) -> Checklist:
    """evaluate's checklist: fitted on a seeded 4/5 of the data and held out the rest, or fitted
    on all of it and held out the --heldout file's texts."""
    if args.heldout is None:
        train_part, held_part = held_out_split(len(data), args.seed or 0)
        train, held = _subset(data, train_part), _subset(data, held_part)
    else:
        train, held = data, read_data(args, args.heldout)
        warn_training_texts(train.texts, held.texts, "held-out texts", f"hold out texts that {args.data} does not hold")
    scorer = fit_on_file(scorer_from_args(args), train, args.data, args.score_field, args.tune, args.min_coverage)
    return held_out_checklist(scorer, train.texts, held.texts, held.scores, seed=args.seed or 0)


def _subset(data: ScoredData, indices: Any) -> ScoredData:
    return ScoredData([data.texts[i] for i in indices], data.scores[indices], [data.lines[i] for i in indices],
                      [data.extra[i] for i in indices] if data.extra else [])


# -- evaluation studio: protocols on one similarity pass (protocols.py), the report (report.py) --


def _studio_pass(args: argparse.Namespace, check: Callable[[int], None] | None = None,
                 ) -> tuple[PairwiseSimilarities, Thresholds, str, SplitFluency | None]:
    similarities, scorer, _ = _studio_scorer(args, check)
    return similarities, scorer.thresholds_, str(scorer.signature), SplitFluency.of(scorer)


def _studio_scorer(args: argparse.Namespace, check: Callable[[int], None] | None = None,
                   ) -> tuple[PairwiseSimilarities, NeighborsScorer, ScoredData]:
    """The one pass of the data and its scorer, fitted untuned (protocols tune inside splits);
    the scorer's models are checked first (`checked_scorer`), and `check` then refuses
    settings the number of texts rules out (naming their flag)."""
    scorer = checked_scorer(args)
    data = read_data(args, args.data)
    if check is not None:
        check(len(data.texts))
    enough_to_train(args.data, len(data), None, 0, 1, "")
    warn_alike(data, args.data)
    scorer = fit_on_file(scorer, data, args.data, args.score_field, tune=False)
    return scorer.splits_pass(), scorer, data


def _emit(args: argparse.Namespace, title: str, rows: list[dict[str, Any]], **details: Any) -> None:
    if args.json:
        print(tables.to_json({"title": title, **details, "rows": rows}))
        return
    _emit_heading(title, details)
    print(tables.markdown_table(rows))


def _emit_heading(title: str, details: dict[str, Any]) -> None:
    """A table's title and its details (signature, settings), as `_emit` prints them."""
    print(f"{title}\n")
    for key, value in details.items():
        print(f"- {key}: {tables.cell(value) if not isinstance(value, (dict, list)) else tables.to_json(value)}")
    print()


def command_crossval(args: argparse.Namespace) -> int:
    def check(count: int) -> None:
        enough_to_train(args.data, count, args.folds, args.seed, 1, "")
        if args.tune:
            enough_to_train(args.data, count, args.folds, args.seed, MIN_TUNING_ITEMS, " for --tune")
        if not args.no_baselines:
            enough_to_train(args.data, count, args.folds, args.seed, BASELINE_LEAST,
                            BASELINE_USE)

    similarities, scorer, data = _studio_scorer(args, check)
    thresholds, signature, fluency = scorer.thresholds_, str(scorer.signature), SplitFluency.of(scorer)
    folds = len(similarities) if args.folds is None else args.folds
    tuned = args.tune or scorer.tunes(len(similarities) - len(similarities) // folds)
    with progress_bar(folds, "fold", "folds" + ", tuned in each" * tuned) as bar:
        result = cross_validate(similarities, thresholds, folds=args.folds, seed=args.seed, tune_thresholds=tuned,
                                min_coverage=args.min_coverage, grid=scorer.tuning_grid(), progress=bar.update,
                                fluency=fluency)
    summary = {"model": "neighbours" if fluency is None else "neighbours + fluency", **result.as_dict()}
    chosen = summary.pop("thresholds")
    name = "leave-one-out" if args.folds is None else f"{args.folds}-fold cross-validation (seed {args.seed})"
    title, details = f"{name} on {args.data}", {"signature": signature, "thresholds_used": chosen}
    if not args.json:
        _emit_heading(title, details)
    with RowPrinter(args.json, document=lambda rows: {"title": title, **details, "rows": rows}) as table:
        table.add(summary)
        for row in _baselines(args, data.texts, similarities.scores,
                              fold_indices(len(similarities), args.folds, args.seed)):
            table.add(row)
    return 0


def _baselines(args: argparse.Namespace, texts: Sequence[str], scores: Any, folds: list[Any],
               ) -> Iterator[dict[str, Any]]:
    """Rows of the supervised baselines on the same folds (`evaluation.baselines`), each as it
    is made: TF-IDF + ridge, and embedding + ridge when a BERTScore --model is given; none
    with --no-baselines."""
    from gpu_neighbors.evaluation import baselines

    if args.no_baselines:
        return
    for row in baselines.baseline_rows(texts, scores, folds, model=args.model, layer=args.layer,
                                       device="cpu" if args.device == "auto" else args.device):
        yield {"model": row.name, **row.agreement.as_dict()}


def checked_scorer(args: argparse.Namespace) -> NeighborsScorer:
    """The scorer the options describe, its kernel's models and tokenizers checked before any
    work: a model that is not here is refused now, not after the minutes of the kernels before
    it. (--model makes bertscore one of them, so the embedding + ridge row's model is checked.)"""
    scorer = scorer_from_args(args, progress=interactive())
    scorer.kernel.check_available()
    return scorer


def check_baseline_model(args: argparse.Namespace) -> None:
    """The embedding + ridge row's --model where that row will be made (`_baselines`) and no
    kernel checks it: compare's, whose --kernels need not hold bertscore."""
    if args.model is not None and not args.no_baselines:
        from gpu_neighbors.kernels.bertscore import check_model

        check_model(args.model, args.allow_download)


def command_cross_task(args: argparse.Namespace) -> int:
    train = read_data(args, args.train)
    test = read_data(args, args.test)
    warn_alike(test, args.test)
    enough_to_tune(args.train, len(train), args.tune)
    result = cross_task(scorer_from_args(args), train.texts, train.scores, test.texts, test.scores,
                        tune_thresholds=args.tune, min_coverage=args.min_coverage)
    row = result.as_dict()
    tuning = row.pop("tuning")
    _emit(args, f"trained on {args.train}, tested on {args.test}", [row], tuning=tuning)
    return 0


def command_curve(args: argparse.Namespace) -> int:
    def check(count: int) -> None:
        for size in args.sizes or ():
            if not 2 <= size <= count:
                raise InputError(f"--sizes {size:g}: a subset holds from 2 texts to all its {count} scored texts",
                                 path=args.data)

    similarities, thresholds, signature, fluency = _studio_pass(args, check)
    sizes = None if args.sizes is None else [int(size) for size in args.sizes]
    points = learning_curve(similarities, thresholds, sizes=sizes, runs=args.runs, seed=args.seed, fluency=fluency)
    _emit(args, f"training-size curve on {args.data} ({args.runs} subsets per size, seed {args.seed})",
          [point.as_dict() for point in points], signature=signature)
    return 0


def command_sweep(args: argparse.Namespace) -> int:
    if args.estimator != "threshold":
        raise ValueError(f"sweep varies the threshold rule's tau, a and b, which --estimator {args.estimator} "
                         "never reads: sweep with --estimator threshold (the default here)")
    parameters = SWEPT if args.parameter == "all" else (args.parameter,)
    if args.values is not None and len(parameters) > 1:  # before the pass, not after it
        raise ValueError("--values needs one --parameter (tau, a or b)")
    similarities, thresholds, signature, fluency = _studio_pass(args)
    try:
        rows = [point.as_dict() for parameter in parameters
                for point in sweep(similarities, thresholds, parameter, args.values, fluency=fluency)]
    except ValueError as error:  # a value the swept parameter cannot take: name the flag
        raise ValueError(f"--values: {error}") from None
    _emit(args, f"leave-one-out sweep on {args.data}", rows, signature=signature)
    return 0


def command_report(args: argparse.Namespace) -> int:
    from gpu_neighbors.evaluation.report import KernelSpec, build_report, report_outputs, write_report

    inputs = {"--data": args.data}
    check_outputs(report_outputs(args.out, args.page), inputs, overwrite=args.overwrite)  # before the work
    specs = [KernelSpec.parse(text) for text in args.kernel_specs.split(",") if text.strip()]
    check_kernel_list([spec.kernel for spec in specs], [spec.label for spec in specs])

    def make_scorer(spec: KernelSpec) -> NeighborsScorer:
        options = {**vars(args), "kernel": spec.kernel, "tau": None, **spec.options}
        if spec.kernel != "bleu":
            options["smoothing"] = None
        if spec.kernel != "bertscore":
            options.update(model=None, layer=None, idf=False, rescale=False)
        return scorer_from_args(argparse.Namespace(**options), progress=interactive())

    for spec in specs:  # every model and tokenizer here, before the minutes of the kernels before it
        make_scorer(spec).kernel.check_available()
    data = read_data(args, args.data, keep_fields=("judgments", "source"))
    warn_alike(data, args.data)
    for folds in (None, args.folds):  # the report tunes by leave-one-out and in its k folds
        enough_to_train(args.data, len(data), folds, args.seed, MIN_TUNING_ITEMS, " for the report's tuning")
    steps = 2 * len(specs) + 4 + (args.paper is not None) + args.checklist
    with progress_bar(steps, "step", "report") as bar:
        def step(name: str) -> None:
            bar.set_postfix_str(name, refresh=False)
            bar.update(1)

        report = build_report(data, specs, make_scorer=make_scorer, name=str(args.data), folds=args.folds,
                              runs=args.runs, seed=args.seed, min_coverage=args.min_coverage,
                              resamples=args.resamples, paper=args.paper, checklist=args.checklist,
                              command=shlex.join(["gpu-neighbors", *args.argv]), progress=step,
                              sizes=None if args.sizes is None else [int(size) for size in args.sizes])
    page = write_report(report, args.out, page=args.page, paper=args.paper, inputs=inputs, overwrite=args.overwrite)
    print(f"report -> {page}", file=sys.stderr)
    return 0


def check_kernel_list(kernels: Sequence[str], labels: Sequence[str]) -> None:
    """compare's and report's --kernels, refused before the work: an unknown kernel (a typo, not
    a report section saying it failed), none at all, or an entry (a kernel with its settings,
    `labels`) named twice, which ran twice and printed every row twice."""
    unknown = [kernel for kernel in kernels if kernel not in KERNEL_NAMES]
    if unknown or not kernels:
        what = f"unknown kernel {unknown[0]!r}" if unknown else "no kernel named"
        raise ValueError(f"--kernels: {what}; choose one of {', '.join(KERNEL_NAMES)}")
    repeated = next((label for index, label in enumerate(labels) if label in labels[:index]), None)
    if repeated is not None:
        raise ValueError(f"--kernels: {repeated} is named twice; name each kernel once")


def _kernel_taus(pairs: Sequence[str]) -> dict[str, float]:
    """compare's --tau KERNEL=VALUE pairs, each kernel once and each value finite (a second
    one silently won; nan failed after the data was read, naming no flag)."""
    taus: dict[str, float] = {}
    for pair in pairs:
        kernel, _, value = pair.partition("=")
        kernel = kernel.strip()
        try:
            tau = float(value)
        except ValueError:
            tau = math.nan
        if not math.isfinite(tau):
            raise ValueError(f"--tau takes KERNEL=VALUE with a finite VALUE, e.g. rouge=0.06, not {pair!r}")
        if kernel in taus:
            raise ValueError(f"--tau: {kernel} is given twice ({taus[kernel]:g} and {tau:g}); give each kernel's "
                             "tau once")
        taus[kernel] = tau
    return taus


def command_compare(args: argparse.Namespace) -> int:
    from gpu_neighbors.evaluation.compare import COLUMNS, comparison_rows, kernel_parts

    kernels = [name.strip() for name in args.kernel_list.split(",") if name.strip()]
    check_kernel_list(kernels, kernels)
    taus = _kernel_taus(args.kernel_taus)
    unread = [flag for flag, value, read in (
        ("--estimator", args.estimator, "threshold"), ("--weighting", args.weighting, "uniform"),
        ("--power", args.power, None), ("--top-k", args.top_k, None), ("--penalty", args.penalty, None),
        ("--thresholds", args.thresholds, "paper")) if value not in (None, read, "auto")]
    if unread:
        warn(f"{', '.join(unread)} changes no row: compare runs the paper's threshold rule, plain mean, never "
             "tuned (--tau KERNEL=VALUE, --min-neighbors and --max-fraction set it)")
    kernel_options = {"bertscore": bertscore_options(args)}
    bleu = {key: value for key, value in (("smoothing", args.smoothing), ("weights", args.weights)) if value}
    if bleu:
        kernel_options["bleu"] = bleu
    # every model and tokenizer checked before the data is read and any kernel runs
    parts = kernel_parts(kernels, kernel_options=kernel_options, tokenizer=args.tokenizer, lowercase=args.lowercase)
    check_baseline_model(args)
    data = read_data(args, args.data, keep_fields=(args.judgments_field,))
    warn_alike(data, args.data)
    enough_to_train(args.data, len(data), None, 0, 1 if args.no_baselines else BASELINE_LEAST,
                    "" if args.no_baselines else BASELINE_USE)
    judgments = None
    if data.extra and all(args.judgments_field in extra for extra in data.extra):
        judgments = [{"score": score, "judgments": extra[args.judgments_field]}
                     for score, extra in zip(data.scores, data.extra)]
    if not args.json:
        a = 5 if args.min_neighbors is None else args.min_neighbors
        b = 0.66 if args.max_fraction is None else args.max_fraction
        print(f"leave-one-out on {args.data} (the paper's protocol and settings: a={a}, b={b}, "
              "each kernel's tau; baselines on the same folds)\n", flush=True)
    level = Intervals(args.level, outside_level=args.outside_level, negatives=args.negatives, words=args.words)
    rows = comparison_rows(
        data.texts, data.scores, parts, taus=taus, judgments=judgments,
        min_neighbors=args.min_neighbors, max_fraction=args.max_fraction, device=args.device,
        memory_budget=args.memory_budget, score_range=tuple(args.score_range), level=level, progress=interactive(),
        fluency=args.fluency,
    )
    with RowPrinter(args.json, COLUMNS) as table, progress_bar(len(parts), "kernel", "kernels") as bar:
        for row in rows:
            table.add(row.as_dict())
            bar.update(int(row.name in kernels))
        for baseline in _baselines(args, data.texts, data.scores, fold_indices(len(data.texts), None)):
            table.add(baseline)
    return 0
