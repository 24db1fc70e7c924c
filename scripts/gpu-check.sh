#!/bin/bash
# The GPU check: runs on the GPU host, from the folder `make gpu-check` prepares
# (scripts/gpu-pack.sh), and, to try it first, on a machine without a GPU, where it takes the
# CPU fallback path and still finishes. docs/gpu.md says what it proves and how to read it.
#
#   usage: bash gpu-check.sh [OUT_DIR]      (default: $OUT if set, else ./gpu-check-out)
#   env:   PYTHON             python with numpy and onnx (default python3)
#          GPU_CHECK_BUDGET_S the whole run's limit in seconds (default 450: under 8 minutes)
#          GPU_CHECK_QUICK=1  shorter bench steps and searches (the dry run on 2 cores); the
#                             phases and the commands are the same
#          GPU_CHECK_SLO      bench's SLO (default p95=100ms, as docs/performance.md)
#
# Phases, each ending in a line "== PHASE: PASS|FAIL|SKIP|INFO: why":
#   setup      unpack ORT (checks hashes, finds CUDA 13 / cuDNN 9), the server, the models
#              (random weights in the built graphs: gpucheck.py fill)
#   strict     serve --device cuda --strict-placement with fp32 and fp16: session creation
#              fails if any node would run on CPU; /info must say CUDAExecutionProvider. First
#              a control: --device cpu --strict-placement must refuse to load
#   fallback   without CUDA: serve --device auto must fall back to CPU and say why
#   inspect    server inspect --device cuda, all three versions: nodes per provider, and
#              which operators fall back to CPU (int8's quantized ops)
#   compare    the same texts through serve --device cpu and the CUDA server, per version:
#              cosine of the embeddings, fp32 >= 0.999, fp16 >= 0.99, int8 >= 0.99
#   bench-sN   serve --sessions N (N = 1, 2, 4; sessions are CUDA streams), a warm-up pass,
#              then server bench on loopback: fp32, fp16, int8 side by side, the highest rate
#              meeting the SLO (searched from 500 rps on CUDA, 16 on CPU)
#   cost-sN    after each bench: the cost curve each version's batcher learned (/info), its
#              predicted ms by batch rows at 16–128 tokens and the per-text cost of the largest
#              batch against one text's (far below 1 where batching pays, as on a GPU)
# Writes OUT_DIR/gpu-check.log (everything, the servers' logs included), summary.txt,
# inspect.json, compare.json, bench-sessions{1,2,4}.json and info-sessions{1,2,4}.json (/info
# after each bench). Exits 0 when it ran to the end, whatever the phases said, 1 when setup
# failed, 2 on a usage error.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT_DIR=${1:-${OUT:-$PWD/gpu-check-out}}
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-450}
QUICK=${GPU_CHECK_QUICK:-0}
SLO=${GPU_CHECK_SLO:-p95=100ms}
VERSIONS=fp32,fp16,int8
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOG=$OUT_DIR/gpu-check.log

W=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 2
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${SMI_PID:-}" ] && kill "$SMI_PID" 2>/dev/null
  rm -rf "$W"
}

ts() { date -u +%H:%M:%S; }
say() { echo "[$(ts) +${SECONDS}s] $*"; }
left() { local l=$((DEADLINE - SECONDS)); echo $((l > 1 ? l : 1)); } # timeout 0 would mean none
# result PHASE STATUS WHY: the phase's verdict, in the log and the summary.
result() {
  echo "== $1: $2: $3"
  printf '%-10s %-5s %s\n' "$1" "$2" "$3" >> "$W/results"
}
# unxz SRC DST: xz -d, or Python's lzma where the host has no xz.
unxz_to() {
  if command -v xz >/dev/null; then xz -dc "$1" > "$2"; else
    "$PY" -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"), 1<<24)' "$1" "$2"
  fi
}

