"""The all-pairs commands: `self-bleu`, `mbr` and `pairs` (see `gpu_neighbors.allpairs`).

Settings that the parameter table declares (kernel, smoothing, weights, tokenizer, lowercase,
device, memory budget) are made from it, as for every other command. Outputs are written as
every command writes them (`data.output.SafeOutput`): never onto an input, locked, through a
partial file moved into place only when complete, and an existing one replaced only with
--overwrite."""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from gpu_neighbors.allpairs.self_bleu import DEFAULT_SMOOTHING
from gpu_neighbors.cli.options import (
    MOST_PER_CANDIDATE,
    add_parameter,
    bertscore_options,
    bounded,
    layer,
    positive_int,
    refuse_resume,
    seed,
    similarity,
)
from gpu_neighbors.cli.parts import warn_unread_text_settings
from gpu_neighbors.data import InputError, iter_candidates
from gpu_neighbors.data.formats import open_input, records, resolve_format, sniff_allowed
from gpu_neighbors.data.output import SafeOutput, refuse_other_format_name
from gpu_neighbors.kernels import KERNEL_NAMES
from gpu_neighbors.kernels.bleu_sets import BLEU4_WEIGHTS

KERNEL_SETTINGS = ("kernel", "smoothing", "weights", "tokenizer", "lowercase", "device", "memory_budget")
BLEU_SETTINGS = ("smoothing", "weights", "tokenizer", "lowercase", "device")


def add_allpairs_commands(subparsers: Any) -> None:
    self_bleu = subparsers.add_parser("self-bleu", help="Self-BLEU of a set of texts: each against all the others")
    self_bleu.add_argument("--data", required=True, help="texts: JSONL, CSV, TSV, Parquet or plain text")
    self_bleu.add_argument("--text-field", default="text", help="field holding the text (JSONL/CSV/TSV/Parquet)")
    self_bleu.add_argument("--sample", type=positive_int, default=None, metavar="N",
                           help="report a seeded random sample of N texts (each still against all the others)")
    self_bleu.add_argument("--seed", type=seed, default=0, help="seed of --sample (0)")
    self_bleu.add_argument("--output", default=None, help="per-text Self-BLEU, JSONL (index, line, self_bleu)")
    self_bleu.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    refuse_resume(self_bleu)
    _add_settings(self_bleu, BLEU_SETTINGS)
    # Self-BLEU's defaults are Texygen's and fast-bleu's, not the neighbour kernel's BLEU*.
    _default(self_bleu, "weights", BLEU4_WEIGHTS, "0.25,0.25,0.25,0.25 (BLEU-4)")
    _default(self_bleu, "smoothing", DEFAULT_SMOOTHING, DEFAULT_SMOOTHING)
    self_bleu.set_defaults(handler=command_self_bleu)

    mbr = subparsers.add_parser("mbr", help="MBR: each candidate's expected utility against the others of its group")
    mbr.add_argument("--candidates", required=True, help="samples: JSONL, CSV or TSV (plain text or Parquet without --group-field)")
    mbr.add_argument("--text-field", default="text", help="field holding the text")
    mbr.add_argument("--group-field", default=None,
                     help="field naming each sample's input: records sharing its value form a group "
                          "(default: the whole file is one group)")
    mbr.add_argument("--output", required=True, help="JSONL, one line per candidate: index, line, group, utility, selected")
    mbr.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    refuse_resume(mbr)
    _add_settings(mbr, KERNEL_SETTINGS)
    _default(mbr, "kernel", "bleu", "bleu")  # the all-pairs jobs' kernel is BLEU*, not the scorer's default
    mbr.set_defaults(handler=command_mbr)

    pairs = subparsers.add_parser("pairs", help="all-pairs similarities: the matrix (.npy) or top-k/thresholded pairs (.parquet)")
    pairs.add_argument("--candidates", required=True, help="texts: JSONL, CSV, TSV, Parquet or plain text")
    pairs.add_argument("--train", default=None, help="texts to compare against (default: the candidates themselves)")
    pairs.add_argument("--text-field", default="text", help="field holding the text")
    pairs.add_argument("--output", required=True,
                       help="OUT.npy (float32 matrix, candidates x train) or OUT.parquet (candidate, train, similarity[, rank])")
    # dest top_pairs, not top_k: the command line checks every option named like a setting by the
    # parameter table, whose top_k is the top-k estimator's (at most 1,000), not this bound
    pairs.add_argument("--top-k", dest="top_pairs", type=bounded(1, MOST_PER_CANDIDATE, "a number of pairs per candidate"),
                       default=None, metavar="K", help="Parquet: the K most similar per candidate")
    pairs.add_argument("--min-similarity", type=similarity, default=None, metavar="T",
                       help="Parquet: only pairs with similarity >= T")
    pairs.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    refuse_resume(pairs)
    _add_settings(pairs, KERNEL_SETTINGS)
    _default(pairs, "kernel", "bleu", "bleu")
    pairs.set_defaults(handler=command_pairs)


