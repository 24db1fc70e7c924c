"""Helpers of scripts/bench-peers.sh, run with the peers venv's Python:

  peers.py model-file MODEL_DIR VERSION      the version's ONNX file and max_length, from model.yaml
  peers.py wait URL SECONDS PID              until POST URL/embed answers 200 (or PID exits)
  peers.py embed URL MODEL VERSION TEXTS OUT one /embed request per text, the vectors to OUT
  peers.py compare REF.json GOT.json MIN OUT the least cosine between the two; exit 1 under MIN
  peers.py table RAW_DIR OUT_DIR KEY=VALUE...  peers.md and peers.json from the bench reports

Everything but model-file uses the standard library only.
"""

import datetime
import json
import math
import os
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


# --- the table -------------------------------------------------------------------------

LABELS = {
    "ortserve": "ortserve, default settings",
    "hugot": "hugot v0.6.1 (Go + ORT, no batching)",
    "fastapi": "FastAPI + onnxruntime (no batching)",
}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def operating_point(report):
    """The best rate meeting the SLO and the p50/p95 of that step, from a bench report."""
    if not report:
        return None
    v = report["runs"][0]["versions"][0]
    best = v.get("best_rps") or 0
    out = {"best_rps": best, "p50_ms": None, "p95_ms": None, "steps": len(v.get("steps") or [])}
    for st in v.get("steps") or []:
        if best and st.get("offered_rps") == best:
            out["p50_ms"], out["p95_ms"] = st["latency"]["p50_ms"], st["latency"]["p95_ms"]
    return out


def low_rate(report):
    if not report:
        return None
    steps = report["runs"][0]["versions"][0].get("steps") or []
    if not steps:
        return None
    st = steps[0]
    return {"rate": st.get("offered_rps"), "p50_ms": st["latency"]["p50_ms"], "p95_ms": st["latency"]["p95_ms"],
            "ok": st.get("ok"), "sent": st.get("sent")}


