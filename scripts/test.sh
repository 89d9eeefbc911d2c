#!/usr/bin/env bash
# Sets up .venv (see setup.sh), checks the architecture (import-linter: each layer imports only
# from the layers below it; mypy: the type hints hold), then runs the test suite on
# pytest-xdist workers, one a CPU this machine lends it (scripts/xdist_workers.py; 1.7x faster
# than one process on 2 cores); extra arguments go to pytest after it (`-n 0` runs in one
# process). Exits non-zero when a check or a test fails, or when no test ran.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" || exit 1
cd "$root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
echo "test.sh: import contracts (lint-imports)" >&2
if ! contracts="$("$root/.venv/bin/lint-imports" --no-cache 2>&1)"; then
    echo "$contracts"
    exit 1
fi
echo "test.sh: type check (mypy gpu_neighbors)" >&2
"$root/.venv/bin/mypy" || exit 1
workers="$("$root/.venv/bin/python" "$root/scripts/xdist_workers.py")" || exit 1
"$root/.venv/bin/python" -m pytest -n "$workers" "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests" >&2
    exit 1
fi
exit "$status"
