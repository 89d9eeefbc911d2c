#!/usr/bin/env bash
# Sets up .venv (see setup.sh) and runs the test suite; extra arguments go to pytest.
# Exits non-zero when a test fails or when no test ran.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" || exit 1
cd "$root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$root/.venv/bin/python" -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests" >&2
    exit 1
fi
exit "$status"
