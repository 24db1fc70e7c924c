#!/usr/bin/env bash
# Adds a version to a model folder of a model repository, made from one of its versions:
#   usage: scripts/quantize.sh VENV MODEL_DIR NAME MODE [--from VERSION] [options]
#   MODE int8          quantize_dynamic, QInt8 weights   [--per-channel] [--reduce-range]
#   MODE int8-static   quantize_static, calibrated QDQ: the same answer alone or batched
#                      --data DIR (with train.csv)  [--calibration MinMax|Percentile|Entropy] [--calibration-texts N]
#   MODE fp16          convert_float_to_float16(keep_io_types)
#   MODE noise         a damaged copy for testing the gate: weights × (1 + scale·N(0,1))  [--scale S] [--seed N]
#   MODE swap-labels   a damaged copy for testing the gate: the classifier's labels swapped
# Writes MODEL_DIR/NAME.onnx and adds NAME under versions: in MODEL_DIR/model.yaml, never
# overwriting either (scripts/models/quantize.py says how a running server is kept from
# seeing half a file); --from defaults to the model's default_version. int8/int8-static/fp16 run
# scripts/models/quantize.py, noise/swap-labels scripts/models/damage.py. `make quantize`
# and `make damage` run this on a copy of the built repository.
set -euo pipefail
ME=quantize
die() { echo "$ME: error: $*" >&2; exit 1; }
USAGE="usage: quantize.sh VENV MODEL_DIR NAME int8|int8-static|fp16|noise|swap-labels [--from VERSION] [options]"

[[ $# -ge 4 ]] || die "$USAGE"
VENV=$1 DIR=$2 NAME=$3 MODE=$4
shift 4
HERE=$(cd "$(dirname "$0")" && pwd)
[[ -x $VENV/bin/python && -f $VENV/.stamp ]] || die "no venv at $VENV (run make venv)"
case $MODE in
  int8|int8-static|fp16) PY=$HERE/models/quantize.py ;;
  noise|swap-labels) PY=$HERE/models/damage.py ;;
  *) die "mode $MODE: use int8, int8-static, fp16, noise or swap-labels" ;;
esac

# Same environment as build-models.sh: offline, quiet, and OpenMP threads that do not spin.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_WAIT_POLICY=PASSIVE
export PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore
exec "$VENV/bin/python" "$PY" "$DIR" "$NAME" "$MODE" "$@"
