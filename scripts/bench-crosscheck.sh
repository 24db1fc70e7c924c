#!/usr/bin/env bash
# Cross-checks `server bench` against an independent open-loop load generator, vegeta
# (github.com/tsenart/vegeta, built from the Go module proxy), at the same offered rate, on
# the same texts, against the same running server:
#   usage: scripts/bench-crosscheck.sh SERVER_BIN VEGETA_DIR OUT_DIR [RATE] [DURATION_S] [ROUNDS]
# Starts `SERVER_BIN serve` on a free loopback port (models and ORT from the usual ORTSERVE_*
# settings), warms it up, then alternates vegeta and bench ROUNDS times (constant arrivals,
# RATE requests/s, DURATION_S each, model sentiment, version fp32, one text per request,
# bench/sentences.txt cycled), so machine drift hits both alike. Prints p50/p95 of each run
# and the median of each tool, and writes OUT_DIR/crosscheck.md. Exit 1 if the medians of p50
# or p95 disagree by more than 10%.
set -euo pipefail
ME=bench-crosscheck
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

SERVER=${1:?usage: bench-crosscheck.sh SERVER_BIN VEGETA_DIR OUT_DIR [RATE] [DURATION_S] [ROUNDS]}
VEGETA_DIR=${2:?vegeta install folder}
OUT=${3:?output folder}
RATE=${4:-40}
DUR=${5:-30}
ROUNDS=${6:-3}
VEGETA_VERSION=v12.13.0
TEXTS=$(cd "$(dirname "$0")/.." && pwd)/bench/sentences.txt

if [[ ! -x $VEGETA_DIR/vegeta ]]; then
  log "building vegeta $VEGETA_VERSION into $VEGETA_DIR (Go module proxy)"
  GOBIN=$VEGETA_DIR go install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
fi
mkdir -p "$OUT"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
"$SERVER" serve --addr "127.0.0.1:$PORT" --reload-interval 0 >"$OUT/serve.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -fs "$URL/health" >/dev/null 2>&1 && break; sleep 0.5; done
curl -fs "$URL/health" >/dev/null || die "the server did not come up: see $OUT/serve.log"

# vegeta's targets: one JSON target per text, the body bench sends for it; vegeta cycles them.
python3 - "$TEXTS" "$URL" >"$OUT/targets.jsonl" <<'PY'
import base64, json, sys
texts = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
for t in texts:
    body = json.dumps({"inputs": [t], "model": "sentiment", "version": "fp32"}, ensure_ascii=False)
    print(json.dumps({"method": "POST", "url": sys.argv[2] + "/predict",
                      "header": {"Content-Type": ["application/json"]},
                      "body": base64.b64encode(body.encode()).decode()}))
PY

vegeta() {  # vegeta NAME SECONDS: one run, its JSON report in OUT/NAME.json
  "$VEGETA_DIR/vegeta" attack -format=json -targets="$OUT/targets.jsonl" -rate="$RATE/s" \
    -duration="$2s" -timeout=10s -max-workers=4096 | "$VEGETA_DIR/vegeta" report -type=json >"$OUT/$1.json"
}
bench() {  # bench NAME: one run, its report in OUT/NAME.json
  "$SERVER" bench --url "$URL" --model sentiment --versions fp32 --data "$TEXTS" \
    --rate "$RATE" --arrival constant --warmup 0s --step "${DUR}s" --quiet --json "$OUT/$1.json" >/dev/null
}

log "warming up: 10 s of vegeta at $RATE rps"
vegeta warmup 10
for r in $(seq "$ROUNDS"); do
  log "round $r/$ROUNDS: vegeta, then bench, $DUR s each at $RATE rps"
  vegeta "vegeta-$r" "$DUR"
  bench "bench-$r"
done

python3 - "$OUT" "$ROUNDS" "$RATE" "$DUR" <<'PY'
import json, statistics, sys
out, rounds, rate, dur = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows, v50, v95, b50, b95 = [], [], [], [], []
for r in range(1, rounds + 1):
    v = json.load(open(f"{out}/vegeta-{r}.json"))
    b = json.load(open(f"{out}/bench-{r}.json"))
    st = b["runs"][0]["versions"][0]["steps"][0]
    vl = v["latencies"]
    v50.append(vl["50th"] / 1e6); v95.append(vl["95th"] / 1e6)
    b50.append(st["latency"]["p50_ms"]); b95.append(st["latency"]["p95_ms"])
    rows.append(f"| {r} | {v50[-1]:.1f} | {v95[-1]:.1f} | {v['success']*100:.1f}% | {b50[-1]:.1f} | {b95[-1]:.1f} | {st['ok']}/{st['sent']} |")
m = lambda xs: statistics.median(xs)
d50 = (m(b50) - m(v50)) / m(v50)
d95 = (m(b95) - m(v95)) / m(v95)
ok = abs(d50) <= 0.10 and abs(d95) <= 0.10
md = [f"Constant {rate} requests/s, {dur} s per run, sentiment/fp32, bench/sentences.txt; vegeta and bench alternated.", "",
      "| round | vegeta p50 ms | vegeta p95 ms | vegeta success | bench p50 ms | bench p95 ms | bench ok/sent |",
      "|---|---|---|---|---|---|---|", *rows,
      f"| **median** | **{m(v50):.1f}** | **{m(v95):.1f}** | | **{m(b50):.1f}** | **{m(b95):.1f}** | |", "",
      f"bench vs vegeta: p50 {d50*100:+.1f}%, p95 {d95*100:+.1f}% — {'within' if ok else 'NOT within'} 10%."]
open(f"{out}/crosscheck.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(0 if ok else 1)
PY
