#!/usr/bin/env bash
# ortserve against peer servers with the same harness (`server bench`), pinning, model and
# texts (`make bench-peers`; docs/performance.md, "Peers"):
#   usage: scripts/bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR
# The servers, each serving TEI's POST /embed for one ONNX file of the model:
#   ortserve     the binary with its default settings: only --models, --ort-lib and --addr are
#                passed, and ORTSERVE_* variables are cleared for it
#   ortserve-b1  the same binary with --max-batch 1: ortserve without batching
#   hugot        a Go + ONNX Runtime server on knights-analytics/hugot v0.6.1, no batching
#                (bench/peers/hugot, its own Go module; built here into bin/hugot-peer, with
#                CGO_LDFLAGS=-L<libtokenizers.a dir>); it reads a copy of the model folder whose
#                tokenizer.json cuts at model.yaml's max_length, as ortserve does
#   fastapi      FastAPI + onnxruntime, one uvicorn worker, no batching
#                (scripts/peers/fastapi_peer.py, in the pinned venv PEERS_VENV made here from
#                scripts/peers/requirements.txt)
# Two workloads, one text a request, each with its own p95 target:
#   short     bench's built-in texts (bench/sentences.txt, 18 tokens at the median), p95 50 ms
#   passages  5 to 9 consecutive sentences of the Pang & Lee polarity data joined (about 175
#             tokens at the median; minilm cuts at 256), p95 200 ms
# The texts come in two sets (PEERS_TEXTS): "tuning", the set the server is tuned on
# (short: the built-in texts; passages: from train.csv), and "held-back", which no tuning uses,
# to confirm a result on texts never tuned on (short: the sentences of val.csv and test.csv;
# passages: joined from val.csv and test.csv). The texts sent are written to OUT_DIR/raw/texts-*.txt
# by `peers.py texts` (deterministic: a fixed seed and no RNG, the same file on any host).
# For each workload and version, PEERS_REPEATS rounds of every server in turn (A B C A B C …),
# each cell being: the raw ONNX Runtime limit at batch 1 on the server's core for the
# workload's texts (`server bench --offline`, measured before each cell and after the last, so
# that each cell's ratio is to the raw limits around it); the server alone, pinned to that
# core, checked in its first round to give ortserve's vectors (cosine ≥ PEERS_MIN_COSINE);
# searched for its highest rate at the workload's SLO with each arrival process; saturated by
# PEERS_CLIENTS closed-loop clients for one step; and measured at a low fixed rate, by
# `server bench` pinned to the other core. Writes OUT_DIR/peers.md and peers.json (medians and
# ranges over the repeats, ortserve's ratios to each other server), and every report under
# OUT_DIR/raw/. The host's CPU model and SIMD flags (lscpu) head both.
#
# Settings (environment), with their defaults (PEERS_QUICK=1's in brackets):
#   ORTSERVE_ORT_LIB, ORTSERVE_MODELS, ORTSERVE_DATA   the ORT library, model repository and
#                                       polarity data (the Makefile's RUN_ENV)
#   PEERS_MODELS=$ORTSERVE_MODELS  PEERS_MODEL=minilm  PEERS_VERSIONS="fp32 int8" [int8]
#   PEERS_SERVERS="ortserve ortserve-b1 hugot fastapi"  PEERS_CORES="1 0" (server core, generator core)
#   PEERS_WORKLOADS="short passages"  PEERS_TEXTS=tuning (or held-back)  PEERS_DATA=$ORTSERVE_DATA
#   PEERS_PASSAGE_SENTENCES=5-9 (sentences joined into a passage)  PEERS_REPEATS=3 [1]
#   PEERS_SLO_SHORT=p95=50ms (PEERS_SLO, its old name, too)  PEERS_SLO_PASSAGES=p95=200ms
#   PEERS_ARRIVALS=poisson (or "constant poisson")  PEERS_CLIENTS=16 (closed loop, saturation)
#   PEERS_LOW_RATE=40 (short)  PEERS_LOW_RATE_PASSAGES=5
#   PEERS_STEP=4s [1s]  PEERS_WARMUP=1s [500ms]  PEERS_SEARCH_STEPS=8 [4]
#   PEERS_SEARCH_START=auto (raw limit / 4)  PEERS_SEARCH_RESOLUTION=0.05 [0.2]
#   PEERS_MIN_REQUESTS=1000 [0] (short), PEERS_MIN_REQUESTS_PASSAGES=300 [0]: a search step lasts
#     PEERS_STEP, or longer until it spans this many requests (a p95 from a 4 s step near
#     capacity strays by tens of ms; 0: PEERS_STEP only; the other steps always last PEERS_STEP)
#   PEERS_SEARCH_CONFIRM=1 [0] (a search step that fails the SLO without saturating is measured
#     once more before its rate counts as failed: one stall of the host then does not end a search)
#   PEERS_OFFLINE_STEP=3s [1s]  PEERS_MIN_COSINE=0.999  PEERS_CALL_TIMEOUT=600 (s, each bench run)
# Run time: cells = workloads × versions × servers × repeats (2 × 2 × 4 × 3 = 48 by default).
# A cell takes a server start, an offline run (PEERS_OFFLINE_STEP and a model load), per arrival
# a search of at most PEERS_SEARCH_STEPS steps of PEERS_WARMUP + PEERS_STEP (longer where
# PEERS_MIN_REQUESTS asks: a passage search at 30 rps spends 10 s a step), and two more steps:
# about 1.5 min for short texts and 2.5 min for passages with the defaults, so about 1.5 hours
# in all, the script printing the least it will take at the start. PEERS_QUICK=1 (fewer, shorter
# steps, one repeat, int8 only) smoke-tests the whole path in a few minutes; its numbers mean
# little. Exit 2 if taskset or lscpu (util-linux) is missing.
set -euo pipefail
ME=bench-peers
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

