"""`run`: parse the command line, run the command, turn refusals into one-line errors."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from gpu_neighbors.cli.codes import INTERRUPTED
from gpu_neighbors.cli.parser import build_parser
from gpu_neighbors.core.validation import PARAMETERS, ParameterError, validate_parameters
from gpu_neighbors.data import InputError
from gpu_neighbors.data.errors import STANDARD_STREAM
from gpu_neighbors.text.hub import forbid_downloads


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the report records how it was made
    if getattr(args, "skip_bad", False) and args.rejects is None and args.output != STANDARD_STREAM:
        args.rejects = f"{args.output}.rejects.jsonl"
    if not getattr(args, "allow_download", False):
        forbid_downloads()  # before any model or tokenizer loads: no hub traffic at all
    try:
        # every option named like a setting was made from the table: refuse bad values by flag
        validate_parameters({name: value for name, value in vars(args).items() if name in PARAMETERS})
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
