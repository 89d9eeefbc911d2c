"""The `gpu-neighbors` command line: score files, evaluate on scored data."""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from gpu_neighbors._version import __version__
from gpu_neighbors.kernels import KERNEL_NAMES
from gpu_neighbors.evaluation import tables
from gpu_neighbors.evaluation.agreement import agreement
from gpu_neighbors.evaluation.protocols import PARAMETERS, cross_task, cross_validate, learning_curve, sweep
from gpu_neighbors.data import InputError, ScoredData, read_scored
from gpu_neighbors.kernels.bleu import SMOOTHINGS
from gpu_neighbors.core.pairwise import PairwiseSimilarities, Thresholds
from gpu_neighbors.scorer import NeighborsScorer, ScoreError
from gpu_neighbors.scoring.streaming import DEFAULT_BATCH_SIZE, score_file


def add_model_options(parser: argparse.ArgumentParser, one_kernel: bool = True) -> None:
    """Options that define the estimator; shared by every command that builds one (`compare`,
    which runs several kernels, takes its own --kernels and --tau)."""
    group = parser.add_argument_group("model")
    if one_kernel:
        group.add_argument("--kernel", default="bleu", choices=KERNEL_NAMES)
        group.add_argument("--tau", type=float, default=None, help="similarity threshold (default: the kernel's)")
    group.add_argument("--min-neighbors", type=int, default=5, metavar="A", help="a: fewest neighbours for an estimate (5)")
    group.add_argument("--max-fraction", type=float, default=0.66, metavar="B", help="b: most neighbours, as a share of the training set (0.66)")
    group.add_argument("--smoothing", choices=SMOOTHINGS, default=None, help="BLEU* smoothing (default add1)")
    group.add_argument("--tokenizer", default="whitespace", help="whitespace, 13a, or a Hugging Face tokenizer name/path")
    group.add_argument("--lowercase", action="store_true", help="fold case before tokenizing")
    group.add_argument("--model", default=None, help="BERTScore: model name or local path")
    group.add_argument("--layer", type=int, default=None, help="BERTScore: hidden layer to use")
    group.add_argument("--idf", action="store_true", help="BERTScore: idf weights from the training set")
    group.add_argument("--rescale", action=argparse.BooleanOptionalAction, default=None,
                       help="BERTScore: rescale F with a baseline (default on: the paper's tau is on that scale)")
    group.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    group.add_argument("--memory-budget", type=_bytes, default=None, metavar="SIZE", help="tile working memory, e.g. 512M or 2G (default: from the device)")


def add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--text-field", default="text", help="field holding the text (JSONL/CSV/TSV)")
    parser.add_argument("--score-field", default="score", help="field holding the known quality")
    parser.add_argument("--score-range", type=float, nargs=2, default=(0.0, 1.0), metavar=("LOW", "HIGH"),
                        help="range every known score must lie in (default 0 1, as in the paper)")


def fit_on_file(scorer: NeighborsScorer, data: ScoredData, path: str, score_field: str,
                tune: bool = False, min_coverage: float = 0.8) -> NeighborsScorer:
    """`scorer.fit` on data read from `path`, naming the file line of a score it refuses."""
    try:
        return scorer.fit(data.texts, data.scores, tune=tune, min_coverage=min_coverage)
    except ScoreError as error:
        raise InputError(error.reason, path=path, line=data.lines[error.index], field=score_field) from None


def bertscore_options(args: argparse.Namespace) -> dict[str, Any]:
    """The BERTScore kernel's options given on the command line (unset ones keep its defaults)."""
    options = {"model": args.model, "layer": args.layer, "idf": args.idf, "rescale": args.rescale}
    return {key: value for key, value in options.items() if value is not None}


def scorer_from_args(args: argparse.Namespace, progress: bool = False) -> NeighborsScorer:
    options: dict[str, Any] = {}
    if args.kernel == "bertscore":
        options = bertscore_options(args)
    elif args.model or args.layer is not None or args.idf or args.rescale:
        raise ValueError("--model, --layer, --idf and --rescale apply to --kernel bertscore only")
    return NeighborsScorer(
        kernel=args.kernel,
        tau=args.tau,
        min_neighbors=args.min_neighbors,
        max_fraction=args.max_fraction,
        device=args.device,
        smoothing=args.smoothing,
        tokenizer=args.tokenizer,
        lowercase=args.lowercase,
        kernel_options=options,
        memory_budget=args.memory_budget,
        progress=progress,
        score_range=tuple(args.score_range),
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if text[-1:].upper() in units:
            return int(float(text[:-1]) * units[text[-1].upper()])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)") from None