SERVER=${1:?usage: bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR}
VENV=${2:?usage: bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR}
OUT=${3:?usage: bench-peers.sh SERVER_BIN PEERS_VENV OUT_DIR}
for t in taskset lscpu; do
  command -v $t >/dev/null || { echo "$ME: $t not found: install util-linux (Debian: apt-get install util-linux)" >&2; exit 2; }
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/lib/pyvenv.sh"
QUICK=${PEERS_QUICK:-0}
[[ $QUICK == 0 || $QUICK == 1 ]] || die "PEERS_QUICK=$QUICK: want 1 (a quick smoke test) or 0"
# dflt FULL QUICK: a setting's default, the quick one under PEERS_QUICK=1.
dflt() { if [[ $QUICK == 1 ]]; then echo "$2"; else echo "$1"; fi; }
ORT_LIB=${ORTSERVE_ORT_LIB:?set ORTSERVE_ORT_LIB to the ONNX Runtime library (make bench-peers does)}
MODELS=${PEERS_MODELS:-${ORTSERVE_MODELS:?set PEERS_MODELS or ORTSERVE_MODELS to the model repository (make bench-peers does)}}
DATA=${PEERS_DATA:-${ORTSERVE_DATA:-}}
MODEL=${PEERS_MODEL:-minilm}
VERSIONS=${PEERS_VERSIONS:-$(dflt "fp32 int8" int8)}
SERVERS=${PEERS_SERVERS:-ortserve ortserve-b1 hugot fastapi}
WORKLOADS=${PEERS_WORKLOADS:-short passages}
TEXTS=${PEERS_TEXTS:-tuning}
PASSAGE_SENTENCES=${PEERS_PASSAGE_SENTENCES:-5-9}
REPEATS=${PEERS_REPEATS:-$(dflt 3 1)}
read -r SCORE GCORE _ <<<"${PEERS_CORES:-1 0}"
ARRIVALS=${PEERS_ARRIVALS:-poisson}
CLIENTS=${PEERS_CLIENTS:-16}
STEP=${PEERS_STEP:-$(dflt 4s 1s)}
WARMUP=${PEERS_WARMUP:-$(dflt 1s 500ms)}
SEARCH_STEPS=${PEERS_SEARCH_STEPS:-$(dflt 8 4)}
SEARCH_RESOLUTION=${PEERS_SEARCH_RESOLUTION:-$(dflt 0.05 0.2)}
SEARCH_START=${PEERS_SEARCH_START:-auto}
SEARCH_CONFIRM=${PEERS_SEARCH_CONFIRM:-$(dflt 1 0)}
OFFLINE_STEP=${PEERS_OFFLINE_STEP:-$(dflt 3s 1s)}
MIN_COSINE=${PEERS_MIN_COSINE:-0.999}
CALL_TIMEOUT=${PEERS_CALL_TIMEOUT:-600}
GO=${GO:-go}
# Per workload: the SLO, the least requests a search step spans, the low rate.
declare -A SLO_OF=([short]=${PEERS_SLO_SHORT:-${PEERS_SLO:-p95=50ms}} [passages]=${PEERS_SLO_PASSAGES:-p95=200ms})
declare -A MINREQ_OF=([short]=${PEERS_MIN_REQUESTS:-$(dflt 1000 0)} [passages]=${PEERS_MIN_REQUESTS_PASSAGES:-$(dflt 300 0)})
declare -A LOW_OF=([short]=${PEERS_LOW_RATE:-40} [passages]=${PEERS_LOW_RATE_PASSAGES:-5})

