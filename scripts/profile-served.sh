#!/usr/bin/env bash
# Where a served text's time goes, against the raw ONNX Runtime limit on the same core
# (`make profile-served`; docs/performance.md, "Where a served passage's time goes"):
#   usage: scripts/profile-served.sh SERVER_BIN TEXTS OUT_DIR
# For each version and repeat, in turn, on the server core, each sampled by `perf record`
# (cpu-clock, the only event a VM is sure to have):
#   offline       `server bench --offline` at batch 1: ONNX Runtime alone, no HTTP, no batcher
#   offline-busy  the same while the generator core streams memory (dd of 8 MiB blocks): what a
#                 busy neighbour core costs ONNX Runtime through the caches and memory they share
#   served        `server serve` with its default settings, saturated by closed-loop clients
#                 (`server bench --concurrency`) from the generator core
#   served-b1     the same with --max-batch 1, the no-batching baseline in-house
# Each row splits the CPU time per text by where the samples fell: ONNX Runtime, the tokenizer
# (Rust, linked into the server), Go's runtime (scheduler, GC), the rest of ortserve's Go code,
# libc (memcpy, malloc) and the kernel (network, scheduling). "core" is the share of the core
# the process was sampled on; what is missing from 100% went to other processes or idled.
# Offline rows are the difference of a short and a long run, so start-up is not counted; served
# rows count the texts the server ran (ortserve_batch_size_sum) in the sampled window.
# Writes OUT_DIR/profile.md and every run's output under OUT_DIR/raw/.
#
# Settings (environment), with their defaults:
#   ORTSERVE_ORT_LIB, ORTSERVE_MODELS   the ORT library and model repository (the Makefile's RUN_ENV)
#   PROFILE_MODEL=minilm  PROFILE_VERSIONS="int8 fp32"  PROFILE_REPEATS=3  PROFILE_CORES="1 0"
#   PROFILE_CLIENTS=16  PROFILE_WINDOW=10 (s sampled)  PROFILE_VARIANTS="offline offline-busy served served-b1"
# With the defaults a run takes about 8 minutes. Exit 2 if perf or taskset is missing.
set -euo pipefail
ME=profile-served
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

SERVER=${1:?usage: profile-served.sh SERVER_BIN TEXTS OUT_DIR}
TEXTS=${2:?usage: profile-served.sh SERVER_BIN TEXTS OUT_DIR}
OUT=${3:?usage: profile-served.sh SERVER_BIN TEXTS OUT_DIR}
for t in perf taskset curl python3; do
  command -v $t >/dev/null || { echo "$ME: $t not found (Debian: apt-get install linux-perf util-linux curl python3)" >&2; exit 2; }
done
ORT_LIB=${ORTSERVE_ORT_LIB:?set ORTSERVE_ORT_LIB to the ONNX Runtime library (make profile-served does)}
MODELS=${ORTSERVE_MODELS:?set ORTSERVE_MODELS to the model repository (make profile-served does)}
MODEL=${PROFILE_MODEL:-minilm}
VERSIONS=${PROFILE_VERSIONS:-int8 fp32}
REPEATS=${PROFILE_REPEATS:-3}
read -r SCORE GCORE _ <<<"${PROFILE_CORES:-1 0}"
CLIENTS=${PROFILE_CLIENTS:-16}
WINDOW=${PROFILE_WINDOW:-10}
VARIANTS=${PROFILE_VARIANTS:-offline offline-busy served served-b1}
HZ=999

[[ -x $SERVER ]] || die "$SERVER is not built (make build)"
[[ -f $TEXTS ]] || die "no texts file $TEXTS"
[[ -f $MODELS/$MODEL/model.yaml ]] || die "no $MODEL/model.yaml in $MODELS (make models)"
[[ $WINDOW =~ ^[0-9]+$ && $REPEATS =~ ^[0-9]+$ ]] || die "PROFILE_WINDOW and PROFILE_REPEATS are whole numbers"
perf record -q -F $HZ -o /dev/null -- true 2>/dev/null \
  || die "perf cannot sample here: run as root, or lower /proc/sys/kernel/perf_event_paranoid"

