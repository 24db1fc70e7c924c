#!/usr/bin/env bash
# ortserve against peer servers with the same harness (`server bench`), pinning, model and
# texts (`make bench-peers`; docs/performance.md, "Peers"):
#   usage: scripts/bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR
# The peers, each serving TEI's POST /embed for one ONNX file of the model, with no batching:
#   hugot    a Go + ONNX Runtime server on knights-analytics/hugot v0.6.1 (bench/peers/hugot, its
#            own Go module; built here into bin/hugot-peer, with CGO_LDFLAGS=-L<libtokenizers.a dir>)
#   fastapi  FastAPI + onnxruntime, one uvicorn worker (scripts/peers/fastapi_peer.py, in the
#            pinned venv PEERS_VENV made here from scripts/peers/requirements.txt)
# For each version: the raw ONNX Runtime limit at batch 1 on the server's core
# (`server bench --offline`), measured again before each server and after the last, so that each
# server's ratio is to the raw limits around it; then each server alone, pinned to that core, checked to give
# ortserve's vectors (cosine ≥ PEERS_MIN_COSINE), searched for its highest rate at the SLO with
# each arrival process and measured at a low fixed rate, by `server bench` pinned to the other
# core. Writes OUT_DIR/peers.md and peers.json, and every bench report under OUT_DIR/raw/.
# ortserve runs with its default settings: only --models, --ort-lib and --addr are passed, and
# ORTSERVE_* variables are cleared for it.
#
# Settings (environment), with their defaults:
#   ORTSERVE_ORT_LIB, ORTSERVE_MODELS   the ORT library and model repository (the Makefile's RUN_ENV)
#   PEERS_MODELS=$ORTSERVE_MODELS  PEERS_MODEL=minilm  PEERS_VERSIONS="fp32 int8"
#   PEERS_SERVERS="ortserve hugot fastapi"  PEERS_CORES="1 0" (server core, generator core)
#   PEERS_SLO=p95=50ms  PEERS_ARRIVALS="constant poisson"  PEERS_LOW_RATE=40
#   PEERS_STEP=4s  PEERS_WARMUP=1s  PEERS_SEARCH_STEPS=8  PEERS_SEARCH_START=auto (raw limit / 4)
#   PEERS_SEARCH_RESOLUTION=0.05 (bisect until the bracket is within 5%)
#   PEERS_MIN_REQUESTS=1000 (a search step lasts PEERS_STEP, or longer until it spans this many
#   requests: a p95 from a 4 s step near capacity strays by tens of ms; 0: PEERS_STEP only;
#   the low-rate step always lasts PEERS_STEP)
#   PEERS_SEARCH_CONFIRM=1 (a search step that fails the SLO without saturating is measured
#   once more before its rate counts as failed: one stall of the host then does not end a search)
#   PEERS_OFFLINE_STEP=3s  PEERS_MIN_COSINE=0.999  PEERS_CALL_TIMEOUT=600 (s, each bench run)
# With the defaults a run takes about 20 minutes. Exit 2 if taskset (util-linux) is missing.
set -euo pipefail
ME=bench-peers
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