[[ -x $SERVER ]] || die "$SERVER is not built (make build)"
[[ -f $MODELS/$MODEL/model.yaml ]] || die "no $MODEL/model.yaml in $MODELS (make models, or set PEERS_MODELS)"
[[ -n ${SCORE:-} && -n ${GCORE:-} && $SCORE != "$GCORE" ]] || die "PEERS_CORES=\"${PEERS_CORES:-}\": want two different cores, the server's then the generator's, as \"1 0\""
for c in "$SCORE" "$GCORE"; do
  taskset -c "$c" true 2>/dev/null || die "cannot pin to core $c (PEERS_CORES): this machine allows $(taskset -cp $$ | sed 's/.*: //')"
done
count() { [[ $2 =~ ^[0-9]+$ ]] || die "$1=$2: want a whole number (see the settings in $0)"; }
count PEERS_MIN_REQUESTS "${MINREQ_OF[short]}"
count PEERS_MIN_REQUESTS_PASSAGES "${MINREQ_OF[passages]}"
count PEERS_SEARCH_CONFIRM "$SEARCH_CONFIRM"
count PEERS_REPEATS "$REPEATS"
count PEERS_CLIENTS "$CLIENTS"
(( REPEATS >= 1 && CLIENTS >= 1 )) || die "PEERS_REPEATS and PEERS_CLIENTS must be at least 1"
for s in $SERVERS; do
  [[ $s =~ ^(ortserve|ortserve-b1|hugot|fastapi)$ ]] || die "PEERS_SERVERS: unknown server $s (ortserve, ortserve-b1, hugot, fastapi)"
done
for w in $WORKLOADS; do
  [[ $w == short || $w == passages ]] || die "PEERS_WORKLOADS: unknown workload $w (short, passages)"
done
[[ $TEXTS == tuning || $TEXTS == held-back ]] || die "PEERS_TEXTS=$TEXTS: want tuning or held-back"
[[ $PASSAGE_SENTENCES =~ ^([0-9]+)-([0-9]+)$ ]] || die "PEERS_PASSAGE_SENTENCES=$PASSAGE_SENTENCES: want a range of sentences, as 5-9"
read -r PLO PHI <<<"${PASSAGE_SENTENCES/-/ }"

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
# ortserve's settings are its defaults: no ORTSERVE_* variable reaches the servers or bench.
CLEAN=(env)
while read -r v; do CLEAN+=(-u "$v"); done < <(compgen -e | grep '^ORTSERVE_' || true)

# --- the texts ---------------------------------------------------------------------------
# TEXTS_OF[w]: the file of workload w's texts, one a line ("" for bench's built-in set), and
# SOURCE_OF[w] where they come from, in words; RAW/texts-w.txt holds them either way.
declare -A TEXTS_OF SOURCE_OF
# The seed of how many sentences each passage joins: a new seed is a new set of passages.
TEXTS_SEED=ortserve-passages-v1
need_data() {
  for f in "$@"; do
    [[ -n $DATA && -f $DATA/$f ]] || die "no $f in PEERS_DATA/ORTSERVE_DATA (\"$DATA\"): make data fetches the polarity data"
  done
}
for w in $WORKLOADS; do
  case $w-$TEXTS in
    short-tuning)
      TEXTS_OF[$w]=
      SOURCE_OF[$w]="bench's built-in texts (bench/sentences.txt)"
      cp "$ROOT/bench/sentences.txt" "$RAW/texts-$w.txt" ;;
    short-held-back)
      need_data val.csv test.csv
      "$PY" "$HELP" texts "$RAW/texts-$w.txt" 1 1 "$TEXTS_SEED" "$DATA/val.csv" "$DATA/test.csv" >&2
      TEXTS_OF[$w]=$RAW/texts-$w.txt
      SOURCE_OF[$w]="the sentences of the polarity data's val.csv and test.csv" ;;
    passages-tuning)
      need_data train.csv
      "$PY" "$HELP" texts "$RAW/texts-$w.txt" "$PLO" "$PHI" "$TEXTS_SEED" "$DATA/train.csv" >&2
      TEXTS_OF[$w]=$RAW/texts-$w.txt
      SOURCE_OF[$w]="$PASSAGE_SENTENCES consecutive sentences of the polarity data's train.csv joined (\`peers.py texts\`)" ;;
    passages-held-back)
      need_data val.csv test.csv
      "$PY" "$HELP" texts "$RAW/texts-$w.txt" "$PLO" "$PHI" "$TEXTS_SEED" "$DATA/val.csv" "$DATA/test.csv" >&2
      TEXTS_OF[$w]=$RAW/texts-$w.txt
      SOURCE_OF[$w]="$PASSAGE_SENTENCES consecutive sentences of the polarity data's val.csv and test.csv joined (\`peers.py texts\`)" ;;
  esac
  awk 'NF { print; if (++n == 8) exit }' "$RAW/texts-$w.txt" >"$WORK/check-$w.txt"
