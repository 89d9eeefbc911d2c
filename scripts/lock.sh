#!/usr/bin/env bash
# Refreshes requirements.lock: rebuilds .venv from the newest releases that pyproject.toml's
# ranges allow (the project with its dev extra: what the tests, examples and docs use), writes their
# exact versions to requirements.lock, then runs the suite (scripts/test.sh) on them. Use it to
# take newer packages or after changing a dependency; commit the lock when the suite passes
# (`git checkout requirements.lock && bash scripts/setup.sh` goes back when it does not).
# Extra arguments go to scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"

echo "lock: rebuilding $venv from the newest releases" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
# torch first, pinned: a bare "torch" requirement resolves to a multi-GB CUDA build, while
# 2.13.0 is the CPU build this machine keeps on disk (within the package's range).
"$venv/bin/pip" install --quiet "torch==2.13.0"
# The build's own requirements (pyproject.toml's build-system) in the environment and the lock,
# so that setup.sh builds the compiled loops with the locked Cython, not the newest of the day.
"$venv/bin/pip" install --quiet "setuptools>=68" "Cython>=3.0"
"$venv/bin/pip" install --quiet --no-build-isolation -e "$root[dev]"
{
    echo "# The environment the suite passes in (Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'), $(uname -m)): every package at its exact"
    echo "# version. Written by scripts/lock.sh from the newest releases pyproject.toml allows (its dev"
    echo "# extra: what the suite, the examples and the docs use); installed by scripts/setup.sh. Users"
    echo "# of the package get pyproject.toml's ranges instead."
    "$venv/bin/pip" freeze --all --exclude-editable --disable-pip-version-check | grep -v '^pip==' | LC_ALL=C sort -f
} > "$root/requirements.lock"
echo "lock: wrote requirements.lock ($(grep -vc '^#' "$root/requirements.lock") packages); running the suite" >&2
exec bash "$root/scripts/test.sh" "$@"  # its set-up installs the lock into .venv: nothing new