def command_score(args: argparse.Namespace) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    train = read_scored(args.train, text_field=args.text_field, score_field=args.score_field)
    score_batches = None
    if args.ray or args.ray_address:  # the same run, scored by a Ray actor pool (distributed.py)
        from gpu_neighbors.scoring.distributed import RayBatchScorer

        score_batches = RayBatchScorer(address=args.ray_address)
    scorer = fit_on_file(scorer_from_args(args), train, args.train, args.score_field, args.tune, args.min_coverage)
    summary = score_file(
        scorer, args.candidates, args.output, text_field=args.text_field, resume=args.resume,
        skip_bad=args.skip_bad, rejects=args.rejects, batch_size=args.batch_size,
        progress=not args.quiet, header={"train": str(args.train)}, score_batches=score_batches,
    )
    if not args.quiet:
        resumed = f" ({summary.rows - summary.scored} from before)" if args.resume else ""
        print(f"scored {summary.rows} candidates{resumed} -> {args.output} in {summary.seconds:.2f} s, "
              f"{summary.texts_per_second:,.0f} texts/s, {summary.pairs_per_second:,.0f} pairs/s "
              f"({scorer.signature})", file=sys.stderr)
        if summary.rejected:
            print(f"skipped {summary.rejected} bad records -> {args.rejects}", file=sys.stderr)
    return 0


def command_evaluate(args: argparse.Namespace) -> int:
    data = read_scored(args.data, text_field=args.text_field, score_field=args.score_field)
    scorer = fit_on_file(scorer_from_args(args), data, args.data, args.score_field)
    if args.tune:  # nested: each left-out text's thresholds are tuned on the other texts only
        nested = cross_validate(_pass_of(scorer), Thresholds.of(scorer), folds=None,
                                tune_thresholds=True, min_coverage=args.min_coverage)
        result, chosen = nested.agreement, nested.as_dict()["thresholds"]
    else:
        result, chosen = agreement(scorer.leave_one_out(), data.scores), None
    row = {"kernel": args.kernel, **result.as_dict()}
    if args.json:
        print(tables.to_json(row if chosen is None else {**row, "tuned_thresholds": chosen}))
    else:
        tuned = f", thresholds tuned per text (min coverage {args.min_coverage})" if args.tune else ""
        print(f"leave-one-out on {args.data} ({scorer.signature}{tuned})")
        for key, value in row.items():
            print(f"  {key:<14} {value:.4f}" if isinstance(value, float) else f"  {key:<14} {value}")
        for choice in chosen or []:
            print(f"  chosen in {choice['folds']} folds: tau={choice['tau']:.4g} a={choice['min_neighbors']} "
                  f"b={choice['max_fraction']:g}")
    return 0


# -- evaluation studio: protocols on one similarity pass (evaluate.py), the report (report.py) --


def add_tuning_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tuning")
    group.add_argument("--tune", action="store_true",
                       help="choose tau, a and b on the training data (inner leave-one-out over a grid)")
    group.add_argument("--min-coverage", type=float, default=0.8, metavar="C",
                       help="with --tune: the least coverage a choice may have (0.8)")


def _pass_of(scorer: NeighborsScorer) -> PairwiseSimilarities:
    """The one all-pairs similarity pass of a fitted scorer's training set."""
    return PairwiseSimilarities(scorer.train_similarity(), scorer.train_scores_)


def _studio_pass(args: argparse.Namespace) -> tuple[PairwiseSimilarities, Thresholds, str]:
    data = read_scored(args.data, text_field=args.text_field, score_field=args.score_field)
    scorer = fit_on_file(scorer_from_args(args), data, args.data, args.score_field)
    return _pass_of(scorer), Thresholds.of(scorer), scorer.signature


