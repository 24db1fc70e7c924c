"""Helpers of scripts/bench-peers.sh, run with the peers venv's Python:

  peers.py model-file MODEL_DIR VERSION      the version's ONNX file and max_length, from model.yaml
  peers.py wait URL SECONDS PID              until POST URL/embed answers 200 (or PID exits)
  peers.py embed URL MODEL VERSION TEXTS OUT one /embed request per text, the vectors to OUT
  peers.py compare REF.json GOT.json MIN OUT the least cosine between the two; exit 1 under MIN
  peers.py texts OUT LO HI SEED CSV...       texts of LO-HI sentences of the CSVs, one a line
  peers.py tokenizer SRC MAX_LENGTH OUT      SRC's files linked into OUT, tokenizer.json cut at MAX_LENGTH
  peers.py table RAW_DIR OUT_DIR KEY=VALUE...  peers.md and peers.json from the bench reports

Everything but model-file uses the standard library only.
"""

import datetime
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.request


def post(url, body, timeout=30):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, json.load(resp)


def model_file(model_dir, version):
    import yaml  # PyYAML, pinned in scripts/peers/requirements.txt

    with open(os.path.join(model_dir, "model.yaml")) as f:
        cfg = yaml.safe_load(f)
    versions = cfg.get("versions") or {}
    if version not in versions:
        sys.exit(f"peers: {model_dir}/model.yaml has no version {version!r}: it has {sorted(versions)}")
    print(versions[version]["file"], cfg.get("max_length") or 512)


def wait(url, seconds, pid):
    deadline = time.monotonic() + float(seconds)
    last = ""
    while time.monotonic() < deadline:
        try:
            os.kill(int(pid), 0)
        except OSError:
            sys.exit(f"peers: the server (pid {pid}) exited before it answered")
        try:
            status, _ = post(url + "/embed", {"inputs": "ready?"}, timeout=10)
            if status == 200:
                return
            last = f"HTTP {status}"
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = str(e)
        time.sleep(0.2)
    sys.exit(f"peers: {url} did not answer POST /embed within {seconds} s (last: {last})")


def embed(url, model, version, texts_path, out):
    with open(texts_path) as f:
        texts = [t.rstrip("\n") for t in f if t.strip()]
    vecs = []
    for t in texts:  # one text a request: what the bench sends, and no batch-mates for int8
        _, got = post(url + "/embed", {"inputs": [t], "model": model, "version": version})
        vecs.append(got[0])
    with open(out, "w") as f:
        json.dump({"texts": texts, "vectors": vecs}, f)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def compare(ref, got, least, out):
    with open(ref) as f:
        r = json.load(f)
    with open(got) as f:
        g = json.load(f)
    if r["texts"] != g["texts"] or any(len(a) != len(b) for a, b in zip(r["vectors"], g["vectors"])):
        sys.exit("peers: the two sets of vectors are not of the same texts and dimension")
    cos = [cosine(a, b) for a, b in zip(r["vectors"], g["vectors"])]
    res = {"texts": len(cos), "min": min(cos), "mean": sum(cos) / len(cos)}
    with open(out, "w") as f:
        json.dump(res, f)
    print(f"cosine to ortserve over {len(cos)} texts: min {res['min']:.6f}, mean {res['mean']:.6f}")
    if res["min"] < float(least):
        sys.exit(1)


# --- the workloads' texts -----------------------------------------------------------------


def texts(out, lo, hi, seed, *csvs):
    """Writes OUT, one text a line: the text column of each CSV in turn, its sentences joined
    LO to HI at a time, in file order, with spaces. How many go into each text is fixed by
    sha256(SEED, index) (no RNG), so the file is the same on any Python 3 and any host; the
    last text takes what is left when that is fewer, and a remainder of fewer than LO is left
    out. LO = HI = 1 writes each
    sentence as it is (its runs of white space made one space, as in every text)."""
    import csv
    import hashlib

    lo, hi = int(lo), int(hi)
    if not 1 <= lo <= hi:
        sys.exit(f"peers: sentences per text {lo}-{hi}: want 1 ≤ LO ≤ HI, as 5-9")
    sentences = []
    for path in csvs:
        with open(path, encoding="utf-8", newline="") as f:
            sentences += [" ".join(r["text"].split()) for r in csv.DictReader(f)]
    got, i = [], 0
    while len(sentences) - i >= lo:
        h = int(hashlib.sha256(f"{seed}\0{len(got)}".encode()).hexdigest(), 16)
        k = min(lo + h % (hi - lo + 1), len(sentences) - i)
        got.append(" ".join(sentences[i:i + k]))
        i += k
    if not got:
        sys.exit(f"peers: {len(sentences)} sentences in {' '.join(csvs)}: fewer than {lo}, no text to write")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(got) + "\n")
    print(f"{out}: {len(got)} texts of {lo}-{hi} sentences, from {i} of the {len(sentences)} sentences of {' '.join(os.path.basename(c) for c in csvs)}")


