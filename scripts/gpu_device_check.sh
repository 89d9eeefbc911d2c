#!/usr/bin/env bash
# The CUDA check as ONE call of the device tool, everything in order of what matters most, each
# step writing its results to $OUT before the next starts:
#   collect (every test collected), parity (every kernel and estimator, CPU against CUDA;
#   predict_ids and rewards under set_sync_debug_mode("error"); fluency in float32 and bfloat16), tests (the suite on CUDA,
#   pytest-xdist workers, JUnit XML and failures.md as it goes, stopped at --timeout),
#   throughput (bench/gpu_throughput.py: the targets' figures beside the device's measured
#   ceilings, a line of throughput.jsonl each). `bench` (run_all.py) needs a call of its own.
#
# Here first, beside ../shared (or with GPU_NEIGHBORS_SHARED), with network:
#     bash scripts/gpu_check.sh prepare
# then the device tool, the first call (everything, about 420 s of the call's 600):
#     run(command="bash scripts/gpu_device_check.sh", carry=[".gpu", "bench/.tensorbleu"], timeout_s=480)
# and, in what is left of a session's 15 device-minutes, a second, correctness-only call:
#     run(command="STEPS='parity tests' BUDGET=240 bash scripts/gpu_device_check.sh", carry=[...], timeout_s=300)
# The clock starts here, before the pack's installs and Python's start-up: the steps end
# BUDGET seconds (default 420) after this script began, less what writing the results takes; a
# step that cannot start with a minute left is named as not started. $OUT gets 8 files at most:
# check.json, check.md, junit.xml, failures.md, pytest.log, throughput.jsonl, throughput.log,
# device.log (this script's own output: the machine, the pack and each step's line).
set -uo pipefail
started="$(date +%s)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:?the device tool sets OUT}"
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || echo "no nvidia-smi"
    python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())'
    nproc
} 2>&1 | tee "$out/device.log"
bash "$root/scripts/gpu_check.sh" ${STEPS:-collect parity tests throughput} --device "${DEVICE:-cuda}" \
    --deadline "$((started + ${BUDGET:-420}))" --timeout "${STEP_TIMEOUT:-240}" --workers "${WORKERS:-12}" \
    2>&1 | tee -a "$out/device.log"  # small: the children's output goes to their own logs
