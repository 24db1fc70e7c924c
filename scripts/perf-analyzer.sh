#!/usr/bin/env bash
# Runs Triton's load generator, perf_analyzer, against ortserve's KServe v2 routes, and
# `server bench` at the same offered rate on the same texts, against the same server:
#   usage: scripts/perf-analyzer.sh SERVER_BIN PA_DIR OUT_DIR [RATE] [DURATION_S] [ROUNDS]
# PA_DIR is the Makefile's $(CACHE)/perf-analyzer/<sha256(requirements.txt, this script)[:12]>:
# perf_analyzer from PyPI (scripts/perf-analyzer/requirements.txt), installed on first use.
# Its wheel is tagged manylinux_2_38; on an older glibc (Debian 12) it runs on Debian trixie's
# libc6 and libstdc++6, which apt-get downloads, from the suite next to the host's own, into
# PA_DIR (nothing is installed on the system).
# Starts `SERVER_BIN serve` pinned to core 1 (models and ORT from the usual ORTSERVE_*
# settings), warms it up, then alternates perf_analyzer and bench, both pinned to core 0,
# ROUNDS times: constant arrivals, RATE requests/s (default 40), DURATION_S each (default 45;
# perf_analyzer measures three windows of a third of it), model MODEL (minilm) version VERSION
# (fp32), one text per request, bench/sentences.txt cycled. perf_analyzer speaks PROTOCOL:
# http (default: /v2/models/MODEL/versions/VERSION/infer) or grpc, which needs serve's gRPC
# listener (GRPC_FLAG, default --grpc-addr, names its address flag). bench posts to /embed, the
# same model and version. Prints p50/p95 of each run and the median of each tool, and writes
# OUT_DIR/perf-analyzer.md. Exit 1 if the medians of p50 or p95 disagree by more than 10%.
set -euo pipefail
ME=perf-analyzer
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

SERVER=${1:?usage: perf-analyzer.sh SERVER_BIN PA_DIR OUT_DIR [RATE] [DURATION_S] [ROUNDS]}
PA=${2:?perf_analyzer install folder}
OUT=${3:?output folder}
RATE=${4:-40}
DUR=${5:-45}
ROUNDS=${6:-3}
MODEL=${MODEL:-minilm}
VERSION=${VERSION:-fp32}
PROTOCOL=${PROTOCOL:-http}
GRPC_FLAG=${GRPC_FLAG:---grpc-addr}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REQ=$ROOT/scripts/perf-analyzer/requirements.txt
TEXTS=$ROOT/bench/sentences.txt
[[ $PROTOCOL == http || $PROTOCOL == grpc ]] || die "PROTOCOL=$PROTOCOL: give http or grpc"
command -v taskset >/dev/null || die "taskset not found (Debian: apt-get install util-linux)"
(( $(nproc) >= 2 )) || die "needs 2 cores: the server on core 1, the load generators on core 0"