RAW=$OUT/raw
rm -rf "$RAW" && mkdir -p "$RAW"
WORK=$(mktemp -d)
mkdir "$WORK/models" && ln -s "$(cd "$MODELS/$MODEL" && pwd)" "$WORK/models/$MODEL"
CLEAN=(env)
while read -r v; do CLEAN+=(-u "$v"); done < <(compgen -e | grep '^ORTSERVE_' || true)
BG=()
cleanup() {
  for p in "${BG[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# account NAME TEXTS WINDOW_S [BASE]: the samples of RAW/NAME.perf by class, per text, as a
# JSON line in RAW/rows.jsonl; with BASE, BASE's samples are subtracted first.
account() {
  local name=$1 texts=$2 window=$3 base=${4:-}
  for f in "$name" $base; do
    perf report -i "$RAW/$f.perf" --stdio --no-children --sort dso,sym -g none -F sample,dso,sym 2>/dev/null \
      | grep -v '^#' | grep -v '^$' >"$RAW/$f.syms" || true
  done
  python3 - "$RAW" "$name" "$texts" "$window" "$HZ" "$(basename "$SERVER")" "$base" <<'EOF' >>"$RAW/rows.jsonl"
import json, re, sys
raw, name, texts, window, hz, exe, base = sys.argv[1:]
def classes(f):
    out = {}
    for line in open(f"{raw}/{f}.syms"):
        m = re.match(r"\s*(\d+)\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        n, dso, sym = int(m[1]), m[2], m[4]
        if "onnxruntime" in dso: c = "ort"
        elif dso == exe:
            if "tokenizers" in sym or "::" in sym or sym.startswith("_ZN"): c = "tokenizer"
            elif sym.startswith("runtime.") or sym.startswith("gcWriteBarrier"): c = "go_runtime"
            else: c = "ortserve"
        elif dso.startswith("libc") or dso.startswith("ld-linux") or dso.startswith("libstdc"): c = "libc"
        elif "kernel" in dso: c = "kernel"
        else: c = "other"
        out[c] = out.get(c, 0) + n
    return out
s = classes(name)
if base:
    for c, n in classes(base).items():
        s[c] = s.get(c, 0) - n
texts, window, hz = float(texts), float(window), float(hz)
total = sum(s.values())
row = {"name": name, "texts": texts, "texts_per_s": texts / window, "core": total / (window * hz),
       "ms_per_text": {c: n / hz * 1e3 / texts for c, n in s.items()}}
row["ms_per_text"]["total"] = total / hz * 1e3 / texts
print(json.dumps(row))
EOF
}

# offline NAME VERSION STEP_S: the raw limit at batch 1 on the server core, sampled whole.
offline() {
  "${CLEAN[@]}" ORTSERVE_MODELS="$WORK/models" ORTSERVE_ORT_LIB="$ORT_LIB" perf record -q -F $HZ -o "$RAW/$1.perf" -- \
    taskset -c "$SCORE" "$SERVER" bench --offline --model "$MODEL" --versions "$2" --offline-batches 1 \
    --offline-step "${3}s" --data "$TEXTS" --quiet --json "$RAW/$1.json" >"$RAW/$1.txt" 2>&1 \
    || { cat "$RAW/$1.txt" >&2; die "server bench --offline failed"; }
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["runs"][0]["versions"][0]["offline"][0]["items_per_s"])' "$RAW/$1.json"
}

# offline_run NAME VERSION: a short and a long offline run; their difference is WINDOW seconds
# of batch-1 runs, start-up and calibration cancelled out.
offline_run() {
  local short long
  short=$(offline "$1-short" "$2" 2)
  long=$(offline "$1" "$2" $((WINDOW + 2)))
  account "$1" "$(python3 -c "print($long * ($WINDOW + 2) - $short * 2)")" "$WINDOW" "$1-short"
}

# served_run NAME VERSION ARGS...: the server on the server core, saturated from the generator
# core, sampled for WINDOW seconds after a warm-up.
served_run() {
  local name=$1 ver=$2 port; shift 2
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${CLEAN[@]}" taskset -c "$SCORE" "$SERVER" serve --models "$WORK/models" --ort-lib "$ORT_LIB" \
    --addr "127.0.0.1:$port" "$@" >"$RAW/$name.log" 2>&1 &
  local srv=$!
  BG+=("$srv")
  for _ in $(seq 300); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
  curl -sf "127.0.0.1:$port/health" >/dev/null || { tail "$RAW/$name.log" >&2; die "the server did not come up: see $RAW/$name.log"; }
  "${CLEAN[@]}" taskset -c "$GCORE" "$SERVER" bench --url "http://127.0.0.1:$port" --model "$MODEL" --versions "$ver" \
    --concurrency "$CLIENTS" --data "$TEXTS" --warmup 3s --step "$((WINDOW + 6))s" --quiet >"$RAW/$name.txt" 2>&1 &
  local gen=$!
  BG+=("$gen")
  sleep 4 # into the generator's measured step: its warm-up is 3 s
  local a b
  a=$(texts_run "$port" "$ver")
  perf record -q -F $HZ -p "$srv" -o "$RAW/$name.perf" -- sleep "$WINDOW" 2>/dev/null
  b=$(texts_run "$port" "$ver")
  wait "$gen" || { tail "$RAW/$name.txt" >&2; die "bench against $name failed: see $RAW/$name.txt"; }
  curl -sf "127.0.0.1:$port/info" >"$RAW/$name.info.json" || true
  kill -TERM "$srv"
  wait "$srv" 2>/dev/null || true
  account "$name" "$((b - a))" "$WINDOW"
}

# texts_run PORT VERSION: texts the version has run, from the server's metrics.
texts_run() {
  curl -sf "127.0.0.1:$1/metrics" | awk -v v="version=\"$2\"" \
    '$1 ~ /^ortserve_batch_size_sum/ && index($1, v) { printf "%d\n", $2 }'
}

busy() {
  taskset -c "$GCORE" dd if=/dev/zero of=/dev/null bs=8M count=100000000 2>/dev/null &
  BG+=("$!")
  echo $!
}

log "$MODEL ${VERSIONS// /, }: ${VARIANTS// /, } on core $SCORE, generator on core $GCORE, $REPEATS repeats of $WINDOW s"
for rep in $(seq "$REPEATS"); do
  for ver in $VERSIONS; do
    for v in $VARIANTS; do
      name=$ver-$v-$rep
      log "$name"
      case $v in
        offline) offline_run "$name" "$ver" ;;
        offline-busy) pid=$(busy); offline_run "$name" "$ver"; kill "$pid" ;;
        served) served_run "$name" "$ver" ;;
        served-b1) served_run "$name" "$ver" --max-batch 1 ;;
        *) die "PROFILE_VARIANTS: unknown variant $v" ;;
      esac
    done
  done
