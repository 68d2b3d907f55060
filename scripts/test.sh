#!/usr/bin/env bash
# The test command of the README: set up (no-op when done) and run every test, slow ones included.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# one worker per core, one thread per worker: two 2-thread PyTorch processes on 2 cores ran 25x slower than one
# (OpenMP oversubscription). On 2 cores 1,692 tests took 20 to 38 min this way (2026-12-07).
# Arguments after these replace them (`bash scripts/test.sh -n 0` runs in one process).
# At most 4 workers (PYTEST_WORKERS overrides): each holds its own PyTorch and test models in memory.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
workers="${PYTEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(4, os.cpu_count() or 1))')}"
.venv/bin/python -m pytest -n "$workers" "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
exit "$status"