# start_serve NAME DEVICE REPO SESSIONS [FLAGS...]: starts serve on a free loopback port and
# waits until it listens (URL) or exits (returns 1, its log says why). Its stderr is kept in
# $W/NAME.err and copied into the log by stop_serve.
start_serve() {
  local name=$1 dev=$2 repo=$3 n=$4 i
  shift 4
  URL= SPID=
  say "serve $name: --device $dev --sessions $n $* (models $repo)"
  timeout "$(left)" "$SERVER" serve --addr 127.0.0.1:0 --models "$repo" --ort-lib "$ORTLIB" \
    --device "$dev" --sessions "$n" --reload-interval 0 --grace 5s "$@" \
    > "$W/$name.out" 2> "$W/$name.err" &
  SPID=$!
  for ((i = 0; i < 600; i++)); do # 120 s: CUDA start-up and warm-up of every version
    URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$W/$name.out" 2>/dev/null | head -1)
    if [ -n "$URL" ]; then
      PIDS+=("$SPID")
      say "serve $name: up at $URL after $i polls"
      return 0
    fi
    if ! kill -0 "$SPID" 2>/dev/null; then
      wait "$SPID"
      say "serve $name: exited ($?) before listening:"
      sed "s/^/  [$name] /" "$W/$name.err" | tail -20
      return 1
    fi
    sleep 0.2
  done
  kill -TERM "$SPID"; wait "$SPID"
  say "serve $name: not listening after 120 s"
  sed "s/^/  [$name] /" "$W/$name.err" | tail -20
  return 1
}

# stop_serve PID NAME: SIGTERM (serve shuts down gracefully), then its log into ours.
stop_serve() {
  local p=$1 name=$2 q keep=()
  kill -TERM "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  for q in "${PIDS[@]}"; do [ "$q" != "$p" ] && keep+=("$q"); done
  PIDS=("${keep[@]}")
  say "serve $name: stopped; its log:"
  sed "s/^/  [$name] /" "$W/$name.err"
}

# provider_of URL: /info's provider and fallback reason, as "PROVIDER|REASON".
provider_of() {
  "$PY" "$HERE/gpucheck.py" info "$1" |
    "$PY" -c 'import json,sys; i=json.load(sys.stdin); print(i["provider"]+"|"+(i.get("fallback_reason") or ""))'
}