# fetch_runtime DIR: Debian trixie's libc6, libstdc++6 and libgcc-s1, unpacked into DIR, with
# apt-get on a private state folder (the host's Debian mirror, its keyring).
fetch_runtime() {
  local dir=$1 apt=$PA/apt mirror
  command -v apt-get >/dev/null || die "perf_analyzer needs glibc 2.38 and GCC 13's libstdc++; this host has neither, nor apt-get to fetch them"
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(LABEL)' 2>/dev/null | awk '$2 == "Debian" {print $1; exit}')
  [[ -n $mirror ]] || die "no Debian mirror in the host's apt sources: run apt-get update once"
  log "fetching Debian trixie's libc6 and libstdc++6 from $mirror into $dir"
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$dir"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" >"$apt/sources.list"
  : >"$apt/status"
  local opts=(-qq -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::State::status=$apt/status"
    -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update || die "apt-get update of trixie failed"
  (cd "$apt" && apt-get "${opts[@]}" download libc6 libstdc++6 libgcc-s1) || die "apt-get download failed"
  for deb in "$apt"/*.deb; do dpkg-deb -x "$deb" "$dir"; done
  rm -rf "$apt"
}

# install: perf_analyzer into PA, once; a stamp of the requirements and this script, last.
install() {
  local want bin=$PA/pkg/perf_analyzer/bin/perf_analyzer
  want=$(cat "$REQ" "$0" | sha256sum | cut -d' ' -f1)
  [[ -f $PA/.stamp && $(<"$PA/.stamp") == "$want" && -x $PA/perf_analyzer ]] && return 0
  log "installing perf_analyzer into $PA"
  rm -rf "$PA" && mkdir -p "$PA"
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-cache-dir --no-deps \
    --only-binary=:all: --platform manylinux_2_38_x86_64 --target "$PA/pkg" --require-hashes -r "$REQ" >&2 \
    || die "pip install -r $REQ failed"
  chmod +x "$bin"
  if "$bin" --version >/dev/null 2>&1; then
    printf '#!/bin/sh\nexec "%s" "$@"\n' "$bin" >"$PA/perf_analyzer"
  else
    local lib=$PA/runtime/usr/lib/x86_64-linux-gnu
    fetch_runtime "$PA/runtime"
    # The newer loader runs the binary on the newer libc and libstdc++; the rest (libssl,
    # libz) is the host's, which a newer libc still serves.
    printf '#!/bin/sh\nexec "%s/ld-linux-x86-64.so.2" --library-path "%s:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu" "%s" "$@"\n' \
      "$lib" "$lib" "$bin" >"$PA/perf_analyzer"
  fi
  chmod +x "$PA/perf_analyzer"
  "$PA/perf_analyzer" --version >&2 || die "the installed perf_analyzer does not run"
  echo "$want" >"$PA/.stamp"
}
install

mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
SERVE_ARGS=(serve --addr "127.0.0.1:$PORT" --reload-interval 0)
PA_URL=127.0.0.1:$PORT
if [[ $PROTOCOL == grpc ]]; then
  GPORT=$(free_port)
  SERVE_ARGS+=("$GRPC_FLAG" "127.0.0.1:$GPORT")
  PA_URL=127.0.0.1:$GPORT
fi
taskset -c 1 "$SERVER" "${SERVE_ARGS[@]}" >"$OUT/serve.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -fs "$URL/health" >/dev/null 2>&1 && break; sleep 0.5; done
curl -fs "$URL/health" >/dev/null || die "the server did not come up: see $OUT/serve.log"

# perf_analyzer's input data: one step per text, one text each; it cycles the steps.
python3 - "$TEXTS" >"$OUT/input.json" <<'PY'
import json, sys
texts = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
json.dump({"data": [{"text": [t]} for t in texts]}, sys.stdout, ensure_ascii=False)
PY

pa() {  # pa NAME SECONDS: one run of three windows of SECONDS/3, its CSV in OUT/NAME.csv
  # Stability is not asked for (--stability-percentage 1000): the three windows are the run,
  # as bench's one step is. --async keeps it open loop.
  taskset -c 0 "$PA/perf_analyzer" -m "$MODEL" -x "$VERSION" -u "$PA_URL" -i "$PROTOCOL" --async \
    --request-rate-range "$RATE" --request-distribution constant --input-data "$OUT/input.json" \
    --measurement-interval $(($2 * 1000 / 3)) --stability-percentage 1000 --max-trials 3 \
    -f "$OUT/$1.csv" >"$OUT/$1.log" 2>&1 || die "perf_analyzer failed: see $OUT/$1.log"
}
bench() {  # bench NAME: one run, its report in OUT/NAME.json
  taskset -c 0 "$SERVER" bench --url "$URL" --model "$MODEL" --versions "$VERSION" --data "$TEXTS" \
    --rate "$RATE" --arrival constant --warmup 0s --step "${DUR}s" --quiet --json "$OUT/$1.json" >/dev/null
}

log "warming up: 15 s of perf_analyzer at $RATE rps over $PROTOCOL"
pa warmup 15
for r in $(seq "$ROUNDS"); do
  log "round $r/$ROUNDS: perf_analyzer, then bench, $DUR s each at $RATE rps"
  pa "pa-$r" "$DUR"
  bench "bench-$r"
done

python3 - "$OUT" "$ROUNDS" "$RATE" "$DUR" "$MODEL/$VERSION" "$PROTOCOL" <<'PY'
import csv, json, statistics, sys
out, rounds, rate, dur, model, proto = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
rows, p50, p95, b50, b95 = [], [], [], [], []
for r in range(1, rounds + 1):
    pa = next(csv.DictReader(open(f"{out}/pa-{r}.csv")))
    b = json.load(open(f"{out}/bench-{r}.json"))
    st = b["runs"][0]["versions"][0]["steps"][0]
    p50.append(float(pa["p50 latency"]) / 1e3); p95.append(float(pa["p95 latency"]) / 1e3)
    b50.append(st["latency"]["p50_ms"]); b95.append(st["latency"]["p95_ms"])
    rows.append(f"| {r} | {p50[-1]:.1f} | {p95[-1]:.1f} | {float(pa['Inferences/Second']):.1f} | {b50[-1]:.1f} | {b95[-1]:.1f} | {st['ok']}/{st['sent']} |")
m = statistics.median
d50 = (m(b50) - m(p50)) / m(p50)
d95 = (m(b95) - m(p95)) / m(p95)
ok = abs(d50) <= 0.10 and abs(d95) <= 0.10
md = [f"Constant {rate} requests/s, {dur} s per run, {model}, bench/sentences.txt, one text per request; "
      f"perf_analyzer over {proto} (KServe v2), bench to /embed, alternated; server on core 1, both generators on core 0.", "",
      "| round | perf_analyzer p50 ms | perf_analyzer p95 ms | perf_analyzer infer/s | bench p50 ms | bench p95 ms | bench ok/sent |",
      "|---|---|---|---|---|---|---|", *rows,
      f"| **median** | **{m(p50):.1f}** | **{m(p95):.1f}** | | **{m(b50):.1f}** | **{m(b95):.1f}** | |", "",
      f"bench vs perf_analyzer: p50 {d50*100:+.1f}%, p95 {d95*100:+.1f}% — {'within' if ok else 'NOT within'} 10%."]
open(f"{out}/perf-analyzer.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(0 if ok else 1)
PY
