#!/usr/bin/env bash
# Start-up and memory of ortserve and its peers (`make footprint`; docs/performance.md,
# "Footprint"):
#   usage: scripts/footprint.sh SERVER_BIN PEERS_VENV OUT_DIR
# Each server is spawned unpinned, and timed from the spawn to its first 200 from POST /embed;
# then 300 requests (one short text each, 4 clients) and its resident memory (VmRSS of the
# process and its children) read after them. The servers, rounds alternated:
#   ortserve-1, ortserve-2  one fp32 MiniLM folder (`--model DIR`), --sessions 1 and 2, the
#                           calibration cache empty: a first start
#   ortserve-2-restart      the same as ortserve-2 again, its calibration now cached
#   ortserve-default        `make run`'s repository (every default model and version), cache empty
#   ortserve-default-restart  the same again, calibration cached
#   hugot, fastapi          the peers of `make bench-peers` on the same fp32 file
# Writes OUT_DIR/footprint.md (median and range per server) and footprint.jsonl.
# Settings: ORTSERVE_ORT_LIB, ORTSERVE_MODELS (the Makefile's RUN_ENV); FOOTPRINT_REPEATS=3;
# FOOTPRINT_SERVERS (the list above). About 3 minutes with the defaults.
set -euo pipefail
ME=footprint
die() { echo "$ME: error: $*" >&2; exit 1; }
SERVER=${1:?usage: footprint.sh SERVER_BIN PEERS_VENV OUT_DIR}
VENV=${2:?usage: footprint.sh SERVER_BIN PEERS_VENV OUT_DIR}
OUT=${3:?usage: footprint.sh SERVER_BIN PEERS_VENV OUT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ORT_LIB=${ORTSERVE_ORT_LIB:?set ORTSERVE_ORT_LIB (make footprint does)}
MODELS=${ORTSERVE_MODELS:?set ORTSERVE_MODELS (make footprint does)}
REPEATS=${FOOTPRINT_REPEATS:-3}
SERVERS=${FOOTPRINT_SERVERS:-ortserve-1 ortserve-2 ortserve-2-restart ortserve-default ortserve-default-restart hugot fastapi}
[[ -x $SERVER ]] || die "$SERVER is not built (make build)"
PY=$VENV/bin/python
[[ " $SERVERS " != *" fastapi "* || -x $PY ]] || die "no peers venv at $VENV: run make bench-peers once, or leave fastapi out of FOOTPRINT_SERVERS"
if [[ " $SERVERS " == *" hugot "* && ! -x $ROOT/bin/hugot-peer ]]; then
  die "bin/hugot-peer is not built: run make bench-peers once, or leave hugot out of FOOTPRINT_SERVERS"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
# One fp32 MiniLM folder: the model's files and a model.yaml naming only fp32.
mkdir "$WORK/minilm"
ln -s "$MODELS/minilm/fp32.onnx" "$MODELS/minilm/tokenizer.json" "$WORK/minilm/"
sed -n '/^versions:/q;p' "$MODELS/minilm/model.yaml" >"$WORK/minilm/model.yaml"
printf 'versions:\n  fp32: {file: fp32.onnx}\n' >>"$WORK/minilm/model.yaml"
CLEAN=(env)
while read -r v; do CLEAN+=(-u "$v"); done < <(compgen -e | grep '^ORTSERVE_' || true)

# command NAME PORT: the argv that starts server NAME on PORT, one word a line.
command_of() {
  local port=$2 cache=$WORK/calibration-$1
  case $1 in
    ortserve-1) rm -rf "$cache"; printf '%s\n' "$SERVER" serve --model "$WORK/minilm" --sessions 1 ;;
    ortserve-2) rm -rf "$cache"; printf '%s\n' "$SERVER" serve --model "$WORK/minilm" --sessions 2 ;;
    ortserve-2-restart) cache=$WORK/calibration-ortserve-2; printf '%s\n' "$SERVER" serve --model "$WORK/minilm" --sessions 2 ;;
    ortserve-default) rm -rf "$cache"; printf '%s\n' "$SERVER" serve --models "$MODELS" ;;
    ortserve-default-restart) cache=$WORK/calibration-ortserve-default; printf '%s\n' "$SERVER" serve --models "$MODELS" ;;
    hugot) printf '%s\n' "$ROOT/bin/hugot-peer" --model-dir "$MODELS/minilm" --onnx fp32.onnx --ort-lib "$ORT_LIB" ;;
    fastapi) printf '%s\n' "$PY" -m uvicorn fastapi_peer:app --app-dir "$ROOT/scripts/peers" --host 127.0.0.1 \
      --port "$port" --workers 1 --no-access-log --log-level warning; return ;;
    *) die "FOOTPRINT_SERVERS: unknown server $1" ;;
  esac
  [[ $1 == hugot ]] || printf '%s\n' --ort-lib "$ORT_LIB" --calibration-cache "$cache" --reload-interval 0
  printf '%s\n' --addr "127.0.0.1:$port"
}

: >"$OUT/footprint.jsonl"
for rep in $(seq "$REPEATS"); do
  for name in $SERVERS; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mapfile -t argv < <(command_of "$name" "$port")
    "${CLEAN[@]}" PEER_MODEL_DIR="$MODELS/minilm" PEER_ONNX="$MODELS/minilm/fp32.onnx" PEER_MAX_LENGTH=256 \
      python3 "$ROOT/scripts/peers/footprint.py" "$name" "$port" "${argv[@]}" >>"$OUT/footprint.jsonl" \
      || die "$name: see the lines above"
    tail -n 1 "$OUT/footprint.jsonl" >&2
  done
done
python3 "$ROOT/scripts/peers/footprint.py" --report "$OUT/footprint.jsonl" >"$OUT/footprint.md"
cat "$OUT/footprint.md"
