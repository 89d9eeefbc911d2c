"""The references the docs site is built from cover the whole program: the command-line
reference every command and flag of the parser, the API page every name of `__all__`; and the
README stays the short page it was cut down to."""
from __future__ import annotations

import argparse
import html
import re

import gpu_neighbors
from gpu_neighbors.cli.parser import build_parser
from gpu_neighbors.cli.reference import markdown
from snippets import ROOT, blocks


def commands() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the parser has no commands")


def sections(text: str) -> dict[str, str]:
    """The reference's `## command` sections, by command."""
    parts = re.split(r"^## (\S+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_command_line_reference_holds_every_command_and_flag():
    reference = sections(markdown())
    assert list(reference) == list(commands())
    for name, command in commands().items():
        for action in command._actions:
            for flag in action.option_strings:
                assert f"`{flag}" in reference[name] or f", {flag}" in reference[name], (name, flag)
            if action.help not in (None, argparse.SUPPRESS):  # its help, as Markdown shows it
                words = " ".join(re.sub(r"%\([a-z_]+\)s", "", action.help).split()[:3])
                assert words in " ".join(html.unescape(reference[name].replace("\\", "")).split()), (name, action.dest)
    assert "%(" not in markdown()  # argparse's placeholders expanded, as --help prints them


def test_the_api_page_renders_every_public_name():
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rendered = re.findall(r"^::: gpu_neighbors\.(\S+)$", page, flags=re.M)
    assert sorted(rendered) == sorted(gpu_neighbors.__all__)


def test_the_readme_is_short_opens_with_the_two_commands_and_names_the_docs_build():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    first = blocks(ROOT / "README.md")[0].code
    assert "bash scripts/example.sh" in first and "bash scripts/test.sh" in first
    assert "bash scripts/docs.sh" in readme
    assert not re.search(r"\bissue \d|\b20\d\d-\d\d-\d\d\b", readme, flags=re.I)  # no history, no dated figures
