"""Sections of a benchmark page that more than one script writes (bench/quality.md: quality.py
writes the page, checklist.py its perturbation checklist section): each keeps the other's."""
from __future__ import annotations

from pathlib import Path


def section_of(page: str, heading: str) -> str:
    """`page`'s section under `heading` (to the next section of the same level, or the end);
    empty where it has none."""
    if heading not in page:
        return ""
    start = page.index(heading)
    following = page.find("\n## ", start + len(heading))
    return page[start:] if following < 0 else page[start:following + 1]


def replace_section(page: str, heading: str, text: str) -> str:
    """`page` with its section under `heading` replaced by `text`, or `text` appended."""
    old = section_of(page, heading)
    if not old:
        return page.rstrip("\n") + "\n\n" + text
    start = page.index(heading)
    rest = page[start + len(old):]
    return page[:start] + text + ("\n" + rest if rest else "")


def write_section(path: Path, heading: str, text: str) -> None:
    """Replace (or append) the section under `heading` of the page at `path` (made where
    missing) with `text`, and print it."""
    page = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(replace_section(page, heading, text), encoding="utf-8")
    print(text)


def write_table(path: Path, heading: str, made: str, columns: list[str], rows: list[str]) -> None:
    """Write the section under `heading` of the page at `path`: how it was `made`, then a table
    of `columns` whose `rows` are already formatted."""
    write_section(path, heading, "\n".join([heading, "", made, "", "| " + " | ".join(columns) + " |",
                                            "|" + "---|" * len(columns), *rows, ""]))
