#!/usr/bin/env bash
# Builds the model repository the server loads:
#   usage: scripts/build-models.sh VENV DATA_DIR MODELS_DIR
#   MODELS_DIR/minilm/     model.yaml tokenizer.json fp32.onnx int8.onnx int8-static.onnx fp16.onnx gate.csv
#   MODELS_DIR/sentiment/  model.yaml tokenizer.json fp32.onnx int8.onnx int8-static.onnx fp16.onnx gate.csv head.json
#     gate.csv is DATA_DIR/test.csv (pinned below), the data of model.yaml's `gate:` section
#     that `server gate` checks new versions against (scripts/models/build.py GATE)
#   MODELS_DIR/reranker/   model.yaml tokenizer.json fp32.onnx int8.onnx   (task: rerank; a cross-encoder,
#     MiniLM + one-logit head fine-tuned on topical-overlap pairs of DATA_DIR/train.csv, in numpy)
#   MODELS_DIR/layouts/    the same models as users have them, no model.yaml (scripts/models/layouts.py):
#     sentence-transformers/ optimum/ hub/models--ortserve--minilm/ (the minilm encoder),
#     sentiment-hf/ cross-encoder/ (HF BertForSequenceClassification folders), odd-outputs/
#     (minilm with a renamed output and two extra ones), splade/ (a SPLADE SparseEncoder:
#     BertForMaskedLM + SpladePooling) and dense/ (minilm with a Dense module; scripts/models/sparse.py);
#     ONNX files are hard links where the
#     graph is one built above
#   MODELS_DIR/golden/     the onnxruntime side of the golden files of this build; the build fails unless
#     its graphs reproduce the committed torch references in testdata/golden (scripts/models/reference.py)
#   MODELS_DIR/report.json, report.md   accuracies, cosine stats, alone-vs-batched invariance, sizes, timings
#   MODELS_DIR/.stamp      written last; $(dirname MODELS_DIR)/current -> MODELS_DIR
# VENV comes from scripts/venv.sh (no torch), DATA_DIR from scripts/fetch-data.sh. The work is done
# by scripts/models/build.py in a staging directory that is renamed to MODELS_DIR when every
# sanity check passed. Offline: nothing is downloaded (HF_HUB_OFFLINE=1).
# ORTSERVE_GOLDEN_REGENERATE=1 (make golden, which then rewrites testdata/golden from this build
# with torch) reports differences from the committed golden files instead of failing on them.
set -euo pipefail
ME=build-models
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

VENV=${1:?usage: build-models.sh VENV DATA_DIR MODELS_DIR}
DATA=${2:?usage: build-models.sh VENV DATA_DIR MODELS_DIR}
OUT=${3:?usage: build-models.sh VENV DATA_DIR MODELS_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# The split the models are trained and evaluated on (same pins as fetch-data.sh; repeated here
# so that a different split also changes MODELS_DIR's key).
DATA_PINS="train.csv:c229f174b1ec2126ecaba987f22521b0d7e330347149487206c279856d1547ba
val.csv:9dd5e5938139f3a3f637522217bec252b389af5b6f27af87386fe0be2cc3633d
test.csv:7f7c3c5593a8f02293234ad03de2893c4ea5b52b944a2c193e65527f60275c4b"

link_current() { ln -sfn "$(basename "$OUT")" "$(dirname "$OUT")/current.tmp" && mv -Tf "$(dirname "$OUT")/current.tmp" "$(dirname "$OUT")/current"; }

if [[ -f $OUT/.stamp ]]; then
  link_current
  exit 0
fi
[[ -x $VENV/bin/python && -f $VENV/.stamp ]] || die "no venv at $VENV (run scripts/venv.sh $VENV)"
for p in $DATA_PINS; do
  f=$DATA/${p%%:*}
  [[ -f $f ]] || die "missing $f (run scripts/fetch-data.sh $DATA)"
  [[ $(sha256sum "$f" | cut -d' ' -f1) == "${p#*:}" ]] || die "$f does not match its pinned sha256"
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# OpenMP threads spin-wait by default and starve ORT and BLAS on small machines; PASSIVE makes
# them sleep instead (docs/performance.md, "Figures behind constants").
export OMP_WAIT_POLICY=PASSIVE
# ORTSERVE_BUILD_THREADS (build.py's ORT sessions) bounds numpy's OpenBLAS and OpenMP too.
if [[ -n ${ORTSERVE_BUILD_THREADS:-} ]]; then
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$ORTSERVE_BUILD_THREADS} OMP_NUM_THREADS=${OMP_NUM_THREADS:-$ORTSERVE_BUILD_THREADS}
fi
export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore

STAGE=$OUT.partial
rm -rf "$STAGE" "$OUT"
mkdir -p "$STAGE"
HF_HOME=$(mktemp -d)   # an empty hub cache: nothing can come from the user's
export HF_HOME
trap 'rm -rf "$HF_HOME"' EXIT
log "building $OUT (write graphs, train, quantize, evaluate; ~4 min on 2 cores)"
start=$SECONDS
regen=()
[[ ${ORTSERVE_GOLDEN_REGENERATE:-} == 1 ]] && regen=(--golden-regenerate)
"$VENV/bin/python" "$HERE/models/build.py" --data "$DATA" --out "$STAGE" \
    --compare-golden "$REPO/testdata/golden" "${regen[@]}" || die "model build failed (staging dir kept: $STAGE)"
mv -T "$STAGE" "$OUT"
date -u +%FT%TZ > "$OUT/.stamp"
link_current
log "ready: $OUT ($((SECONDS - start)) s); report: $OUT/report.md"
