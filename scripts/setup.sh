#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with hf_langspec and the exact versions of
# requirements/lock.txt (every dependency, direct or not: what the tests last passed with).
# PyTorch: the lock's CPU build by default; TORCH_SPEC / TORCH_INDEX_URL choose another build (a CUDA one on a
# GPU machine), and the rest of the lock still applies. A venv made earlier is brought to the lock's versions.
# Refresh the lock: python3 scripts/compat_matrix.py newest --write-lock
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
LOCK=requirements/lock.txt
TORCH_SPEC="${TORCH_SPEC:-$(grep '^torch==' "$LOCK")}"
[ -x .venv/bin/python ] || { "$PYTHON" -m venv .venv && .venv/bin/python -m pip install -q --upgrade pip; }
# torch comes from TORCH_SPEC, so its line leaves the constraints (a CUDA build would conflict with it)
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
grep -v '^torch==' "$LOCK" >"$constraints"
# torch first: a plain `torch` requirement would pull several GB of CUDA packages. TORCH_INDEX_URL is an extra
# index, so torch's own dependencies still resolve to the lock's versions on PyPI (a build with a local label,
# 2.13.0+cpu, is preferred over the registry's 2.13.0).
.venv/bin/python -m pip install -q -c "$constraints" ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
.venv/bin/python -m pip install -q -c "$constraints" -e ".[dev,eval,export,serve,docs]"
.venv/bin/python -c "import torch, transformers, hf_langspec; print('hf_langspec', hf_langspec.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
