#!/usr/bin/env bash
# (Re)writes the committed golden files testdata/golden/{texts,tokens,minilm,sentiment,pair_tokens,
# reranker,layouts}.json
# from a built model repository, independently of make:
#   usage: scripts/golden.sh GOLDEN_VENV MODELS_DIR
# e.g.  scripts/golden.sh ~/.cache/ortserve/venv/<sha256(requirements-golden.txt)[:12]> ~/.cache/ortserve/models/current
# GOLDEN_VENV is scripts/venv.sh --golden's (torch + sentence-transformers; the build's venv has no
# torch). Runs scripts/models/reference.py (torch + onnxruntime on the CPU, offline) and prints
# the ORT-vs-torch differences, and the change against the previous files, as JSON on stdout;
# writes nothing unless onnxruntime agrees with torch (reference.GOLDEN_CHECKS).
set -euo pipefail
ME=golden
die() { echo "$ME: error: $*" >&2; exit 1; }

VENV=${1:?usage: golden.sh VENV MODELS_DIR}
MODELS=${2:?usage: golden.sh VENV MODELS_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=$(dirname "$HERE")/testdata/golden
[[ -x $VENV/bin/python ]] || die "no venv at $VENV (run scripts/venv.sh --golden $VENV)"
"$VENV/bin/python" -c 'import torch, sentence_transformers' 2>/dev/null \
  || die "$VENV has no torch + sentence-transformers: it is the build's venv, not the golden one (scripts/venv.sh --golden)"
[[ -f $MODELS/sentiment/fp32.onnx ]] || die "no built models at $MODELS (run scripts/build-models.sh)"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# torch/OpenMP threads spin-wait by default and starve ORT and BLAS on small machines.
export OMP_WAIT_POLICY=PASSIVE
export PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export HF_HOME=$W/hf-home
args=(--models "$MODELS" --out "$W/golden")
[[ -d $DEST ]] && args+=(--compare "$DEST")
"$VENV/bin/python" "$HERE/models/reference.py" "${args[@]}" || die "reference.py failed"
mkdir -p "$DEST"
cp "$W"/golden/*.json "$DEST"/
echo "$ME: wrote $DEST" >&2