def _emit(args: argparse.Namespace, title: str, rows: list[dict[str, Any]], **details: Any) -> None:
    if args.json:
        print(tables.to_json({"title": title, **details, "rows": rows}))
        return
    print(f"{title}\n")
    for key, value in details.items():
        print(f"- {key}: {tables.cell(value) if not isinstance(value, (dict, list)) else tables.to_json(value)}")
    print()
    print(tables.markdown_table(rows))


def _number_list(text: str) -> list[float]:
    """`1,2,5` or `start:stop:step` (stop included)."""
    try:
        if ":" in text:
            start, stop, step = (float(part) for part in text.split(":"))
            if step <= 0:
                raise ValueError
            count = int(math.floor((stop - start) / step + 1e-9)) + 1
            return [round(start + index * step, 10) for index in range(max(count, 0))]
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list (1,2,5) or range (start:stop:step): {text!r}") from None


def _folds(text: str) -> int | None:
    if text == "loo":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--folds takes a number of folds or 'loo', not {text!r}") from None


def command_crossval(args: argparse.Namespace) -> int:
    similarities, thresholds, signature = _studio_pass(args)
    result = cross_validate(similarities, thresholds, folds=args.folds, seed=args.seed,
                            tune_thresholds=args.tune, min_coverage=args.min_coverage)
    summary = result.as_dict()
    chosen = summary.pop("thresholds")
    name = "leave-one-out" if args.folds is None else f"{args.folds}-fold cross-validation (seed {args.seed})"
    _emit(args, f"{name} on {args.data}", [summary], signature=signature, thresholds_used=chosen)
    return 0


def command_cross_task(args: argparse.Namespace) -> int:
    train = read_scored(args.train, text_field=args.text_field, score_field=args.score_field)
    test = read_scored(args.test, text_field=args.text_field, score_field=args.score_field)
    result = cross_task(scorer_from_args(args), train.texts, train.scores, test.texts, test.scores,
                        tune_thresholds=args.tune, min_coverage=args.min_coverage)
    row = result.as_dict()
    tuning = row.pop("tuning")
    _emit(args, f"trained on {args.train}, tested on {args.test}", [row], tuning=tuning)
    return 0


def command_curve(args: argparse.Namespace) -> int:
    similarities, thresholds, signature = _studio_pass(args)
    sizes = None if args.sizes is None else [int(size) for size in args.sizes]
    points = learning_curve(similarities, thresholds, sizes=sizes, runs=args.runs, seed=args.seed)
    _emit(args, f"training-size curve on {args.data} ({args.runs} subsets per size, seed {args.seed})",
          [point.as_dict() for point in points], signature=signature)
    return 0


def command_sweep(args: argparse.Namespace) -> int:
    similarities, thresholds, signature = _studio_pass(args)
    parameters = PARAMETERS if args.parameter == "all" else (args.parameter,)
    if args.values is not None and len(parameters) > 1:
        raise ValueError("--values needs one --parameter (tau, a or b)")
    rows = [point.as_dict() for parameter in parameters
            for point in sweep(similarities, thresholds, parameter, args.values)]
    _emit(args, f"leave-one-out sweep on {args.data}", rows, signature=signature)
    return 0


def command_report(args: argparse.Namespace) -> int:
    from gpu_neighbors.evaluation.report import KernelSpec, build_report, write_report

    specs = [KernelSpec.parse(text) for text in args.kernels.split(",") if text.strip()]
    data = read_scored(args.data, text_field=args.text_field, score_field=args.score_field,
                       keep_fields=("judgments", "source"))

    def make_scorer(spec: KernelSpec) -> NeighborsScorer:
        options = {**vars(args), "kernel": spec.kernel, "tau": None, **spec.options}
        if spec.kernel != "bleu":
            options["smoothing"] = None
        if spec.kernel != "bertscore":
            options.update(model=None, layer=None, idf=False, rescale=False)
        return scorer_from_args(argparse.Namespace(**options))

    report = build_report(data, specs, make_scorer=make_scorer, name=str(args.data), folds=args.folds,
                          runs=args.runs, seed=args.seed, min_coverage=args.min_coverage,
                          resamples=args.resamples, paper=args.paper,
                          command=shlex.join(["gpu-neighbors", *args.argv]),
                          sizes=None if args.sizes is None else [int(size) for size in args.sizes])
    page = write_report(report, args.out, page=args.page, paper=args.paper)
    print(f"report -> {page}", file=sys.stderr)
    return 0


