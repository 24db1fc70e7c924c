"""Helpers of the GPU check (scripts/gpu-pack.sh here, gpu-check.sh on the GPU host).

usage: python gpucheck.py strip   --src MODEL_DIR --out DIR      (here: numpy + onnx, the model venv)
       python gpucheck.py fill    --src DIR --out REPO [--seed N] (there: numpy + onnx)
       python gpucheck.py info    URL                             (stdlib only, from here on)
       python gpucheck.py compare --a URL --b URL --versions fp32,fp16,int8 --min fp32=0.999,... --json F
       python gpucheck.py placement INSPECT.json
       python gpucheck.py benchsum LABEL=BENCH.json ...

The MiniLM weights are too large to send beside ONNX Runtime's CUDA libraries (64 MiB per
transfer: fp32 is 87 MB, fp16 44 MB, int8 22 MB). `strip` keeps each built graph (fp32, fp16,
int8) whole but empties its large tensors (the embeddings and the weight matrices: every
initializer of 16384 elements or more), recording each one's shape, type, mean, standard
deviation and range. `fill` gives those tensors seeded random values of the same type, shape,
mean and spread. The graphs are exactly the ones `make models` built, operators, opsets and
quantization included, so placement and throughput are honest; the outputs are not MiniLM's,
so accuracy means nothing. Biases, LayerNorm parameters and quantization scales and zero
points (small) are kept as built.
"""
import argparse
import json
import math
import os
import sys
import time
import urllib.request
import zlib
from pathlib import Path

VERSIONS = ("fp32", "fp16", "int8")
BIG = 16384  # elements: from here on a tensor is a weight matrix or an embedding table
STRICT_VERSIONS = ("fp32", "fp16")  # the versions that must load with no CPU fallback

# Texts whose embeddings the CUDA and CPU servers must agree on: short, medium, and two past
# max_length (256 tokens), so truncation and the longest shapes are covered too.
TEXTS = [
    "hello world",
    "A gorgeous, moving film with a terrific cast.",
    "The plot is thin and the jokes fall flat.",
    "How do I reset my password?",
    "Shipping took three weeks and the box arrived damaged.",
    "The quick brown fox jumps over the lazy dog.",
    "Transformers use self-attention to mix information across tokens.",
    "I would not recommend this to anyone.",
    "Is there a vegetarian option on the menu tonight?",
    "Quarterly revenue rose 12% on strong demand for data-center GPUs.",
    "ok",
    "Ça marche très bien, merci beaucoup !",
    "The battery lasts two days, the screen is sharp, and the speakers are surprisingly loud "
    "for a phone this thin; the camera struggles in low light, though.",
    "Please summarize the attached report and list the three most important risks it names, "
    "with one sentence of explanation for each.",
    " ".join(["The committee met again on Tuesday to discuss the budget, the schedule and the "
              "staffing plan for the next quarter."] * 12),
    " ".join(["numbers 1234 5678 and symbols #@! mixed with words"] * 40),
]


def die(msg):
    print(f"gpucheck: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


# ---- strip (here) and fill (there) -------------------------------------------------------

def strip(a):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    src, out = Path(a.src), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for v in VERSIONS:
        m = onnx.load(str(src / f"{v}.onnx"))
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer):
            die(f"{src / v}.onnx keeps its weights in an external file; strip reads one file")
        kept = {}
        for t in m.graph.initializer:
            n = math.prod(t.dims) if t.dims else 1
            if n < BIG:
                continue
            x = numpy_helper.to_array(t)
            if x.dtype.kind not in "fiu":
                continue
            x64 = x.astype(np.float64)
            kept[t.name] = {"dims": list(t.dims), "dtype": str(x.dtype), "mean": float(x64.mean()),
                            "std": float(x64.std()), "min": float(x64.min()), "max": float(x64.max())}
            # Empty the tensor where it stands, so that the graph keeps its order and fill
            # only has to put the bytes back.
            t.ClearField("raw_data")
            for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                t.ClearField(f)
        onnx.save(m, str(out / f"{v}.skel.onnx"))
        stats[v] = kept
        print(f"gpucheck: {v}: {len(kept)} tensors emptied, skeleton "
              f"{(out / f'{v}.skel.onnx').stat().st_size / 1e3:.0f} kB", flush=True)
    (out / "weights.json").write_text(json.dumps({"big": BIG, "tensors": stats}, indent=1) + "\n")
    # Only the versions packed: the build has more (int8-static) than the check measures.
    lines = [l for l in (src / "model.yaml").read_text().splitlines()
             if not l.startswith("gate:")
             and not (l.startswith("  ") and l.strip().split(":")[0] not in VERSIONS)]
    (out / "model.yaml").write_text("\n".join(lines) + "\n")
    strict = [l for l in lines
              if not (l.startswith("  ") and l.strip().split(":")[0] not in STRICT_VERSIONS)]
    (out / "model.strict.yaml").write_text("\n".join(strict) + "\n")
    (out / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())