SERVER=${1:?usage: bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR}
VENV=${2:?usage: bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR}
OUT=${3:?usage: bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR}
command -v taskset >/dev/null || { echo "$ME: taskset not found: install util-linux (Debian: apt-get install util-linux)" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/lib/pyvenv.sh"
ORT_LIB=${ORTSERVE_ORT_LIB:?set ORTSERVE_ORT_LIB to the ONNX Runtime library (make bench-peers does)}
MODELS=${PEERS_MODELS:-${ORTSERVE_MODELS:?set PEERS_MODELS or ORTSERVE_MODELS to the model repository (make bench-peers does)}}
MODEL=${PEERS_MODEL:-minilm}
VERSIONS=${PEERS_VERSIONS:-fp32 int8}
SERVERS=${PEERS_SERVERS:-ortserve hugot fastapi}
read -r SCORE GCORE _ <<<"${PEERS_CORES:-1 0}"
SLO=${PEERS_SLO:-p95=50ms}
ARRIVALS=${PEERS_ARRIVALS:-constant poisson}
LOW_RATE=${PEERS_LOW_RATE:-40}
STEP=${PEERS_STEP:-4s}
WARMUP=${PEERS_WARMUP:-1s}
SEARCH_STEPS=${PEERS_SEARCH_STEPS:-8}
SEARCH_RESOLUTION=${PEERS_SEARCH_RESOLUTION:-0.05}
SEARCH_START=${PEERS_SEARCH_START:-auto}
MIN_REQUESTS=${PEERS_MIN_REQUESTS:-1000}
SEARCH_CONFIRM=${PEERS_SEARCH_CONFIRM:-1}
OFFLINE_STEP=${PEERS_OFFLINE_STEP:-3s}
MIN_COSINE=${PEERS_MIN_COSINE:-0.999}
CALL_TIMEOUT=${PEERS_CALL_TIMEOUT:-600}
GO=${GO:-go}

[[ -x $SERVER ]] || die "$SERVER is not built (make build)"
[[ -f $MODELS/$MODEL/model.yaml ]] || die "no $MODEL/model.yaml in $MODELS (make models, or set PEERS_MODELS)"
[[ -n ${SCORE:-} && -n ${GCORE:-} && $SCORE != "$GCORE" ]] || die "PEERS_CORES=\"${PEERS_CORES:-}\": want two different cores, the server's then the generator's, as \"1 0\""
for c in "$SCORE" "$GCORE"; do
  taskset -c "$c" true 2>/dev/null || die "cannot pin to core $c (PEERS_CORES): this machine allows $(taskset -cp $$ | sed 's/.*: //')"
done
[[ $MIN_REQUESTS =~ ^[0-9]+$ ]] || die "PEERS_MIN_REQUESTS=$MIN_REQUESTS: want a whole number of requests (0: off)"
[[ $SEARCH_CONFIRM =~ ^[0-9]+$ ]] || die "PEERS_SEARCH_CONFIRM=$SEARCH_CONFIRM: want a whole number of windows (0: off)"
for s in $SERVERS; do
  [[ $s == ortserve || $s == hugot || $s == fastapi ]] || die "PEERS_SERVERS: unknown server $s (ortserve, hugot, fastapi)"
done

# --- build the peers -------------------------------------------------------------------
if [[ " $SERVERS " == *" hugot "* ]]; then
  [[ ${CGO_LDFLAGS:-} == *-L* ]] || die "set CGO_LDFLAGS=-L<folder of libtokenizers.a> to build the hugot peer (make bench-peers does)"
  log "building bin/hugot-peer (bench/peers/hugot, hugot's ORT build tag)"
  (cd "$ROOT/bench/peers/hugot" && CGO_ENABLED=1 "$GO" build -trimpath -tags ORT,NODOWNLOAD -o "$ROOT/bin/hugot-peer" .) \
    || die "building the hugot peer failed"
fi
make_venv "$VENV" "$ROOT/scripts/peers/requirements.txt" 'fastapi, uvicorn, onnxruntime, tokenizers, numpy, yaml' \
  'FastAPI, uvicorn, onnxruntime, tokenizers: ~240 MB'
PY=$VENV/bin/python
HELP=$ROOT/scripts/peers/peers.py

RAW=$OUT/raw
rm -rf "$RAW" && mkdir -p "$RAW"
WORK=$(mktemp -d)
# ortserve serves a repository holding only the model measured, as each peer loads only it.
mkdir "$WORK/models" && ln -s "$(cd "$MODELS/$MODEL" && pwd)" "$WORK/models/$MODEL"
head -n 8 "$ROOT/bench/sentences.txt" >"$WORK/check.txt"
# ortserve's settings are its defaults: no ORTSERVE_* variable reaches the servers or bench.
CLEAN=(env)
while read -r v; do CLEAN+=(-u "$v"); done < <(compgen -e | grep '^ORTSERVE_' || true)

SRV=
stop_server() {
  [[ -n $SRV ]] || return 0
  kill -TERM "$SRV" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$SRV" 2>/dev/null || true
  wait "$SRV" 2>/dev/null || true
  SRV=
}
trap 'stop_server; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server NAME VERSION FILE MAXLEN PORT: the server alone on the server core, in the background.
start_server() {
  local name=$1 ver=$2 file=$3 maxlen=$4 port=$5 logf=$RAW/$2-$1.log
  case $name in
    ortserve)
      "${CLEAN[@]}" taskset -c "$SCORE" "$SERVER" serve --models "$WORK/models" --ort-lib "$ORT_LIB" \
        --addr "127.0.0.1:$port" >"$logf" 2>&1 & ;;
    hugot)
      "${CLEAN[@]}" taskset -c "$SCORE" "$ROOT/bin/hugot-peer" --model-dir "$MODELS/$MODEL" --onnx "$file" \
        --ort-lib "$ORT_LIB" --addr "127.0.0.1:$port" >"$logf" 2>&1 & ;;
    fastapi)
      "${CLEAN[@]}" PEER_MODEL_DIR="$MODELS/$MODEL" PEER_ONNX="$file" PEER_MAX_LENGTH="$maxlen" \
        taskset -c "$SCORE" "$PY" -m uvicorn fastapi_peer:app --app-dir "$ROOT/scripts/peers" \
        --host 127.0.0.1 --port "$port" --workers 1 --no-access-log --log-level warning >"$logf" 2>&1 & ;;
  esac
  SRV=$!
  "$PY" "$HELP" wait "http://127.0.0.1:$port" 180 "$SRV" || { tail -n 20 "$logf" >&2; die "$name did not come up: see $logf"; }
}

