"""`run`: parse the command line, run the command, turn refusals into one-line errors."""
from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from gpu_neighbors.cli.codes import INTERRUPTED
from gpu_neighbors.cli.options import fitting_options_given
from gpu_neighbors.cli.parser import build_parser
from gpu_neighbors.core.validation import PARAMETERS, ParameterError, validate_parameters
from gpu_neighbors.data import InputError
from gpu_neighbors.data.errors import STANDARD_STREAM
from gpu_neighbors.text.hub import forbid_downloads


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the report records how it was made
    conflict = conflicting_options(args)
    if conflict:
        print(f"gpu-neighbors: error: {conflict} (see gpu-neighbors {args.command} --help)", file=sys.stderr)
        return 2
    if getattr(args, "skip_bad", False) and args.rejects is None and args.output != STANDARD_STREAM:
        args.rejects = f"{args.output}.rejects.jsonl"
    if not getattr(args, "allow_download", False):
        forbid_downloads()  # before any model or tokenizer loads: no hub traffic at all
    try:
        # every option named like a setting was made from the table: refuse bad values by flag
        validate_parameters({name: value for name, value in vars(args).items() if name in PARAMETERS})
        with warnings.catch_warnings():  # restores Python's printer when the command ends
            warnings.showwarning = OnceEach()
            # torch's once-per-process note on sparse tensors made without checks, which the
            # kernels make on purpose (their indices are valid by construction): not the user's
            warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
            return args.handler(args)
    except ParameterError as error:  # named by its flag, as the user wrote it
        print(f"gpu-neighbors: error: {error.message(error.parameter.flag)}", file=sys.stderr)
        return 2
    except (InputError, ValueError, ImportError) as error:
        print(f"gpu-neighbors: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # unwritable output, read-only or full disk, ...: the OS's reason
        where = f"{error.filename}: " if error.filename else ""
        print(f"gpu-neighbors: error: {where}{error.strerror or error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resumable = getattr(args, "resumable", False) and args.output != STANDARD_STREAM \
            and not str(args.output).lower().endswith(".parquet")
        resume = " (rerun with --resume to continue)" if resumable else ""
        print(f"gpu-neighbors: interrupted{resume}", file=sys.stderr)
        return INTERRUPTED


def conflicting_options(args: argparse.Namespace) -> str | None:
    """Why two options given together cannot both hold, or None."""
    if getattr(args, "thresholds", None) == "paper" and getattr(args, "tune", None):
        return "--paper-thresholds (--thresholds paper) are the paper's settings, never tuned: give it or --tune, not both"
    given = fitting_options_given(args) if getattr(args, "scorer", None) is not None else []
    if given:
        return (f"{', '.join(given)}: fitting settings, and a saved scorer (--scorer) keeps those it was fitted "
                "with: leave them out, or fit again with --train")
    if getattr(args, "resume", False) is True and getattr(args, "overwrite", False):
        return "--resume continues the run on disk and --overwrite starts again: give one of them, not both"
    return None


class OnceEach:
    """Python's warning printer for one command: each warning as one line on stderr, like the
    errors (no file path, no source line), and each text once. Python's own once-per-place
    registry forgets what it printed whenever a warning filter changes (the kernels set some
    as they load), so a warning made for each of several fits (duplicate training texts, in
    `compare`'s one fit per kernel) came out once per fit."""

    def __init__(self) -> None:
        self.shown: set[str] = set()

    def __call__(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
        text = " ".join(str(message).split())
        if text not in self.shown:
            self.shown.add(text)
            print(f"gpu-neighbors: warning: {text}", file=sys.stderr if file is None else file)
