"""`main`: parse the command line, run the command, turn refusals into one-line errors."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from gpu_neighbors.cli.parser import build_parser
from gpu_neighbors.core.validation import PARAMETERS, ParameterError, validate_parameters
from gpu_neighbors.data import InputError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the report records how it was made
    if getattr(args, "skip_bad", False) and args.rejects is None:
        args.rejects = f"{args.output}.rejects.jsonl"
    try:
        # every option named like a setting was made from the table: refuse bad values by flag
        validate_parameters({name: value for name, value in vars(args).items() if name in PARAMETERS})
        return args.handler(args)
    except ParameterError as error:  # named by its flag, as the user wrote it
        print(f"gpu-neighbors: error: {error.message(error.parameter.flag)}", file=sys.stderr)
        return 2
    except (InputError, ValueError, FileNotFoundError, ImportError) as error:
        print(f"gpu-neighbors: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpu-neighbors: interrupted; rerun with --resume to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