def tokenizer(src, max_length, out):
    """Makes OUT a copy of the model folder SRC (its files linked, not copied) whose
    tokenizer.json cuts texts at MAX_LENGTH tokens, model.yaml's max_length: what ortserve
    and the FastAPI peer cut at, where the file as exported cuts at 128 (hugot reads it as
    it is)."""
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(src):
        if name != "tokenizer.json" and not os.path.exists(os.path.join(out, name)):
            os.symlink(os.path.abspath(os.path.join(src, name)), os.path.join(out, name))
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    if tok.get("truncation"):
        tok["truncation"]["max_length"] = int(max_length)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


# --- the table -------------------------------------------------------------------------

LABELS = {
    "ortserve": "ortserve, default settings",
    "ortserve-b1": "ortserve --max-batch 1",
    "hugot": "hugot v0.6.1 (Go + ORT, no batching)",
    "fastapi": "FastAPI + onnxruntime (no batching)",
}

WORKLOAD_NAMES = {"short": "short texts", "passages": "passages"}

# The CPU flags that decide which ONNX Runtime kernels a host runs: 256- or 512-bit vectors,
# int8 dot products (VNNI) and matrix tiles (AMX).
SIMD = re.compile(r"avx2?|avx512\w*|avx_vnni\w*|amx\w*")
SIMD_FAMILIES = {"AVX2": "avx2", "AVX-512": "avx512", "AVX-VNNI": "avx_vnni", "AVX512-VNNI": "avx512_vnni", "AMX": "amx"}


def simd_flags(flags):
    """The flags of lscpu's list that SIMD matches, in its order."""
    return [f for f in flags.split() if SIMD.fullmatch(f)]


def missing_flags(have):
    """The families of SIMD_FAMILIES of which the host has no flag."""
    return [name for name, prefix in SIMD_FAMILIES.items() if not any(f.startswith(prefix) for f in have)]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def version_of(report):
    return report["runs"][0]["versions"][0] if report and report.get("runs") and report["runs"][0]["versions"] else None


def operating_point(report):
    """The best rate meeting the SLO and the p50/p95 of that step, from a bench report."""
    v = version_of(report)
    if not v:
        return None
    best = v.get("best_rps") or 0
    out = {"best_rps": best, "p50_ms": None, "p95_ms": None, "steps": len(v.get("steps") or [])}
    for st in v.get("steps") or []:
        if best and st.get("offered_rps") == best:
            out["p50_ms"], out["p95_ms"] = st["latency"]["p50_ms"], st["latency"]["p95_ms"]
    return out


def first_step(report):
    """The first step of a report's one version: what a fixed rate or a concurrency measured."""
    v = version_of(report)
    steps = (v or {}).get("steps") or []
    if not steps:
        return None
    st = steps[0]
    return {"offered_rps": st.get("offered_rps"), "concurrency": st.get("concurrency"), "achieved_rps": st.get("achieved_rps"),
            "p50_ms": st["latency"]["p50_ms"], "p95_ms": st["latency"]["p95_ms"], "ok": st.get("ok"), "sent": st.get("sent"),
            "errors": (st.get("errors") or 0) + (st.get("timeouts") or 0)}


def batch1(report, ver):
    """The batch-1 raw limit of ver in an offline report: texts/s and p50 of one run."""
    for v in report["runs"][0]["versions"] if report else []:
        pts = [p for p in v.get("offline") or [] if p["batch"] == 1]
        if v["version"] == ver and pts:
            return {"items_per_s": pts[0]["items_per_s"], "p50_ms": pts[0]["p50_ms"]}
    return None


