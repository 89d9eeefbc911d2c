"""Output paths that cannot destroy inputs: refuse an output that is an input or another output."""
from __future__ import annotations

import os
from collections.abc import Mapping

from gpu_neighbors.data.errors import STANDARD_STREAM, InputError, PathLike


def check_distinct(inputs: Mapping[str, PathLike | None], outputs: Mapping[str, PathLike | None]) -> None:
    """Refuses any output that resolves (symlinks, `./`, hard links) to an input or to another
    output; keys name the files as the user knows them (e.g. the CLI flag)."""
    piped = [name for name, path in inputs.items() if path is not None and str(path) == STANDARD_STREAM]
    if len(piped) > 1:  # the first would read it all and leave the other nothing
        raise InputError(f"{piped[0]} and {piped[1]} are both standard input, which can be read only once: "
                         "give one of them a file", path=STANDARD_STREAM)
    named: list[tuple[str, PathLike, bool]] = []
    for paths, is_output in ((inputs, False), (outputs, True)):
        named += [(name, path, is_output) for name, path in paths.items()
                  if path is not None and str(path) != STANDARD_STREAM]
    for position, (name, path, is_output) in enumerate(named):
        for other_name, other, other_is_output in named[:position]:
            if (is_output or other_is_output) and _same_file(path, other):
                raise InputError(f"{name} and {other_name} are the same file: writing one would "
                                 f"destroy the other", path=path)


def _same_file(first: PathLike, second: PathLike) -> bool:
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist yet
        return False


def spelled_once(path: PathLike) -> str:
    """A file's path as a run records it to compare on resume: absolute, with symbolic links
    and `./` resolved, so `c.txt`, `./c.txt` and `/here/c.txt` are one file (the content is
    compared by its digest); `-` (standard input) as it is."""
    return STANDARD_STREAM if str(path) == STANDARD_STREAM else os.path.realpath(path)