# bench_run NAME ARGS...: `server bench` on the generator core, its report in RAW/NAME.json.
bench_run() {
  local name=$1; shift
  "${CLEAN[@]}" timeout --foreground "$CALL_TIMEOUT" taskset -c "$GCORE" "$SERVER" bench "$@" --step "$STEP" --warmup "$WARMUP" \
    --quiet --json "$RAW/$name.json" >"$RAW/$name.txt" 2>&1 || { tail -n 20 "$RAW/$name.txt" >&2; die "bench $name failed: see $RAW/$name.txt"; }
}

# The most load applied, in minutes, when STEP and WARMUP are whole seconds ("4s") and steps
# are not lengthened to MIN_REQUESTS (which makes a search's length depend on its rates).
most=
steps="$STEP steps"
(( MIN_REQUESTS > 0 )) && steps="search steps of $STEP or $MIN_REQUESTS requests, whichever is longer,"
if (( MIN_REQUESTS == 0 )) && [[ $STEP =~ ^([0-9]+)s$ ]] && step_s=${BASH_REMATCH[1]} && [[ $WARMUP =~ ^([0-9]+)s$ ]]; then
  most="; at most ~$(( $(wc -w <<<"$VERSIONS") * $(wc -w <<<"$SERVERS") * ($(wc -w <<<"$ARRIVALS") * SEARCH_STEPS + 1) * (step_s + BASH_REMATCH[1]) / 60 + 1 )) min of load"
fi
log "$MODEL ${VERSIONS// /, } × ${SERVERS// /, }: servers on core $SCORE, generator on core $GCORE; $SLO, arrivals ${ARRIVALS// /, }, $steps after $WARMUP of warm-up (at most $SEARCH_STEPS a search), then $LOW_RATE rps$most"