def _kernel_taus(pairs: Sequence[str]) -> dict[str, float]:
    taus = {}
    for pair in pairs:
        kernel, _, value = pair.partition("=")
        try:
            taus[kernel.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--tau takes KERNEL=VALUE, e.g. rouge=0.06, not {pair!r}") from None
    return taus


def command_compare(args: argparse.Namespace) -> int:
    from gpu_neighbors.evaluation.compare import compare_kernels, comparison_table

    kernels = [name.strip() for name in args.kernels.split(",") if name.strip()]
    unknown = [name for name in kernels if name not in KERNEL_NAMES]
    if unknown or not kernels:
        raise ValueError(f"--kernels takes a comma list of {', '.join(KERNEL_NAMES)}; got {args.kernels!r}")
    data = read_scored(args.data, text_field=args.text_field, score_field=args.score_field,
                       keep_fields=(args.judgments_field,))
    judgments = None
    if data.extra and all(args.judgments_field in extra for extra in data.extra):
        judgments = [{"score": score, "judgments": extra[args.judgments_field]}
                     for score, extra in zip(data.scores, data.extra)]
    kernel_options = {"bertscore": bertscore_options(args)}
    if args.smoothing:
        kernel_options["bleu"] = {"smoothing": args.smoothing}
    rows = compare_kernels(
        data.texts, data.scores, kernels, taus=_kernel_taus(args.tau), kernel_options=kernel_options,
        judgments=judgments, min_neighbors=args.min_neighbors, max_fraction=args.max_fraction,
        device=args.device, tokenizer=args.tokenizer, lowercase=args.lowercase,
        memory_budget=args.memory_budget, score_range=tuple(args.score_range),
    )
    if args.json:
        print(tables.to_json([row.as_dict() for row in rows]))
    else:
        print(f"leave-one-out on {args.data} (a={args.min_neighbors}, b={args.max_fraction})\n")
        print(comparison_table(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-neighbors",
        description="Estimate text quality without references: BLEU Neighbors and other kernels.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    score = commands.add_parser("score", help="score candidates against a scored training set")
    score.add_argument("--train", required=True, help="scored texts: JSONL, CSV or TSV (optionally .gz)")
    score.add_argument("--candidates", required=True, help="texts to score: JSONL, CSV, TSV, Parquet or plain text")
    score.add_argument("--output", required=True, help="results, JSONL, one line per candidate in input order")
    score.add_argument("--resume", action="store_true", help="continue an interrupted run from what is on disk")
    score.add_argument("--skip-bad", action="store_true", help="skip bad candidate lines instead of stopping")
    score.add_argument("--rejects", default=None, help="with --skip-bad: where bad lines go (default OUTPUT.rejects.jsonl)")
    score.add_argument("--batch-size", type=_positive_int, default=DEFAULT_BATCH_SIZE, metavar="N",
                       help=f"candidates scored and made durable per step ({DEFAULT_BATCH_SIZE})")
    score.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                       help="CPU threads for torch (default: torch's, one per core; on a busy "
                            "machine 1 is often faster, see docs/benchmarks.md)")
    score.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    score.add_argument("--ray", action="store_true", help="score on Ray actors, one GPU each where there are GPUs (needs the [ray] extra)")
    score.add_argument("--ray-address", default=None, metavar="ADDR", help="Ray cluster to join (auto, or ray://host:10001); implies --ray; default: a local Ray")
    add_data_options(score)
    add_model_options(score)
    add_tuning_options(score)
    score.set_defaults(handler=command_score)

    evaluate = commands.add_parser("evaluate", help="leave-one-out agreement on scored data")
    evaluate.add_argument("--data", required=True, help="scored texts: JSONL, CSV or TSV")
    evaluate.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    add_data_options(evaluate)
    add_model_options(evaluate)
    add_tuning_options(evaluate)
    evaluate.set_defaults(handler=command_evaluate)

    compare = commands.add_parser("compare", help="leave-one-out for several kernels, one row each")
    compare.add_argument("--data", required=True, help="scored texts: JSONL, CSV or TSV")
    compare.add_argument("--kernels", default=",".join(KERNEL_NAMES), help="comma list (default: all)")
    compare.add_argument("--tau", action="append", default=[], metavar="KERNEL=VALUE",
                         help="a kernel's threshold instead of its default; repeatable")
    compare.add_argument("--judgments-field", default="judgments",
                         help="per-annotator judgments, for the Human (best)/(average) rows")
    output = compare.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="a JSON list of rows")
    output.add_argument("--markdown", action="store_true", help="a markdown table (the default)")
    add_data_options(compare)
    add_model_options(compare, one_kernel=False)
    compare.set_defaults(handler=command_compare)
    add_studio_commands(commands)
    return parser


def add_studio_commands(commands: Any) -> None:
    """crossval, cross-task, curve, sweep and report (see evaluate.py and report.py)."""
    def studio(name: str, help_text: str, data: bool = True, one_kernel: bool = True) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text)
        if data:
            parser.add_argument("--data", required=True, help="scored texts: JSONL, CSV or TSV")
        if one_kernel:
            parser.add_argument("--json", action="store_true", help="JSON instead of a markdown table")
        add_data_options(parser)
        add_model_options(parser, one_kernel=one_kernel)
        return parser

    crossval = studio("crossval", "k-fold or leave-one-out cross-validation, optionally with nested tuning")
    crossval.add_argument("--folds", type=_folds, default=10, metavar="K", help="number of folds, or loo (10)")
    crossval.add_argument("--seed", type=int, default=0, help="seed of the fold shuffle (0)")
    add_tuning_options(crossval)
    crossval.set_defaults(handler=command_crossval)

    task = studio("cross-task", "fit on one file, score another (the paper's Table 2)", data=False)
    task.add_argument("--train", required=True, help="scored training texts")
    task.add_argument("--test", required=True, help="scored test texts")
    add_tuning_options(task)
    task.set_defaults(handler=command_cross_task)

    curve = studio("curve", "training-size curve: leave-one-out in random subsets (the paper's Figure 4)")
    curve.add_argument("--sizes", type=_number_list, default=None, help="subset sizes, e.g. 25,50,100 or 25:200:25")
    curve.add_argument("--runs", type=_positive_int, default=20, help="random subsets per size (20)")
    curve.add_argument("--seed", type=int, default=0, help="seed of the subset draws (0)")
    curve.set_defaults(handler=command_curve)

    sweep_parser = studio("sweep", "leave-one-out as tau, a or b varies (the paper's Figures 2 and 3)")
    sweep_parser.add_argument("--parameter", choices=(*PARAMETERS, "all"), default="all")
    sweep_parser.add_argument("--values", type=_number_list, default=None,
                              help="values to try, e.g. 1,5,10 or 0.02:0.2:0.02 (default: a grid per parameter)")
    sweep_parser.set_defaults(handler=command_sweep)

    report = studio("report", "markdown report with PNG plots: kernels, tuning, sweeps, curve", one_kernel=False)
    report.add_argument("--out", required=True, help="folder for the PNGs (and report.md unless --page)")
    report.add_argument("--page", default=None, help="where the markdown goes (default OUT/report.md)")
    report.add_argument("--kernels", default="bleu",
                        help="comma list of kernels, each optionally with settings, e.g. "
                             "bleu:tokenizer=chars:smoothing=none,rouge (default bleu)")
    report.add_argument("--paper", choices=("summarization", "dialogue", "generation"), default=None,
                        help="also set the paper's published figures for this task beside ours")
    report.add_argument("--folds", type=int, default=10, help="k of the k-fold comparison (10)")
    report.add_argument("--runs", type=_positive_int, default=20, help="random subsets per size (20)")
    report.add_argument("--sizes", type=_number_list, default=None, help="subset sizes of the curve")
    report.add_argument("--seed", type=int, default=0)
    report.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per rho (1000)")
    report.add_argument("--min-coverage", type=float, default=0.8, metavar="C",
                        help="least coverage a tuned choice may have (0.8)")
    report.set_defaults(handler=command_report)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the report records how it was made
    if getattr(args, "skip_bad", False) and args.rejects is None:
        args.rejects = f"{args.output}.rejects.jsonl"
    try:
        return args.handler(args)
    except (InputError, ValueError, FileNotFoundError, ImportError) as error:
        print(f"gpu-neighbors: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpu-neighbors: interrupted; rerun with --resume to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
