"""What the evaluation commands show while they work: rows as they are made, and progress bars.

A table is printed row by row, each row as soon as it is made, so a run that fails later (a
model that cannot load, an interruption) keeps every row it made on the screen; a JSON list
is printed whole at the end, or at the failure with the rows made. Progress bars go to stderr
only where it is a terminal: a log or a pipe gets the rows and no bar.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from gpu_neighbors.evaluation import tables


class RowPrinter:
    """A table on stdout: `markdown` lines (the head with the first row; `columns`, default the
    first row's keys), or one JSON document of the rows (`document` wraps them; default the list)."""

    def __init__(self, as_json: bool, columns: Sequence[str] | None = None,
                 document: Callable[[list[dict[str, Any]]], Any] | None = None) -> None:
        self.as_json, self.columns = as_json, None if columns is None else list(columns)
        self.document = document or (lambda rows: rows)
        self.rows: list[dict[str, Any]] = []

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows.append(dict(row))
        if self.as_json:
            return
        if self.columns is None:
            self.columns = list(row)
        if len(self.rows) == 1:
            print(tables.markdown_head(self.columns))
        print(tables.markdown_row(row, self.columns), flush=True)

    def __enter__(self) -> RowPrinter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.as_json:
            print(tables.to_json(self.document(_same_keys(self.rows))), flush=True)
        elif not self.rows and exc_type is None:
            print("(no rows)")
        if exc_type is not None and self.rows:
            print(f"gpu-neighbors: the {len(self.rows)} row{'s' * (len(self.rows) != 1)} above are complete; "
                  "the next one failed:", file=sys.stderr)


def _same_keys(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with every key any of them has (in order of first appearance), null where a row
    has none: the JSON counterpart of the table's dash, so row["tau"] reads on every row."""
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: row.get(key) for key in keys} for row in rows]


def interactive() -> bool:
    """Whether progress bars are shown: stderr is a terminal."""
    return sys.stderr.isatty()


def progress_bar(total: int, unit: str, description: str) -> Any:
    """A tqdm bar of `total` `unit`s on stderr, drawn only on a terminal and cleared when done."""
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=unit, desc=description, disable=not interactive(), leave=False,
                dynamic_ncols=True, file=sys.stderr)