# --- the raw limit: ONNX Runtime on the server core, batch 1 ----------------------------
# offline NAME VERSIONS: `server bench --offline` of VERSIONS (comma-separated) on the server
# core, its report in RAW/NAME.json.
offline() {
  "${CLEAN[@]}" ORTSERVE_MODELS="$MODELS" ORTSERVE_ORT_LIB="$ORT_LIB" timeout --foreground "$CALL_TIMEOUT" taskset -c "$SCORE" \
    "$SERVER" bench --offline --model "$MODEL" --versions "$2" --offline-batches 1 \
    --offline-step "$OFFLINE_STEP" --quiet --json "$RAW/$1.json" >"$RAW/$1.txt" 2>&1 \
    || { cat "$RAW/$1.txt" >&2; die "server bench --offline failed"; }
}
log "raw ONNX Runtime limit on core $SCORE, batch 1 (server bench --offline)"
offline offline "$(tr ' ' , <<<"$VERSIONS")"
cat "$RAW/offline.txt" >&2

# --- each version, each server alone ------------------------------------------------------
for ver in $VERSIONS; do
  read -r file maxlen < <("$PY" "$HELP" model-file "$MODELS/$MODEL" "$ver") || true
  [[ -n ${file:-} ]] || die "$MODEL has no version $ver (PEERS_VERSIONS)"
  start=$SEARCH_START
  if [[ $start == auto ]]; then
    start=$("$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
v = [v for v in r["runs"][0]["versions"] if v["version"] == sys.argv[2]][0]
print(max(1, round(v["offline"][0]["items_per_s"] / 4)))' "$RAW/offline.json" "$ver")
  fi
  for name in $SERVERS; do
    # The raw limit again, just before each server and once after the last: the host's speed
    # drifts over a run, so each server's ratio is to the raw limits measured around it.
    offline "offline-$ver-before-$name" "$ver"
    port=$(free_port)
    url=http://127.0.0.1:$port
    log "$ver: $name ($file) on core $SCORE, port $port"
    start_server "$name" "$ver" "$file" "$maxlen" "$port"
    # The same answers first: a table of servers that disagree would compare different work.
    "$PY" "$HELP" embed "$url" "$MODEL" "$ver" "$WORK/check.txt" "$RAW/$ver-$name-vectors.json"
    if [[ $name == ortserve ]]; then
      cp "$RAW/$ver-$name-vectors.json" "$WORK/$ver-reference.json"
    elif [[ -f $WORK/$ver-reference.json ]]; then
      "$PY" "$HELP" compare "$WORK/$ver-reference.json" "$RAW/$ver-$name-vectors.json" "$MIN_COSINE" "$RAW/$ver-$name-cosine.json" \
        || die "$name's $ver vectors are not ortserve's (cosine < $MIN_COSINE): see $RAW/$ver-$name-cosine.json"
    else
      log "$ver: no ortserve vectors to check $name against (ortserve is not in PEERS_SERVERS, or not first)"
    fi
    for arrival in $ARRIVALS; do
      log "$ver: $name, search for the highest rate at $SLO, $arrival arrivals, from $start rps"
      bench_run "$ver-$name-$arrival" --url "$url" --model "$MODEL" --versions "$ver" --route /embed \
        --slo "$SLO" --arrival "$arrival" --search-steps "$SEARCH_STEPS" --search-start "$start" \
        --search-resolution "$SEARCH_RESOLUTION" --min-requests "$MIN_REQUESTS" --search-confirm "$SEARCH_CONFIRM"
    done
    log "$ver: $name at $LOW_RATE rps, constant arrivals"
    bench_run "$ver-$name-low" --url "$url" --model "$MODEL" --versions "$ver" --route /embed \
      --rate "$LOW_RATE" --arrival constant
    stop_server
  done
  offline "offline-$ver-after" "$ver"
done

"$PY" "$HELP" table "$RAW" "$OUT" model="$MODEL" versions="$VERSIONS" servers="$SERVERS" arrivals="$ARRIVALS" \
  slo="$SLO" low_rate="$LOW_RATE" step="$STEP" warmup="$WARMUP" search_steps="$SEARCH_STEPS" search_resolution="$SEARCH_RESOLUTION" min_requests="$MIN_REQUESTS" search_confirm="$SEARCH_CONFIRM" \
  server_core="$SCORE" generator_core="$GCORE" min_cosine="$MIN_COSINE"
log "wrote $OUT/peers.md and $OUT/peers.json"
