"""The code blocks of the README and the user guide, and a runner for the runnable ones.

Every bash or Python block carries a marker on the line before it: `<!-- run -->` (the docs test
runs it on the shipped example), `<!-- run, needs: PACKAGE ... -->` (runs where those packages
import, else is skipped with the reason), or `<!-- not run: REASON -->`. A document's runnable
blocks run in order, in one working folder holding `examples/` and sharing one Python namespace,
so a scorer fitted by one block serves the next. Shell blocks hold `gpu-neighbors` command
lines, run in this process (`gpu_neighbors.cli.main`: no interpreter start-up per command), and
each must exit 0."""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("bash", "sh", "python", "console")
# A fence may be indented (inside a list): the marker must then be on the line before it too.
BLOCK = re.compile(r"^(?P<marker>[ \t]*<!--(?P<note>[^\n]*?)-->\n)?[ \t]*```(?P<language>[\w-]*)\n(?P<code>.*?)^[ \t]*```$",
                   re.S | re.M)


@dataclass
class Block:
    document: Path
    line: int
    language: str
    code: str
    marker: str | None  # the comment before the block, stripped; None without one
    needs: list[str] = field(default_factory=list)

    @property
    def runnable(self) -> bool:
        return self.marker is not None and (self.marker == "run" or self.marker.startswith("run, needs:"))

    @property
    def where(self) -> str:
        shown = self.document.relative_to(ROOT) if self.document.is_relative_to(ROOT) else self.document
        return f"{shown}:{self.line}"


def blocks(document: Path) -> list[Block]:
    """The fenced blocks of `document`, with their markers; `needs` of `run, needs: a b`."""
    text = document.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        marker = match["note"].strip() if match["marker"] else None
        needs = marker.split(":", 1)[1].split() if marker and marker.startswith("run, needs:") else []
        line = text.count("\n", 0, match.start("language")) + 1
        found.append(Block(document, line, match["language"], match["code"], marker, needs))
    return found


def unmarked(document: Path) -> list[str]:
    """Code blocks that say neither `run` nor `not run: REASON`."""
    return [block.where for block in blocks(document) if block.language in CODE and not (
        block.runnable or (block.marker or "").startswith("not run:") and len(block.marker or "") > len("not run:"))]


def command_lines(code: str) -> list[list[str]]:
    """The command lines of a shell block: continuations joined, comments dropped."""
    return [words for words in (shlex.split(line, comments=True) for line in code.replace("\\\n", " ").splitlines())
            if words]


def missing(needs: list[str]) -> list[str]:
    return [name for name in needs if importlib.util.find_spec(name) is None]


def run_document(document: Path, folder: Path) -> tuple[dict, list[str]]:
    """Runs the runnable blocks of `document` in `folder` (made to hold `examples/` and `out/`):
    the Python namespace they shared, and a line per block skipped for a missing package. A
    failing block raises AssertionError naming its file and line."""
    from gpu_neighbors.cli import main

    (folder / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    (folder / "out").mkdir()
    namespace: dict = {"__name__": "__snippet__"}
    skipped = []
    here = os.getcwd()
    os.chdir(folder)
    try:
        for block in (block for block in blocks(document) if block.runnable):
            absent = missing(block.needs)
            if absent:
                skipped.append(f"{block.where} needs {', '.join(absent)}")
                continue
            if block.language == "python":
                try:
                    exec(compile(block.code, block.where, "exec"), namespace)
                except Exception as error:
                    raise AssertionError(f"{block.where}: the Python block raised {error!r}") from error
                continue
            for words in command_lines(block.code):
                if words[0] != "gpu-neighbors":
                    raise AssertionError(f"{block.where}: a runnable shell block holds gpu-neighbors command "
                                         f"lines only, not {words[0]!r}")
                try:
                    status = main(words[1:])
                except SystemExit as exit:  # argparse's refusals
                    status = exit.code
                if status != 0:
                    raise AssertionError(f"{block.where}: `{shlex.join(words)}` exited {status}")
    finally:
        os.chdir(here)
    return namespace, skipped