def fill(a):
    import numpy as np
    import onnx

    src, out = Path(a.src), Path(a.out)
    stats = json.loads((src / "weights.json").read_text())["tensors"]
    full, strict = out / "all" / "minilm", out / "strict" / "minilm"
    full.mkdir(parents=True, exist_ok=True)
    strict.mkdir(parents=True, exist_ok=True)
    for v in VERSIONS:
        t0 = time.perf_counter()
        m = onnx.load(str(src / f"{v}.skel.onnx"))
        todo = stats[v]
        for t in m.graph.initializer:
            s = todo.get(t.name)
            if s is None:
                continue
            rng = np.random.default_rng([a.seed, zlib.crc32(f"{v}/{t.name}".encode())])
            x = rng.standard_normal(s["dims"], dtype=np.float32)
            x *= s["std"]
            x += s["mean"]
            dt = np.dtype(s["dtype"])
            if dt.kind in "iu":
                x = np.clip(np.rint(x), s["min"], s["max"])
            t.raw_data = x.astype(dt).tobytes()
        missing = set(todo) - {t.name for t in m.graph.initializer}
        if missing:
            die(f"{v}: tensors {sorted(missing)[:3]} of weights.json are not in the skeleton")
        onnx.save(m, str(full / f"{v}.onnx"))
        print(f"gpucheck: {v}.onnx: {len(todo)} tensors of random weights (seed {a.seed}), "
              f"{(full / f'{v}.onnx').stat().st_size / 1e6:.1f} MB, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    for f in ("model.yaml", "tokenizer.json"):
        (full / f).write_bytes((src / f).read_bytes())
    (strict / "model.yaml").write_bytes((src / "model.strict.yaml").read_bytes())
    (strict / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    for v in STRICT_VERSIONS:
        try:
            os.link(full / f"{v}.onnx", strict / f"{v}.onnx")
        except OSError:
            (strict / f"{v}.onnx").write_bytes((full / f"{v}.onnx").read_bytes())


# ---- talking to servers (stdlib only) ----------------------------------------------------

def get_json(url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def info(a):
    i = get_json(a.url.rstrip("/") + "/info")
    print(json.dumps({k: i.get(k) for k in ("version", "ort_version", "device", "provider",
                                             "fallback_reason")}))


def cosine(x, y):
    dot = sum(p * q for p, q in zip(x, y))
    nx = math.sqrt(sum(p * p for p in x))
    ny = math.sqrt(sum(q * q for q in y))
    return dot / (nx * ny) if nx and ny else float("nan")


def compare(a):
    """Embeds TEXTS on both servers, one request at a time in the same order (so that a
    dynamically quantized version sees the same batches on both), and compares rows."""
    need = dict(kv.split("=") for kv in a.min.split(",")) if a.min else {}
    res, ok = {}, True
    for v in a.versions.split(","):
        cos = []
        t = {"a": 0.0, "b": 0.0}
        try:
            for i in range(0, len(TEXTS), 4):
                chunk = TEXTS[i:i + 4]
                got = {}
                for side, url in (("a", a.a), ("b", a.b)):
                    t0 = time.perf_counter()
                    got[side] = get_json(url.rstrip("/") + "/embed",
                                         {"inputs": chunk, "version": v, "model": "minilm"})
                    t[side] += time.perf_counter() - t0
                cos += [cosine(x, y) for x, y in zip(got["a"], got["b"])]
        except Exception as e:  # noqa: BLE001: report and go on with the next version
            res[v] = {"error": str(e)[:300], "pass": False}
            ok = False
            print(f"{v}: FAIL: {e}", flush=True)
            continue
        lo = min(cos)
        finite = all(math.isfinite(c) for c in cos)
        want = float(need.get(v, 0.99))
        good = finite and lo >= want
        ok = ok and good
        res[v] = {"texts": len(cos), "cosine_min": lo, "cosine_mean": sum(cos) / len(cos),
                  "min_required": want, "pass": good, "seconds_a": round(t["a"], 3),
                  "seconds_b": round(t["b"], 3)}
        print(f"{v}: {'PASS' if good else 'FAIL'}: cosine min {lo:.6f} mean "
              f"{sum(cos) / len(cos):.6f} over {len(cos)} texts (need min >= {want}); "
              f"{a.alabel} {t['a']:.2f} s, {a.blabel} {t['b']:.2f} s", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"a": a.alabel, "b": a.blabel, "versions": res},
                                           indent=1) + "\n")
    sys.exit(0 if ok else 1)


# ---- reading reports ---------------------------------------------------------------------

def placement(a):
    """One line per version of a `server inspect --json` report: nodes per provider, and the
    operators put on CPU when the sessions had another provider."""
    r = json.loads(Path(a.file).read_text())
    print(f"inspect: device {r.get('device')} -> {r.get('provider')}"
          + (f" (fallback: {r['fallback_reason']})" if r.get("fallback_reason") else ""))
    for f in r.get("files", []):
        name = f.get("version") or f["file"]["path"]
        p = f.get("placement")
        if not p:
            print(f"  {name}: placement not seen: {f.get('placement_error', '?')}")
            continue
        per = ", ".join(f"{c['provider']}:{c['nodes']}" for c in p.get("providers", []))
        cpu = [f"{o['op']}:{o['nodes']}" for o in p.get("ops", [])
               if o.get("provider") == "CPUExecutionProvider"]
        line = f"  {name}: {p['nodes']} nodes ran ({per})"
        if p.get("provider") != "CPUExecutionProvider":
            line += "; on CPU: " + (", ".join(cpu) if cpu else "none")
        print(line)


def benchsum(a):
    """One line per bench report and version: the highest rate meeting the SLO, the latency
    there, and the most answers per second any step got."""
    for arg in a.files:
        label, path = arg.split("=", 1)
        try:
            r = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            print(f"{label}: no report ({e})")
            continue
        slo = r.get("slo") or {}
        for v in r["runs"][0]["versions"]:
            steps = v.get("steps", [])
            best = v.get("best_rps", 0)
            at = next((s for s in steps if s.get("offered_rps") == best and s.get("pass")), None)
            peak = max((s.get("achieved_rps", 0) for s in steps), default=0)
            line = (f"{label} {v.get('version') or v['name']}: best {best:g} rps at p95 <= "
                    f"{slo.get('p95_ms', '?')} ms")
            if at:
                lat = at["latency"]
                line += (f" (p50 {lat['p50_ms']:.1f} / p95 {lat['p95_ms']:.1f} / p99 "
                         f"{lat['p99_ms']:.1f} ms, dominant {at.get('dominant', '?')})")
            line += f"; peak {peak:.0f} answers/s over {len(steps)} steps"
            print(line)


def curve(a):
    """The cost curve each version of the model learned (/info's scheduling), one line per
    version and padded length: predicted ms of a batch by rows, and the per-text cost of the
    largest batch against one text's; the whole /info to --json. On a GPU, where batching
    pays, per-text cost falls far below 1; on a CPU it stays near or above it."""
    i = get_json(a.url.rstrip("/") + "/info")
    if a.json:
        Path(a.json).write_text(json.dumps(i, indent=1))
    for m in i.get("models", []):
        if a.model and m["name"] != a.model:
            continue
        for version, st in sorted((m.get("scheduling") or {}).items()):
            cost = st.get("cost", {})
            by_tokens = {}
            for p in cost.get("curve") or []:
                by_tokens.setdefault(p["tokens"], []).append(p)
            for tokens, pts in sorted(by_tokens.items()):
                rows = " ".join(f"{p['rows']}:{p['ms']:.2f}" for p in pts)
                print(f"{m['name']}/{version} tokens {tokens}: ms by rows {rows}; "
                      f"per text at {pts[-1]['rows']} rows {pts[-1]['per_text_vs1']:.3f} x one text's "
                      f"({cost.get('observations', 0)} runs learned, discount {cost.get('discount', 0):.2f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("strip")
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("fill")
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("info")
    p.add_argument("url")
    p = sub.add_parser("compare")
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--alabel", default="a")
    p.add_argument("--blabel", default="b")
    p.add_argument("--versions", default=",".join(VERSIONS))
    p.add_argument("--min", default="")
    p.add_argument("--json")
    p = sub.add_parser("placement")
    p.add_argument("file")
    p = sub.add_parser("benchsum")
    p.add_argument("files", nargs="+")
    p = sub.add_parser("curve")
    p.add_argument("url")
    p.add_argument("--model", default="minilm")
    p.add_argument("--json")
    a = ap.parse_args()
    {"strip": strip, "fill": fill, "info": info, "compare": compare, "placement": placement,
     "benchsum": benchsum, "curve": curve}[a.cmd](a)


if __name__ == "__main__":
    main()
