#!/usr/bin/env bash
# The first CUDA run (issue 31, part 4) as ONE call of the device tool, everything in order of
# what matters most, each step writing its results to $OUT before the next starts:
#   collect (every test collected), parity (every kernel and estimator, CPU against CUDA;
#   predict_ids and rewards under set_sync_debug_mode("error")), tests (the suite on CUDA,
#   pytest-xdist workers, JUnit XML and failures.md as it goes, stopped at --timeout),
#   throughput (bench/gpu_throughput.py: the targets' figures beside the device's measured
#   ceilings, a line of throughput.jsonl each). `bench` (run_all.py) needs a call of its own.
#
# Here first, beside ../shared (or with GPU_NEIGHBORS_SHARED), with network:
#     bash scripts/gpu_check.sh prepare
# then the device tool, once:
#     run(command="bash scripts/gpu_device_check.sh", carry=[".gpu", "bench/.tensorbleu"], timeout_s=600)
# The steps share BUDGET seconds (default 555: a 600 s call less the copy of what comes back);
# one that cannot start with a minute left is named as not started. $OUT gets 8 files at most:
# check.json, check.md, junit.xml, failures.md, pytest.log, throughput.jsonl, throughput.log, device.log
# (this script's own output: the machine, the pack and each step's line).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:?the device tool sets OUT}"
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || echo "no nvidia-smi"
    python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())'
    nproc
} 2>&1 | tee "$out/device.log"
bash "$root/scripts/gpu_check.sh" ${STEPS:-collect parity tests throughput} --device "${DEVICE:-cuda}" \
    --budget "${BUDGET:-555}" --timeout "${STEP_TIMEOUT:-240}" --workers "${WORKERS:-12}" \
    2>&1 | tee -a "$out/device.log"  # small: the children's output goes to their own logs
