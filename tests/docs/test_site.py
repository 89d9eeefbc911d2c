"""The documentation site builds with warnings as errors (a broken link or anchor, a page missing
from the nav, a docstring that does not render), and the built reference pages hold every public
name and every command-line flag. Needs the `docs` extra (MkDocs, mkdocstrings)."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import gpu_neighbors
from snippets import ROOT
from test_reference import commands

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs, mkdocstrings[python]) is not installed")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra (mkdocstrings[python]) is not installed")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                            str(ROOT / "mkdocs.yml"), "--site-dir", str(folder)],
                           cwd=ROOT, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "WARNING" not in built.stderr, built.stderr[-3000:]
    return folder


def test_every_public_name_has_its_entry(site):
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert [name for name in gpu_neighbors.__all__ if f'id="gpu_neighbors.{name}"' not in page] == []


def test_every_command_and_flag_is_in_the_reference(site):
    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    absent = [f"{name} {flag}" for name, command in commands().items()
              for action in command._actions if not isinstance(action, argparse._HelpAction)
              for flag in action.option_strings if flag not in page]
    assert [name for name in commands() if f'id="{name}"' not in page] == [] and absent == []
