"""The command-line reference as Markdown, written from the parser itself (`build_parser`), so
the documentation lists every command and flag the program has, with the help the program
prints: nothing is copied by hand, so nothing can drift. The docs build (`scripts/docs_hooks.py`)
puts it into docs/cli.md; `python -m gpu_neighbors.cli.reference` prints it."""
from __future__ import annotations

import argparse
import html
import re

from gpu_neighbors.cli.parser import build_parser

WIDTH = 100  # usage lines wrap here, whatever the terminal of the build


def markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference of `parser` (default: gpu-neighbors'): its own options, then a section per
    command, in the order `--help` lists them."""
    parser = parser or build_parser()
    lines = [_usage(parser), "", _text(parser.description or ""), ""]
    lines += _options(parser)
    for name, command in _commands(parser):
        lines += ["", f"## {name}", "", _text(_help_of(parser, name)), "", _usage(command), ""]
        lines += _options(command)
    return "\n".join(lines).rstrip() + "\n"


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return "```text\n" + formatter.format_help().strip() + "\n```"


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """One list per argument group (options, model, tuning, ...), one item per option."""
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    lines: list[str] = []
    for group in parser._action_groups:
        shown = [action for action in group._group_actions
                 if action.help != argparse.SUPPRESS and not isinstance(action, argparse._SubParsersAction)]
        if not shown:
            continue
        lines += ["", f"**{group.title}**", ""]
        for action in shown:
            lines.append(f"- `{_invocation(action)}`: {_text(_expanded_help(formatter, action))}{_choices(action)}")
    return lines


def _invocation(action: argparse.Action) -> str:
    """`--flag VALUE` (or `--a, --b`), as --help spells it, values included."""
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar if action.metavar is not None else action.dest.upper()
    value = " ".join(metavar) if isinstance(metavar, tuple) else metavar
    if action.choices is not None and action.metavar is None:
        value = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return ", ".join(f"{option} {value}" for option in action.option_strings)


def _expanded_help(formatter: argparse.HelpFormatter, action: argparse.Action) -> str:
    return formatter._expand_help(action) if action.help else ""


def _choices(action: argparse.Action) -> str:
    """The closed set of values, where the flag's own spelling does not show it."""
    if action.choices is None or action.metavar is None:
        return ""
    return " One of: " + ", ".join(f"`{choice}`" for choice in action.choices) + "."


def _text(help_text: str) -> str:
    """Help text as Markdown prose: HTML's special characters and Markdown's emphasis and link
    brackets escaped; backquoted code kept as code."""
    parts = re.split(r"(`[^`]*`)", " ".join(help_text.split()))
    return "".join(part if part.startswith("`") else re.sub(r"([*_\[\]\\])", r"\\\1", html.escape(part, quote=False))
                   for part in parts)


if __name__ == "__main__":
    print(markdown(), end="")
