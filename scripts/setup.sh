#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with the CPU build of PyTorch and hf_langspec.
# TORCH_SPEC / TORCH_INDEX_URL choose another PyTorch build (e.g. a CUDA one on a GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first: a plain `torch` requirement would pull several GB of CUDA packages.
  .venv/bin/python -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
fi
.venv/bin/python -m pip install -q -e ".[dev,eval,export]"
.venv/bin/python -c "import torch, transformers, hf_langspec; print('hf_langspec', hf_langspec.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