done
# data_args W: the bench flags that send workload W's texts.
data_args() { [[ -z ${TEXTS_OF[$1]} ]] || printf '%s\n' --data "${TEXTS_OF[$1]}"; }

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

# The hugot peer reads tokenizer.json as it is, which cuts at 128 tokens; its copy of the
# model folder cuts at model.yaml's max_length, as ortserve and the FastAPI peer do, so that
# every server runs the same tokens of a passage.
if [[ " $SERVERS " == *" hugot "* ]]; then
  read -r _ hmax < <("$PY" "$HELP" model-file "$MODELS/$MODEL" "${VERSIONS%% *}")
  "$PY" "$HELP" tokenizer "$MODELS/$MODEL" "$hmax" "$WORK/hugot-model"
fi

# start_server NAME FILE MAXLEN PORT LOG: the server alone on the server core, in the background.
start_server() {
  local name=$1 file=$2 maxlen=$3 port=$4 logf=$5
  case $name in
    ortserve|ortserve-b1)
      local extra=()
      [[ $name == ortserve-b1 ]] && extra=(--max-batch 1)
      "${CLEAN[@]}" taskset -c "$SCORE" "$SERVER" serve --models "$WORK/models" --ort-lib "$ORT_LIB" \
        --addr "127.0.0.1:$port" "${extra[@]}" >"$logf" 2>&1 & ;;
    hugot)
      "${CLEAN[@]}" taskset -c "$SCORE" "$ROOT/bin/hugot-peer" --model-dir "$WORK/hugot-model" --onnx "$file" \
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

# offline NAME WORKLOAD VERSION: `server bench --offline` of VERSION on the workload's texts on
# the server core, its report in RAW/NAME.json.
offline() {
  local d
  mapfile -t d < <(data_args "$2")
  "${CLEAN[@]}" ORTSERVE_MODELS="$MODELS" ORTSERVE_ORT_LIB="$ORT_LIB" timeout --foreground "$CALL_TIMEOUT" taskset -c "$SCORE" \
    "$SERVER" bench --offline --model "$MODEL" --versions "$3" --offline-batches 1 "${d[@]}" \
    --offline-step "$OFFLINE_STEP" --quiet --json "$RAW/$1.json" >"$RAW/$1.txt" 2>&1 \
    || { cat "$RAW/$1.txt" >&2; die "server bench --offline failed"; }
}

# The least time the load takes, when STEP and WARMUP are whole seconds ("4s"): searches that
# find their rate in fewer steps, and steps lengthened to MIN_REQUESTS, make it shorter or longer.
words() { wc -w <<<"$1"; }
cells=$(( $(words "$WORKLOADS") * $(words "$VERSIONS") * $(words "$SERVERS") * REPEATS ))
least=
if [[ $STEP =~ ^([0-9]+)s$ ]] && step_s=${BASH_REMATCH[1]} && [[ $WARMUP =~ ^([0-9]+)s$ ]]; then
  least="; at least ~$(( cells * ($(words "$ARRIVALS") * SEARCH_STEPS + 2) * (step_s + BASH_REMATCH[1]) / 60 + 1 )) min of load if every search takes its $SEARCH_STEPS steps"
fi
log "$MODEL: workloads ${WORKLOADS// /, } ($TEXTS texts) × versions ${VERSIONS// /, } × servers ${SERVERS// /, } × $REPEATS repeat(s) = $cells cells; servers on core $SCORE, generator on core $GCORE; arrivals ${ARRIVALS// /, }, $CLIENTS clients to saturate$least"