def num(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def times(r):
    return "–" if r is None else f"{r:.2f}×"


def step_text(meta):
    """How long each search step lasted: --step, or longer until it spanned --min-requests."""
    n = int(meta.get('min_requests') or 0)
    if n > 0:
        return f"search steps of {meta['step']} or {n} requests, whichever is longer (`--min-requests {n}`),"
    return f"{meta['step']} steps"


def confirm_text(meta):
    """How often a failed search step was measured again (--search-confirm) before its rate failed."""
    n = int(meta.get('search_confirm') or 0)
    if n > 0:
        return f", a failed step that was not saturated measured again up to {n}× before its rate failed (`--search-confirm {n}`)"
    return ""


def table(raw, out, kv):
    meta = dict(a.split("=", 1) for a in kv)
    versions, servers, arrivals = meta["versions"].split(), meta["servers"].split(), meta["arrivals"].split()
    model, slo, low = meta["model"], meta["slo"], meta["low_rate"]
    offline = load(os.path.join(raw, "offline.json"))
    raw_limit = {}
    for v in offline["runs"][0]["versions"] if offline else []:
        pts = [p for p in v.get("offline") or [] if p["batch"] == 1]
        if pts:
            raw_limit[v["version"]] = {"items_per_s": pts[0]["items_per_s"], "p50_ms": pts[0]["p50_ms"]}

    def batch1(name, ver):
        r = load(os.path.join(raw, name + ".json"))
        for v in r["runs"][0]["versions"] if r else []:
            pts = [p for p in v.get("offline") or [] if p["batch"] == 1]
            if v["version"] == ver and pts:
                return {"items_per_s": pts[0]["items_per_s"], "p50_ms": pts[0]["p50_ms"]}
        return None

    data = {"schema": "ortserve.bench-peers/v1", "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "model": model, "protocol": meta, "versions": []}
    for ver in versions:
        entry = {"version": ver, "raw_batch1": raw_limit.get(ver), "servers": []}
        for i, s in enumerate(servers):
            # The raw limit measured just before this server and just after it (before the
            # next server, or after the last): the host's speed drifts over a run.
            after = f"offline-{ver}-before-{servers[i + 1]}" if i + 1 < len(servers) else f"offline-{ver}-after"
            around = [b for b in (batch1(f"offline-{ver}-before-{s}", ver), batch1(after, ver)) if b]
            se = {"server": s, "label": LABELS.get(s, s), "arrivals": {},
                  "raw_around": around,
                  "low_rate": low_rate(load(os.path.join(raw, f"{ver}-{s}-low.json"))),
                  "cosine": load(os.path.join(raw, f"{ver}-{s}-cosine.json"))}
            for a in arrivals:
                se["arrivals"][a] = operating_point(load(os.path.join(raw, f"{ver}-{s}-{a}.json")))
            entry["servers"].append(se)
        data["versions"].append(entry)
    # Ratios: to the raw batch-1 limit measured around each server (the mean of the limits just
    # before and after it; the run's first one when there are none), and ortserve's best rate
    # over each server's.
    for entry in data["versions"]:
        ours = next((s for s in entry["servers"] if s["server"] == "ortserve"), None)
        for se in entry["servers"]:
            around = se["raw_around"] or ([entry["raw_batch1"]] if entry["raw_batch1"] else [])
            se["raw_batch1"] = {k: sum(b[k] for b in around) / len(around) for k in ("items_per_s", "p50_ms")} if around else None
            limit = (se["raw_batch1"] or {}).get("items_per_s")
            for a, op in se["arrivals"].items():
                if not op:
                    continue
                op["vs_raw"] = op["best_rps"] / limit if limit and op["best_rps"] else None
                o = ours and ours["arrivals"].get(a)
                op["ortserve_over_this"] = o["best_rps"] / op["best_rps"] if o and o["best_rps"] and op["best_rps"] else None

    p95 = slo.split(",")[0].split("=", 1)[-1]
    lines = [f"# ortserve against peers, {model}, each server pinned to one core", "",
             f"- **Date:** {data['date']}",
             f"- **Protocol:** each server alone, pinned with `taskset -c {meta['server_core']}`; the load generator "
             f"(`server bench`, built-in texts, one text a request) pinned to core {meta['generator_core']}; "
             f"search for the highest rate with p95 ≤ {p95} (`--slo {slo}`), {step_text(meta)} after {meta['warmup']} "
             f"of warm-up, at most {meta['search_steps']} steps a search, bisecting to within {float(meta.get('search_resolution', 0.1)):.0%}{confirm_text(meta)}; then {low} rps, constant arrivals.",
             f"- **Raw limit:** `server bench --offline --offline-batches 1` on core {meta['server_core']}: one session, "
             "one intra-op thread, pre-tokenized texts, no HTTP; measured at the start, then again just before each "
             "server and after the last. Each server's ratios are to the mean of the two limits measured around it "
             "(the host's speed drifts over a run).",
             "- **Same answers:** every peer's /embed vectors were checked against ortserve's for the same version "
             f"(cosine ≥ {meta['min_cosine']}) before it was measured.", ""]
    lines += [f"## Highest rate at p95 ≤ {p95}", "",
              "| version | arrival | server | best rps | p50 / p95 there (ms) | raw limit around it (texts/s) | × raw batch-1 limit | ortserve ÷ this |",
              "|---|---|---|---:|---|---|---:|---:|"]
    for entry in data["versions"]:
        rl = entry["raw_batch1"]
        for a in arrivals:
            if rl:
                lines.append(f"| {entry['version']} | {a} | raw ORT limit, batch 1 (`bench --offline`), at the start | "
                             f"{num(rl['items_per_s'])} texts/s | {num(rl['p50_ms'], 2)} (one run) | | 1.00× | |")
            for se in entry["servers"]:
                op = se["arrivals"].get(a)
                if not op:
                    lines.append(f"| {entry['version']} | {a} | {se['label']} | not measured | | | | |")
                    continue
                best = num(op["best_rps"]) if op["best_rps"] else f"none (p95 > {p95} at every rate tried)"
                around = " → ".join(num(b["items_per_s"]) for b in se["raw_around"]) or "–"
                lines.append(f"| {entry['version']} | {a} | {se['label']} | {best} | "
                             f"{num(op['p50_ms'])} / {num(op['p95_ms'])} | {around} | "
                             f"{times(op.get('vs_raw'))} | {times(op.get('ortserve_over_this'))} |")
    lines += ["", f"## Latency at a low rate: {low} rps, constant arrivals", "",
              "| version | server | p50 (ms) | p95 (ms) | raw batch-1 p50 around it (ms) | p50 − raw p50 (ms) |",
              "|---|---|---:|---:|---:|---:|"]
    for entry in data["versions"]:
        for se in entry["servers"]:
            rl = se["raw_batch1"] or {}
            lr = se["low_rate"]
            if not lr:
                lines.append(f"| {entry['version']} | {se['label']} | – | – | {num(rl.get('p50_ms'), 2)} | – |")
                continue
            d = lr["p50_ms"] - rl["p50_ms"] if rl.get("p50_ms") else None
            lines.append(f"| {entry['version']} | {se['label']} | {num(lr['p50_ms'])} | {num(lr['p95_ms'])} | "
                         f"{num(rl.get('p50_ms'), 2)} | {num(d)} |")
    lines += ["", "## Same answers: cosine to ortserve's /embed, one text a request", "",
              "| version | server | texts | min | mean |", "|---|---|---:|---:|---:|"]
    for entry in data["versions"]:
        for se in entry["servers"]:
            c = se["cosine"]
            if se["server"] != "ortserve":
                lines.append(f"| {entry['version']} | {se['label']} | {c['texts'] if c else '–'} | "
                             f"{num(c and c['min'], 6)} | {num(c and c['mean'], 6)} |")
    lines += ["", "The bench reports behind every number are in `raw/` (JSON, and the terminal text next to each)."]
    with open(os.path.join(out, "peers.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "peers.json"), "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print("\n".join(lines))


def main():
    cmds = {"model-file": (model_file, 2), "wait": (wait, 3), "embed": (embed, 5), "compare": (compare, 4)}
    if len(sys.argv) >= 2 and sys.argv[1] in cmds and len(sys.argv) - 2 == cmds[sys.argv[1]][1]:
        cmds[sys.argv[1]][0](*sys.argv[2:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