def spread(xs):
    """Median and range of the values that are not None; None when there are none."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    return {"median": med, "min": xs[0], "max": xs[-1], "n": n}


def num(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def cell(s, digits=1, unit=""):
    """A spread as "median (min–max)", or the one value when there is one."""
    if not s:
        return "–"
    if s["n"] == 1 or s["min"] == s["max"]:
        return f"{s['median']:.{digits}f}{unit}"
    return f"{s['median']:.{digits}f}{unit} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def ratio(a, b):
    return a / b if a and b else None


def step_text(n, step):
    """How long each search step lasted: --step, or longer until it spanned --min-requests."""
    n = int(n or 0)
    if n > 0:
        return f"steps of {step} or {n} requests, whichever is longer"
    return f"{step} steps"


def collect(raw, meta):
    """Every cell of the run (one server, one workload, version and repeat, from cells.tsv),
    with its numbers, grouped by workload and version."""
    arrivals = meta["arrivals"].split()
    groups = {}
    with open(os.path.join(raw, "cells.tsv")) as f:
        rows = [line.split() for line in f if line.strip()]
    for wl, ver, rep, server, k in rows:
        k = int(k)
        base = os.path.join(raw, f"{wl}-{ver}-{server}-r{rep}")
        # The raw limit measured just before this cell and just after it (before the next,
        # or after the last): the host's speed drifts over a run.
        around = [b for b in (batch1(load(os.path.join(raw, f"offline-{wl}-{ver}-{i}.json")), ver) for i in (k, k + 1)) if b]
        c = {"repeat": int(rep), "order": k, "raw_around": around,
             "raw_batch1": {key: sum(b[key] for b in around) / len(around) for key in ("items_per_s", "p50_ms")} if around else None,
             "arrivals": {a: operating_point(load(f"{base}-{a}.json")) for a in arrivals},
             "saturation": first_step(load(f"{base}-saturation.json")),
             "low_rate": first_step(load(f"{base}-low.json")),
             "cosine": load(os.path.join(raw, f"{wl}-{ver}-{server}-cosine.json"))}
        limit = (c["raw_batch1"] or {}).get("items_per_s")
        for op in c["arrivals"].values():
            if op:
                op["vs_raw"] = ratio(op["best_rps"], limit)
        if c["saturation"]:
            c["saturation"]["vs_raw"] = ratio(c["saturation"]["achieved_rps"], limit)
        g = groups.setdefault((wl, ver), {"workload": wl, "version": ver, "servers": {}, "texts": None})
        g["servers"].setdefault(server, []).append(c)
        w = (load(f"{base}-{arrivals[0]}.json") or {}).get("workload") if arrivals else None
        if w and (g["texts"] is None or (server == "ortserve" and not g["texts"].get("tokens"))):
            g["texts"] = w
    return list(groups.values())


def summarize(g, arrivals):
    """Medians and ranges over repeats of each server's cells, and ortserve's ratios to each
    other server, repeat by repeat (a server's cell and ortserve's of the same repeat ran
    minutes apart, so their ratio is the fairest), then median and range."""
    for name, cells in g["servers"].items():
        g.setdefault("summary", {})[name] = {
            "label": LABELS.get(name, name), "repeats": len(cells),
            "raw_batch1": spread([(c["raw_batch1"] or {}).get("items_per_s") for c in cells]),
            "raw_p50_ms": spread([(c["raw_batch1"] or {}).get("p50_ms") for c in cells]),
            "arrivals": {a: {"best_rps": spread([(c["arrivals"].get(a) or {}).get("best_rps") or None for c in cells]),
                             "vs_raw": spread([(c["arrivals"].get(a) or {}).get("vs_raw") for c in cells]),
                             "p95_ms": spread([(c["arrivals"].get(a) or {}).get("p95_ms") for c in cells])} for a in arrivals},
            "saturation": {k: spread([(c["saturation"] or {}).get(k) for c in cells]) for k in ("achieved_rps", "vs_raw", "p95_ms")},
            "low_rate": {k: spread([(c["low_rate"] or {}).get(k) for c in cells]) for k in ("p50_ms", "p95_ms")},
            "cosine": next((c["cosine"] for c in cells if c["cosine"]), None),
        }
    ours = {c["repeat"]: c for c in g["servers"].get("ortserve", [])}
    g["ortserve_over"] = {}
    for name, cells in g["servers"].items():
        if name == "ortserve" or not ours:
            continue
        by = {c["repeat"]: c for c in cells}
        reps = sorted(set(ours) & set(by))
        r = {a: spread([ratio((ours[i]["arrivals"].get(a) or {}).get("best_rps"), (by[i]["arrivals"].get(a) or {}).get("best_rps")) for i in reps])
             for a in arrivals}
        r["saturation"] = spread([ratio((ours[i]["saturation"] or {}).get("achieved_rps"), (by[i]["saturation"] or {}).get("achieved_rps")) for i in reps])
        g["ortserve_over"][name] = r


def table(raw, out, kv):
    meta = dict(a.split("=", 1) for a in kv)
    servers, arrivals = meta["servers"].split(), meta["arrivals"].split()
    groups = collect(raw, meta)
    for g in groups:
        summarize(g, arrivals)
    have = simd_flags(meta.get("cpu_flags", ""))
    data = {"schema": "ortserve.bench-peers/v2", "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "model": meta["model"], "host": {"cpu_model": meta.get("cpu_model", ""), "simd_flags": have,
                                             "simd_missing": missing_flags(have)},
            "protocol": meta, "groups": groups}
    repeats = int(meta["repeats"])
    cpu = meta.get("cpu_model") or "unknown CPU"
    lacks = missing_flags(have)
    lines = [f"# ortserve against peers, {meta['model']}, each server pinned to one core", "",
             f"- **Date:** {data['date']}"]
    if meta.get("quick") == "1":
        lines.append("- **Quick mode** (`PEERS_QUICK=1`): few, short steps; a smoke test of the script, not a measurement.")
    lines += [f"- **Host:** {cpu}; SIMD flags (lscpu): {' '.join(have) or 'none'}"
             + (f"; lacks {', '.join(lacks)}" if lacks else ""),
             f"- **Servers:** {'; '.join(LABELS.get(s, s) for s in servers)}.",
             f"- **Protocol:** each server alone, pinned with `taskset -c {meta['server_core']}`; the load generator "
             f"(`server bench`, one text a request) pinned to core {meta['generator_core']}. For each workload and version, "
             + (f"{repeats} rounds of the servers in turn ({' '.join(servers)} {' '.join(servers)} …); cells give the median "
                "over rounds and, in brackets, the range. " if repeats > 1 else "one round of the servers in turn. ")
             + "In each: the search for the highest rate "
             f"at the workload's p95 ({', '.join(arrivals)} arrivals; {meta['warmup']} of warm-up a step, at most "
             f"{meta['search_steps']} steps, bisecting to within {float(meta['search_resolution']):.0%}"
             + (f", a failed step that was not saturated measured again up to {meta['search_confirm']}×" if int(meta.get("search_confirm") or 0) else "")
             + f"); saturation, {meta['clients']} closed-loop clients for one step; then a low fixed rate.",
             f"- **Raw limit:** `server bench --offline --offline-batches 1` on core {meta['server_core']} with the "
             "workload's texts: one session, one intra-op thread, pre-tokenized, no HTTP; measured before each server "
             "and after the last, and each server's × raw is to the mean of the two around it.",
             "- **Same answers:** each server's /embed vectors for the first 8 texts of each workload were checked "
             f"against ortserve's (cosine ≥ {meta['min_cosine']}) before it was measured.",
             f"- **Texts:** the {meta['texts']} set" + (" (held back: never used in tuning)" if meta['texts'] == "held-back" else "") + ":"]
    for wl in meta["workloads"].split():
        g = next((g for g in groups if g["workload"] == wl), None)
        w = (g or {}).get("texts") or {}
        tok = w.get("tokens") or {}
        lines.append(f"  - {WORKLOAD_NAMES.get(wl, wl)}: {meta.get('source_' + wl, w.get('source', '?'))}; "
                     f"{w.get('texts', '?')} texts, tokens per text p50 {num(tok.get('p50'), 0)}, p95 {num(tok.get('p95'), 0)}, "
                     f"max {num(tok.get('max'), 0)} (ortserve's count, cut at max_length); p95 ≤ {meta['slo_' + wl].split(',')[0].split('=', 1)[-1]}, "
                     f"{step_text(meta['min_requests_' + wl], meta['step'])}; low rate {meta['low_rate_' + wl]} rps.")
    lines.append("")
    for g in groups:
        wl, ver, s = g["workload"], g["version"], g["summary"]
        p95 = meta["slo_" + wl].split(",")[0].split("=", 1)[-1]
        head = "| server | " + " | ".join(f"rps at p95 ≤ {p95}, {a} | × raw" for a in arrivals) + \
            f" | saturation rps, {meta['clients']} clients | × raw | p95 there (ms) | raw batch-1 limit (texts/s) |"
        lines += [f"## {WORKLOAD_NAMES.get(wl, wl)}, {ver}", "", head,
                  "|---|" + "---:|---:|" * len(arrivals) + "---:|---:|---:|---:|"]
        for name in servers:
            se = s.get(name)
            if not se:
                continue
            cols = []
            for a in arrivals:
                op = se["arrivals"][a]
                cols += [cell(op["best_rps"]) if op["best_rps"] else f"none (p95 > {p95} at every rate tried)", cell(op["vs_raw"], 2, "×")]
            sat = se["saturation"]
            lines.append(f"| {se['label']} | " + " | ".join(cols) +
                         f" | {cell(sat['achieved_rps'])} | {cell(sat['vs_raw'], 2, '×')} | {cell(sat['p95_ms'])} | {cell(se['raw_batch1'])} |")
        if g["ortserve_over"]:
            lines += ["", f"ortserve (default settings) ÷ each, repeat by repeat ({WORKLOAD_NAMES.get(wl, wl)}, {ver}):", "",
                      "| ortserve ÷ | " + " | ".join(f"at p95 ≤ {p95}, {a}" for a in arrivals) + " | saturation |",
                      "|---|" + "---:|" * (len(arrivals) + 1)]
            for name in servers:
                r = g["ortserve_over"].get(name)
                if r:
                    lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(cell(r[a], 2, "×") for a in arrivals) +
                                 f" | {cell(r['saturation'], 2, '×')} |")
        lines.append("")
    lines += ["## Latency at a low rate, constant arrivals", "",
              "| workload | version | server | rate (rps) | p50 (ms) | p95 (ms) | raw batch-1 p50 (ms) |",
              "|---|---|---|---:|---:|---:|---:|"]
    for g in groups:
        for name in servers:
            se = g["summary"].get(name)
            if se:
                lines.append(f"| {WORKLOAD_NAMES.get(g['workload'], g['workload'])} | {g['version']} | {se['label']} | "
                             f"{meta['low_rate_' + g['workload']]} | {cell(se['low_rate']['p50_ms'])} | "
                             f"{cell(se['low_rate']['p95_ms'])} | {cell(se['raw_p50_ms'], 2)} |")
    lines += ["", "## Same answers: cosine to ortserve's /embed, one text a request", "",
              "| workload | version | server | texts | min | mean |", "|---|---|---|---:|---:|---:|"]
    for g in groups:
        for name in servers:
            se = g["summary"].get(name)
            if se and name != "ortserve":
                c = se["cosine"]
                lines.append(f"| {WORKLOAD_NAMES.get(g['workload'], g['workload'])} | {g['version']} | {se['label']} | "
                             f"{c['texts'] if c else '–'} | {num(c and c['min'], 6)} | {num(c and c['mean'], 6)} |")
    lines += ["", "The bench reports behind every number are in `raw/` (JSON, and the terminal text next to each); "
              "cells.tsv lists the cells in the order they ran, and texts-*.txt the texts sent."]
    for g in groups:
        g["servers"] = [{"server": k, "cells": v} for k, v in g["servers"].items()]
    with open(os.path.join(out, "peers.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "peers.json"), "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print("\n".join(lines))

def main():
    cmds = {"model-file": (model_file, 2), "wait": (wait, 3), "embed": (embed, 5), "compare": (compare, 4),
            "tokenizer": (tokenizer, 3)}
    if len(sys.argv) >= 2 and sys.argv[1] in cmds and len(sys.argv) - 2 == cmds[sys.argv[1]][1]:
        cmds[sys.argv[1]][0](*sys.argv[2:])
    elif len(sys.argv) >= 7 and sys.argv[1] == "texts":
        texts(*sys.argv[2:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