# --- each workload and version: the servers in turn, REPEATS times -----------------------
: >"$RAW/cells.tsv"
for w in $WORKLOADS; do
  slo=${SLO_OF[$w]}
  mapfile -t dargs < <(data_args "$w")
  for ver in $VERSIONS; do
    read -r file maxlen < <("$PY" "$HELP" model-file "$MODELS/$MODEL" "$ver") || true
    [[ -n ${file:-} ]] || die "$MODEL has no version $ver (PEERS_VERSIONS)"
    k=0
    for rep in $(seq "$REPEATS"); do
      for name in $SERVERS; do
        # The raw limit just before each cell (and once after the last): the host's speed
        # drifts over a run, so each cell's ratio is to the raw limits measured around it.
        offline "offline-$w-$ver-$k" "$w" "$ver"
        start=$SEARCH_START
        if [[ $start == auto ]]; then
          start=$("$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
v = [v for v in r["runs"][0]["versions"] if v["version"] == sys.argv[2]][0]
print(max(1, round(v["offline"][0]["items_per_s"] / 4)))' "$RAW/offline-$w-$ver-$k.json" "$ver")
        fi
        cell=$w-$ver-$name-r$rep
        port=$(free_port)
        url=http://127.0.0.1:$port
        log "$cell: $name ($file) on core $SCORE, port $port"
        start_server "$name" "$file" "$maxlen" "$port" "$RAW/$cell.log"
        if (( rep == 1 )); then
          # The same answers first: a table of servers that disagree would compare different work.
          vecs=$RAW/$w-$ver-$name-vectors.json
          "$PY" "$HELP" embed "$url" "$MODEL" "$ver" "$WORK/check-$w.txt" "$vecs"
          if [[ $name == ortserve ]]; then
            cp "$vecs" "$WORK/$w-$ver-reference.json"
          elif [[ -f $WORK/$w-$ver-reference.json ]]; then
            "$PY" "$HELP" compare "$WORK/$w-$ver-reference.json" "$vecs" "$MIN_COSINE" "$RAW/$w-$ver-$name-cosine.json" \
              || die "$name's $ver vectors of $w are not ortserve's (cosine < $MIN_COSINE): see $RAW/$w-$ver-$name-cosine.json"
          else
            log "$cell: no ortserve vectors to check $name against (ortserve is not in PEERS_SERVERS, or not first)"
          fi
        fi
        for arrival in $ARRIVALS; do
          log "$cell: search for the highest rate at $slo, $arrival arrivals, from $start rps"
          bench_run "$cell-$arrival" --url "$url" --model "$MODEL" --versions "$ver" --route /embed "${dargs[@]}" \
            --slo "$slo" --arrival "$arrival" --search-steps "$SEARCH_STEPS" --search-start "$start" \
            --search-resolution "$SEARCH_RESOLUTION" --min-requests "${MINREQ_OF[$w]}" --search-confirm "$SEARCH_CONFIRM"
        done
        log "$cell: saturation, $CLIENTS closed-loop clients"
        bench_run "$cell-saturation" --url "$url" --model "$MODEL" --versions "$ver" --route /embed "${dargs[@]}" \
          --concurrency "$CLIENTS"
        log "$cell: ${LOW_OF[$w]} rps, constant arrivals"
        bench_run "$cell-low" --url "$url" --model "$MODEL" --versions "$ver" --route /embed "${dargs[@]}" \
          --rate "${LOW_OF[$w]}" --arrival constant
        stop_server
        printf '%s\t%s\t%s\t%s\t%s\n' "$w" "$ver" "$rep" "$name" "$k" >>"$RAW/cells.tsv"
        k=$(( k + 1 ))
      done
    done
    offline "offline-$w-$ver-$k" "$w" "$ver"
  done
done

cpu_model=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
cpu_flags=$(lscpu | sed -n 's/^Flags: *//p' | head -n 1)
"$PY" "$HELP" table "$RAW" "$OUT" model="$MODEL" versions="$VERSIONS" servers="$SERVERS" arrivals="$ARRIVALS" \
  workloads="$WORKLOADS" texts="$TEXTS" repeats="$REPEATS" clients="$CLIENTS" \
  slo_short="${SLO_OF[short]}" slo_passages="${SLO_OF[passages]}" \
  min_requests_short="${MINREQ_OF[short]}" min_requests_passages="${MINREQ_OF[passages]}" \
  low_rate_short="${LOW_OF[short]}" low_rate_passages="${LOW_OF[passages]}" \
  source_short="${SOURCE_OF[short]:-}" source_passages="${SOURCE_OF[passages]:-}" \
  step="$STEP" warmup="$WARMUP" search_steps="$SEARCH_STEPS" search_resolution="$SEARCH_RESOLUTION" search_confirm="$SEARCH_CONFIRM" \
  server_core="$SCORE" generator_core="$GCORE" min_cosine="$MIN_COSINE" quick="$QUICK" \
  cpu_model="$cpu_model" cpu_flags="$cpu_flags"
log "wrote $OUT/peers.md and $OUT/peers.json"
