#!/usr/bin/env bash
# Sets up .venv (see setup.sh) and runs the main job on the shipped example: scores
# examples/candidates.txt against the scored headlines in examples/train.jsonl, then shows how
# well the estimator agrees with the known scores (leave-one-out).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
mkdir -p out
.venv/bin/gpu-neighbors fit --train examples/train.jsonl --save out/example_scorer --overwrite
.venv/bin/gpu-neighbors score --scorer out/example_scorer --candidates examples/candidates.txt \
    --output out/example_scores.jsonl --overwrite
echo "--- out/example_scores.jsonl"
cat out/example_scores.jsonl
echo "--- leave-one-out on examples/train.jsonl"
.venv/bin/gpu-neighbors evaluate --data examples/train.jsonl