done

python3 - "$RAW/rows.jsonl" "$TEXTS" "$REPEATS" >"$OUT/profile.md" <<'EOF'
import json, re, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = re.search(r"Model name:\s*(.*)", lscpu)
flags = re.search(r"Flags:\s*(.*)", lscpu)
simd = [f for f in (flags[1].split() if flags else []) if re.match(r"avx|amx|.*vnni", f)]
print("# Where a served text's time goes\n")
print(f"Host: {model[1] if model else '?'}; SIMD flags: {' '.join(simd) or 'none'}  ")
print(f"Texts: {sys.argv[2]}; median (range) of {sys.argv[3]} repeats, CPU ms per text by where it was spent\n")
cols = ["ort", "tokenizer", "go_runtime", "ortserve", "libc", "kernel", "other", "total"]
print("| run | texts/s | core | " + " | ".join(cols) + " |")
print("|---|" + "---:|" * (len(cols) + 2))
groups = {}
for r in rows:
    groups.setdefault(r["name"].rsplit("-", 1)[0], []).append(r)
def cell(xs, fmt):
    m = statistics.median(xs)
    return fmt.format(m) if len(xs) < 2 else (fmt + " ({}–{})").format(m, fmt.format(min(xs)), fmt.format(max(xs)))
for name, rs in groups.items():
    out = [cell([r["texts_per_s"] for r in rs], "{:.1f}"), cell([r["core"] for r in rs], "{:.2f}")]
    out += [cell([r["ms_per_text"].get(c, 0) for r in rs], "{:.1f}") for c in cols]
    print(f"| {name} | " + " | ".join(out) + " |")
EOF
cat "$OUT/profile.md"