def _add_settings(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    group = parser.add_argument_group("kernel")
    for name in names:
        add_parameter(group, name)
    if "kernel" in names:
        _action(parser, "kernel").choices = KERNEL_NAMES  # one kernel runs the pairs: no automatic choice
        group.add_argument("--model", default=None, help="BERTScore: model name or local path")
        group.add_argument("--layer", type=layer, default=None, help="BERTScore: hidden layer to use")


def _default(parser: argparse.ArgumentParser, name: str, value: Any, shown: str) -> None:
    """A table option with another default in this command, its help saying so."""
    action = _action(parser, name)
    action.default = value
    action.help = re.sub(r"\(default: .*\)$", f"(default: {shown})", action.help or "")


def _action(parser: argparse.ArgumentParser, name: str) -> argparse.Action:
    """The option of `parser` that sets `name` (added from the parameter table)."""
    return next(action for action in parser._actions if action.dest == name)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    names = KERNEL_SETTINGS if hasattr(args, "kernel") else BLEU_SETTINGS
    settings = {name: getattr(args, name) for name in names}
    if "kernel" in settings:
        options = bertscore_options(argparse.Namespace(model=args.model, layer=args.layer, idf=None, rescale=None))
        if options and args.kernel != "bertscore":
            raise ValueError("--model and --layer apply to --kernel bertscore only")
        settings["kernel_options"] = options or None
        warn_unread_text_settings(args.kernel, settings)
    return settings


def _texts(path: str, text_field: str) -> tuple[list[str], list[int]]:
    candidates = list(iter_candidates(path, text_field=text_field))
    return [candidate.text for candidate in candidates], [candidate.line for candidate in candidates]


def _texts_and_groups(path: str, text_field: str, group_field: str) -> tuple[list[str], list[int], list[Hashable]]:
    """Texts, their lines and group values of a JSONL, CSV or TSV file; missing fields are
    errors naming file, line and field."""
    texts, lines, groups = [], [], []
    allowed = ("jsonl", "csv", "tsv")
    fmt = resolve_format(path, None, allowed)
    with open_input(path) as stream:
        for record in records(stream, path, fmt or sniff_allowed(stream, path, allowed), (text_field, group_field),
                              "none"):
            if record.error is not None:
                raise record.error
            text, group = record.fields.get(text_field), record.fields.get(group_field)
            if not isinstance(text, str):
                raise InputError("missing or not a string", path=path, line=record.line, field=text_field)
            if group is None:
                raise InputError("missing: every candidate needs a group", path=path, line=record.line,
                                 field=group_field)
            texts.append(text)
            lines.append(record.line)
            groups.append(group if isinstance(group, Hashable) else json.dumps(group, sort_keys=True))
    return texts, lines, groups


def command_self_bleu(args: argparse.Namespace) -> int:
    from gpu_neighbors.allpairs.self_bleu import self_bleu

    refuse_other_format_name(args.output, "--output")
    with SafeOutput({"--output": args.output}, inputs={"--data": args.data}, overwrite=args.overwrite) as files:
        texts, lines = _texts(args.data, args.text_field)
        if len(texts) < 2:
            raise InputError(f"{len(texts)} text{'s' if len(texts) != 1 else ''}: Self-BLEU scores each text "
                             "against the others, so it needs two or more", path=args.data)
        result = self_bleu(texts, sample=args.sample, seed=args.seed, **_settings(args))
        if args.output is not None:
            handle = files.create()
            for index, score in zip(result.indices.tolist(), result.scores.tolist()):
                handle.write((json.dumps({"index": index, "line": lines[index], "self_bleu": score}) + "\n").encode())
    weights = ",".join(f"{weight:g}" for weight in result.weights)
    sampled = f", sample of {len(result.indices)} (seed {args.seed})" if args.sample else ""
    print(f"Self-BLEU {result.mean:.6f} over {len(texts)} texts{sampled} (weights {weights}, "
          f"smoothing {result.smoothing})")
    return 0


def command_mbr(args: argparse.Namespace) -> int:
    from gpu_neighbors.allpairs.mbr import mbr

    refuse_other_format_name(args.output, "--output")
    with SafeOutput({"--output": args.output}, inputs={"--candidates": args.candidates},
                    overwrite=args.overwrite) as files:
        if args.group_field is None:
            texts, lines = _texts(args.candidates, args.text_field)
            groups = None
        else:
            texts, lines, groups = _texts_and_groups(args.candidates, args.text_field, args.group_field)
        if len(texts) < 2:
            raise InputError(f"{len(texts)} candidate{'s' if len(texts) != 1 else ''}: MBR compares each "
                             "candidate with the others of its group, so it needs two or more", path=args.candidates)
        try:
            result = mbr(texts, groups, **_settings(args))
        except ValueError as error:
            raise InputError(str(error), path=args.candidates, field=args.group_field) from None
        handle = files.create()
        for index, (line, group, utility, selected) in enumerate(
                zip(lines, result.group.tolist(), result.utility.tolist(), result.selected.tolist())):
            row = {"index": index, "line": line, "group": result.labels[group],
                   "utility": None if math.isnan(utility) else utility, "selected": selected}
            handle.write((json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8"))
    print(f"MBR: {len(result.labels)} group{'s' if len(result.labels) != 1 else ''}, {len(texts)} candidates "
          f"-> {args.output}", file=sys.stderr)
    return 0


def command_pairs(args: argparse.Namespace) -> int:
    from gpu_neighbors.allpairs.pairs import check_selection, pairs

    inputs = {"--candidates": args.candidates, "--train": args.train}
    # by their flags, before the texts are read
    check_selection(Path(args.output).suffix.lower(), args.top_pairs, args.min_similarity,
                    ("--top-k K", "--min-similarity T", "--output"))
    with SafeOutput({"--output": args.output}, inputs=inputs, overwrite=args.overwrite) as files:
        candidates, _ = _texts(args.candidates, args.text_field)
        train = None if args.train is None else _texts(args.train, args.text_field)[0]
        for flag, path, texts in (("--candidates", args.candidates, candidates), ("--train", args.train, train)):
            if texts is not None and not texts:
                raise InputError(f"{flag} holds no texts: there are no pairs to compute", path=path)
        if train is None and len(candidates) == 1:
            raise InputError("--candidates holds one text, which against itself has no pairs: give two or "
                             "more, or --train", path=args.candidates)
        result = pairs(candidates, train, output=files, top_k=args.top_pairs, min_similarity=args.min_similarity,
                       **_settings(args))
    print(f"pairs: {result.candidates} x {result.train} -> {result.path} ({result.pairs:,} "
          f"{'entries' if result.path.suffix == '.npy' else 'pairs'})", file=sys.stderr)
    return 0

