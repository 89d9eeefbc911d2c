#!/usr/bin/env bash
# Builds the documentation site into site/ (MkDocs with mkdocstrings; mkdocs.yml), warnings as
# errors: the command-line reference is written from the parser, the API reference from the
# docstrings of every public name. Sets up .venv first (setup.sh installs the docs extra).
# Extra arguments go to `mkdocs build` (e.g. --site-dir DIR); `mkdocs serve` previews it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$root/.venv/bin/python" -m mkdocs build --strict "$@"