main() {
  DEADLINE=$((SECONDS + BUDGET))
  # Thousands of requests a second past saturation keep many connections open at once.
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
  say "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET}s, quick=$QUICK, slo $SLO, out $OUT_DIR"
  say "host: $(uname -srm), $(nproc) CPUs, $(ulimit -n) files, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), python $("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1)"
  [ -f "$HERE/MANIFEST" ] && sed 's/^/  manifest: /' "$HERE/MANIFEST"
  GPU=no
  if command -v nvidia-smi >/dev/null && nvidia-smi -L > "$W/gpus" 2>&1 && grep -q '^GPU' "$W/gpus"; then
    GPU=yes
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | sed 's/^/  gpu: /'
  else
    say "no GPU visible (nvidia-smi: $(command -v nvidia-smi >/dev/null && head -1 "$W/gpus" || echo 'not installed'))"
  fi

  # ---- setup -----------------------------------------------------------------------------
  local t0=$SECONDS env
  if ! env=$(bash "$HERE/ort/unpack.sh" "$W/ort"); then
    result setup FAIL "ort/unpack.sh failed (hashes or unpacking): see above"
    summarize
    return 1
  fi
  eval "$env"
  say "ORT unpacked; $env"
  ORTLIB=$W/ort/libonnxruntime.so.1
  SERVER=$W/server
  unxz_to "$HERE/server.xz" "$SERVER" && chmod +x "$SERVER" &&
    (cd "$W" && sha256sum -c --quiet "$HERE/server.sha256") || {
    result setup FAIL "unpacking server.xz failed"
    summarize
    return 1
  }
  say "server: $("$SERVER" version 2>&1)"
  mkdir -p "$W/skel"
  if ! { unxz_to "$HERE/models.tar.xz" "$W/models.tar" && tar -xf "$W/models.tar" -C "$W/skel" &&
    "$PY" "$HERE/gpucheck.py" fill --src "$W/skel" --out "$W/repo" --seed 1; }; then
    result setup FAIL "making the random-weight models failed (needs numpy and onnx in $PY)"
    summarize
    return 1
  fi
  result setup PASS "ORT, server and models ready in $((SECONDS - t0)) s (random weights: throughput and placement only)"

  # ---- strict: CUDA in use, nothing on CPU, fp32 and fp16 ---------------------------------
  # First the control: on CPU every node is on the CPU provider, so strict placement must
  # refuse to load. That it does is what makes a load on CUDA mean something.
  local control
  if start_serve control cpu "$W/repo/strict" 1 --strict-placement; then
    stop_serve "$SPID" control
    control="FAIL: serve --device cpu --strict-placement loaded: strict placement checks nothing"
  elif grep -q 'fallback to CPU EP has been explicitly disabled' "$W/control.err"; then
    control="control: --strict-placement on CPU refused to load, as it must"
  else
    control="FAIL: the control (serve --device cpu --strict-placement) failed for another reason: $(tail -1 "$W/control.err" | cut -c1-300)"
  fi
  say "strict $control"
  DEV=cuda CUDA=no
  t0=$SECONDS
  if start_serve strict cuda "$W/repo/strict" 1 --strict-placement; then
    local pi
    pi=$(provider_of "$URL")
    stop_serve "$SPID" strict
    if [ "${pi%%|*}" = CUDAExecutionProvider ]; then
      CUDA=yes
      if [ "${control#FAIL}" = "$control" ]; then
        result strict PASS "fp32 and fp16 loaded on CUDA with session.disable_cpu_ep_fallback=1 ($((SECONDS - t0)) s); $control"
      else
        result strict FAIL "fp32 and fp16 loaded on CUDA, but $control"
      fi
    else
      result strict FAIL "serve --device cuda came up on ${pi%%|*}"
    fi
  elif grep -q -- '--device cuda:' "$W/strict.err"; then
    # CUDA itself is unusable: the provider library or its CUDA libraries did not load.
    local why
    why=$(grep -o -- 'CUDA execution provider unavailable: .*' "$W/strict.err" | head -1 | sed 's/: run with --device.*//' | cut -c1-300)
    DEV=auto
    if [ "$GPU" = yes ]; then
      result strict FAIL "a GPU is visible but CUDA is unusable: $why; $control"
    else
      result strict SKIP "no GPU here; serve --device cuda refused as it should ($why); $control"
    fi
  else
    # CUDA loads, so something in the graphs would run on CPU: see which, without strict.
    if start_serve cuda-nonstrict cuda "$W/repo/strict" 1; then
      CUDA=yes
      stop_serve "$SPID" cuda-nonstrict
      result strict FAIL "CUDA works but strict placement refused a version (inspect says which nodes go to CPU): $(tail -1 "$W/strict.err" | cut -c1-300)"
    else
      DEV=auto
      result strict FAIL "serve --device cuda failed with and without --strict-placement: $(tail -1 "$W/strict.err" | cut -c1-400)"
    fi
  fi

  # ---- fallback: without CUDA, auto must serve on CPU and say why -------------------------
  if [ "$CUDA" = no ]; then
    if start_serve fallback auto "$W/repo/all" 1; then
      local pi
      pi=$(provider_of "$URL")
      stop_serve "$SPID" fallback
      if [ "${pi%%|*}" = CPUExecutionProvider ] && [ -n "${pi#*|}" ] &&
        grep -q 'CUDA unavailable, serving on CPU' "$W/fallback.err"; then
        result fallback PASS "serve --device auto fell back to CPU and said why: ${pi#*|}"
      else
        result fallback FAIL "serve --device auto: provider ${pi%%|*}, reason '${pi#*|}'"
      fi
    else
      result fallback FAIL "serve --device auto did not come up"
    fi
  else
    result fallback SKIP "CUDA is in use"
  fi

  # ---- inspect: where each version's nodes go -------------------------------------------------
  t0=$SECONDS
  if ORTSERVE_ORT_LIB=$ORTLIB timeout "$(left)" "$SERVER" inspect minilm --models "$W/repo/all" --device cuda --json \
    > "$OUT_DIR/inspect.json" 2> "$W/inspect.err"; then
    "$PY" "$HERE/gpucheck.py" placement "$OUT_DIR/inspect.json" | tee "$W/placement"
    local int8
    int8=$(grep '^  int8:' "$W/placement" | sed 's/^  int8: //')
    if [ "$CUDA" = yes ]; then
      result inspect INFO "int8: $int8 ($((SECONDS - t0)) s)"
    else
      result inspect INFO "CPU only (no CUDA): int8: $int8 ($((SECONDS - t0)) s)"
    fi
  else
    sed 's/^/  [inspect] /' "$W/inspect.err"
    result inspect FAIL "server inspect failed: $(tail -1 "$W/inspect.err" | cut -c1-300)"
  fi

  # ---- compare: CUDA against CPU on the same texts --------------------------------------------
  local gpu_pid='' gpu_url=''
  if start_serve cpu cpu "$W/repo/all" 2 --threads "$(($(nproc) > 8 ? 4 : 1))"; then
    local cpu_pid=$SPID cpu_url=$URL
    if start_serve sessions1 "$DEV" "$W/repo/all" 1; then
      gpu_pid=$SPID gpu_url=$URL
      local label=cuda
      [ "$CUDA" = yes ] || label="$DEV(cpu)"
      if "$PY" "$HERE/gpucheck.py" compare --a "$cpu_url" --alabel cpu --b "$gpu_url" --blabel "$label" \
        --versions "$VERSIONS" --min fp32=0.999,fp16=0.99,int8=0.99 --json "$OUT_DIR/compare.json" | tee "$W/compare"; then
        if [ "$CUDA" = yes ]; then
          result compare PASS "CUDA and CPU agree: $(sed 's/: PASS: cosine min \([0-9.]*\).*/ \1/' "$W/compare" | paste -sd, -)"
        else
          result compare SKIP "no CUDA: CPU against the CPU fallback, the path only (all PASS)"
        fi
      else
        result compare FAIL "$(grep -v ': PASS' "$W/compare" | paste -sd';' - | cut -c1-400)"
      fi
    else
      result compare FAIL "serve --device $DEV did not come up"
    fi
    stop_serve "$cpu_pid" cpu
  else
    result compare FAIL "serve --device cpu did not come up"
  fi

  # ---- bench: sessions 1, 2, 4 ------------------------------------------------------------------
  local step warmup steps start n need
  if [ "$QUICK" = 1 ]; then
    step=1s warmup=250ms steps=4 start=8
  else
    step=2s warmup=500ms steps=9 start=16
    [ "$CUDA" = yes ] && start=500
  fi
  # A step is its warm-up, its window and a drain (a second at most, unless a request times
  # out); three versions; and a warm-up pass first. The bench itself is cut off at the
  # deadline, keeping its steps.
  need=$((3 * steps * (${step%s} + 1) + 25))
  say "bench: versions $VERSIONS, --slo $SLO, search from $start rps, at most $steps steps of $step (+$warmup) each; ~${need}s per sessions count"
  for n in 1 2 4; do
    if [ "$n" != 1 ] || [ -z "$gpu_pid" ]; then
      if [ "$(left)" -lt $((need + 30)) ]; then
        result "bench-s$n" SKIP "out of time: $(left) s left, ~$((need + 30)) s needed"
        continue
      fi
      start_serve "sessions$n" "$DEV" "$W/repo/all" "$n" || {
        result "bench-s$n" FAIL "serve --sessions $n did not come up"
        continue
      }
      gpu_pid=$SPID gpu_url=$URL
    fi
    if [ "$(left)" -lt "$need" ]; then
      stop_serve "$gpu_pid" "sessions$n"
      gpu_pid=''
      result "bench-s$n" SKIP "out of time: $(left) s left, ~$need s needed"
      continue
    fi
    local pi
    pi=$(provider_of "$gpu_url")
    # A pass at the search's first rate, not measured: the first requests of new shapes
    # allocate memory and, on CUDA, pick kernels. Measured cold, the first step fails on a
    # slow request or two, and the search then bisects below the start and never climbs.
    say "bench-s$n: warm-up pass at $start rps, every version (not measured)"
    timeout 60 "$SERVER" bench --url "$gpu_url" --model minilm --versions "$VERSIONS" --rate "$start" \
      --step 1s --warmup 1s --timeout 2s --quiet --json "$W/warm$n.json" > "$W/warm$n.txt" 2>&1 ||
      { say "bench-s$n: the warm-up pass failed:"; tail -5 "$W/warm$n.txt"; }
    if [ "$GPU" = yes ]; then
      nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$W/smi$n.csv" 2>/dev/null &
      SMI_PID=$!
    fi
    t0=$SECONDS
    timeout "$(($(left) > 20 ? $(left) - 10 : 10))" "$SERVER" bench --url "$gpu_url" --model minilm --versions "$VERSIONS" \
      --slo "$SLO" --search-start "$start" --search-steps "$steps" --step "$step" --warmup "$warmup" \
      --timeout 2s --quiet --json "$OUT_DIR/bench-sessions$n.json"
    local rc=$? util='' verdict=PASS
    if [ -n "${SMI_PID:-}" ]; then
      kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null; SMI_PID=
      util=$(awk -F', *' '{u+=$1; if ($1>m) m=$1; if ($2>mm) mm=$2; k++} END {if (k) printf "; GPU util mean %.0f%% max %d%%, memory max %d MiB", u/k, m, mm}' "$W/smi$n.csv")
    fi
    # The cost curve the batcher learned, calibration and the bench's batches both.
    if "$PY" "$HERE/gpucheck.py" curve "$gpu_url" --json "$OUT_DIR/info-sessions$n.json" > "$W/curve$n" 2>&1; then
      sed "s/^/cost-s$n: /" "$W/curve$n" | while IFS= read -r l; do say "$l"; done
      result "cost-s$n" INFO "learned cost, 16 tokens: $(grep 'tokens 16:' "$W/curve$n" | sed 's/^minilm\/\([a-z0-9-]*\) .*per text at \([0-9]*\) rows \([0-9.]*\) x.*/\1 \3 at \2 rows/' | paste -sd, -) (per text vs one text; /info in info-sessions$n.json)"
    else
      result "cost-s$n" FAIL "no cost curve in /info: $(tail -1 "$W/curve$n")"
    fi
    stop_serve "$gpu_pid" "sessions$n"
    gpu_pid=''
    if [ -s "$OUT_DIR/bench-sessions$n.json" ]; then
      "$PY" "$HERE/gpucheck.py" benchsum "s$n=$OUT_DIR/bench-sessions$n.json" | tee "$W/bench$n"
      [ $rc = 0 ] || verdict=FAIL util="$util; bench exited $rc (cut off at the deadline?), the report keeps the steps it measured"
      result "bench-s$n" $verdict "on ${pi%%|*}, $((SECONDS - t0)) s$util: $(sed 's/^s[0-9]* \([a-z0-9]*\): best \([0-9.]*\) rps.*/\1 \2/' "$W/bench$n" | paste -sd, -) rps at $SLO"
    else
      result "bench-s$n" FAIL "server bench exited $rc after $((SECONDS - t0)) s"
    fi
  done

  summarize "$W"/bench[124]
  return 0
}

# summarize [BENCH_SUMMARIES...]: summary.txt, also at the end of the log.
summarize() {
  {
    echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n): GPU visible: $GPU; CUDA used: ${CUDA:-no}; wall ${SECONDS}s of ${BUDGET}s"
    echo "models: the built MiniLM graphs with random weights (throughput and placement only, not accuracy)"
    cat "$W/results"
    [ -s "$W/placement" ] && cat "$W/placement"
    for f in "$@"; do [ -s "$f" ] && cat "$f"; done
  } > "$OUT_DIR/summary.txt"
  echo
  echo "==== summary ===="
  cat "$OUT_DIR/summary.txt"
}

# main runs in the pipeline's subshell: its servers are its own to stop, so the traps are set
# there.
{
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  main
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
