"""The one error type of bad input: it names file, line and field, so a user can fix the line."""
from __future__ import annotations

import json
import os
from typing import Any

PathLike = str | os.PathLike
STANDARD_STREAM = "-"  # as an input, standard input; as an output, standard output


class InputError(ValueError):
    """Bad input; str() names file, line and field, e.g.
    "train.jsonl:17: field 'score': "abc" is not a number"."""

    def __init__(self, reason: str, *, path: PathLike | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.reason, self.path, self.line, self.field = reason, path, line, field
        super().__init__(self._message())

    @property
    def detail(self) -> str:
        """The message without file and line: what a rejects file records as the reason."""
        return self.reason if self.field is None else f"field '{self.field}': {self.reason}"

    def _message(self) -> str:
        where = "" if self.path is None else str(self.path)
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.detail}" if where else self.detail


def preview(value: Any) -> str:
    """A value as the file spells it, cut short so one bad field cannot flood a message."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."
