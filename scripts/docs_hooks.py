"""MkDocs hook (mkdocs.yml `hooks:`): docs/cli.md's marker becomes the command-line reference,
written from the program's own parser at build time (`gpu_neighbors.cli.reference`)."""
from __future__ import annotations

from typing import Any

MARKER = "<!-- cli-reference -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "cli.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/cli.md has lost its marker {MARKER}: the reference has nowhere to go")
    from gpu_neighbors.cli.reference import markdown as reference

    return markdown.replace(MARKER, reference())
