"""The SPLADE and Dense test folders (build.py; MODELS_DIR/layouts/splade, layouts/dense) and
their references (reference.py; golden/splade.json, golden/dense.json).

  splade/  a sentence-transformers SparseEncoder as SparseEncoder.save() lays it out, with the
           ONNX graph where the ONNX backend saves it: config.json BertForMaskedLM, modules.json
           (MLMTransformer, SpladePooling), 1_SpladePooling/config.json (max, relu),
           sentence_bert_config.json, config_sentence_transformers.json (SparseEncoder),
           model.safetensors (bert.* and cls.predictions.*), tokenizer files, onnx/model.onnx:
           the MiniLM encoder + BertForMaskedLM's head, output logits [batch, sequence, 30522].
           Nobody trained the head: its transform is the identity (dense = I, bias 0;
           LayerNorm 1, 0), its decoder the word embeddings (tied, as transformers ties
           them) and its bias SPLADE_BIAS for every word. A token's logits are then its
           normalized hidden state against each word's embedding, and the bias keeps the words
           that are close: 100-300 terms a text, the text's own words and their neighbours
           ("hello world": hello, world, worlds, hi, greeting), the way a trained SPLADE
           model expands a text. Deterministic, with no random numbers.
  dense/   the sentence-transformers MiniLM folder (layouts.py's) with a Dense module between
           pooling and Normalize: modules.json (Transformer, Pooling, Dense, Normalize),
           2_Dense/config.json (384 -> DENSE_OUT, bias, Tanh), 2_Dense/model.safetensors
           (linear.weight [out, in], linear.bias: torch.nn.Linear's initial U(-1/sqrt(in),
           1/sqrt(in)) from numpy's generator seeded DENSE_SEED), onnx/model.onnx =
           minilm/fp32.onnx (last_hidden_state: the server runs pooling, Dense and Normalize).

SPLADE pooling is sentence-transformers' SpladePooling(max, relu): per vocabulary word, the
largest log(1 + relu(logit)) over the text's tokens (padding masked to 0).
"""
import json
import shutil
from pathlib import Path

import numpy as np

from common import MAX_LENGTH, sig, write_json

SPLADE_BIAS = -4.0
DENSE_OUT = 128
DENSE_SEED = 0
DENSE_ACTIVATION = "torch.nn.modules.activation.Tanh"
ST_VERSION = {"sentence_transformers": "5.1.2", "transformers": "4.57.1", "pytorch": "2.8.0"}
SPLADE_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
    {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": "sentence_transformers.sparse_encoder.models.SpladePooling"},
]
DENSE_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"},
]


def mlm_weights(cfg, w):
    """w (the encoder's, keyed as the package's safetensors) with BertForMaskedLM's head added."""
    hid, vocab = cfg["hidden_size"], cfg["vocab_size"]
    return {**w,
            "cls.predictions.transform.dense.weight": np.eye(hid, dtype=np.float32),
            "cls.predictions.transform.dense.bias": np.zeros(hid, np.float32),
            "cls.predictions.transform.LayerNorm.weight": np.ones(hid, np.float32),
            "cls.predictions.transform.LayerNorm.bias": np.zeros(hid, np.float32),
            "cls.predictions.bias": np.full(vocab, SPLADE_BIAS, np.float32)}


def dense_weights(in_features, out_features=DENSE_OUT):
    rng = np.random.default_rng(DENSE_SEED)
    bound = 1.0 / np.sqrt(in_features)
    return {"linear.weight": rng.uniform(-bound, bound, (out_features, in_features)).astype(np.float32),
            "linear.bias": rng.uniform(-bound, bound, out_features).astype(np.float32)}


def _hf_config(src, architecture):
    cfg = json.loads((Path(src) / "config.json").read_text())
    for k in ("_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    cfg["architectures"] = [architecture]
    return dict(sorted(cfg.items()))


def splade_layout(src, graph, cfg, w, dst, copy_tokenizer):
    """dst/: the SparseEncoder folder; graph: the ModelProto of bertonnx.build(..., "mlm")."""
    import onnx
    from safetensors.numpy import save_file

    (dst / "onnx").mkdir(parents=True)
    write_json(dst / "config.json", _hf_config(src, "BertForMaskedLM"))
    copy_tokenizer(src, dst)
    write_json(dst / "modules.json", SPLADE_MODULES)
    write_json(dst / "1_SpladePooling" / "config.json", {
        "pooling_strategy": "max", "activation_function": "relu", "word_embedding_dimension": cfg["vocab_size"]})
    write_json(dst / "sentence_bert_config.json", {"max_seq_length": MAX_LENGTH, "do_lower_case": False})
    write_json(dst / "config_sentence_transformers.json", {
        "model_type": "SparseEncoder", "__version__": ST_VERSION, "prompts": {"query": "", "document": ""},
        "default_prompt_name": None, "similarity_fn_name": "dot"})
    tensors = {(k if k.startswith("cls.") else "bert." + k): v for k, v in w.items()}
    save_file({k: tensors[k] for k in sorted(tensors)}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    onnx.save(graph, str(dst / "onnx" / "model.onnx"))


def dense_layout(st_layout, dst):
    """dst/: layouts.py's sentence-transformers folder (st_layout) with a Dense module."""
    from safetensors.numpy import save_file

    shutil.copytree(st_layout, dst, copy_function=_link)
    shutil.rmtree(dst / "2_Normalize")
    (dst / "modules.json").unlink()  # a hard link to st_layout's: write a new file, not through it
    write_json(dst / "modules.json", DENSE_MODULES)
    cfg = json.loads((dst / "config.json").read_text())
    write_json(dst / "2_Dense" / "config.json", {
        "in_features": cfg["hidden_size"], "out_features": DENSE_OUT, "bias": True,
        "activation_function": DENSE_ACTIVATION})
    save_file(dense_weights(cfg["hidden_size"]), str(dst / "2_Dense" / "model.safetensors"))
    (dst / "3_Normalize").mkdir()


def _link(src, dst):
    import os

    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def splade_pool(logits, mask):
    """SpladePooling(max, relu): logits [batch, sequence, vocab], mask [batch, sequence] ->
    [batch, vocab] float64."""
    x = np.log1p(np.maximum(np.asarray(logits, np.float64), 0.0))
    return (x * (np.asarray(mask)[:, :, None] > 0)).max(axis=1)


def _numpy_mlm(folder):
    """The float64 numpy model of splade/ read from its model.safetensors (berttrain's encoder
    and the head written out here): logits(ids, types, mask) -> [batch, sequence, vocab]."""
    from safetensors.numpy import load_file
    from scipy.special import erf

    import berttrain

    cfg = json.loads((folder / "config.json").read_text())
    t = load_file(str(folder / "model.safetensors"))
    bert = berttrain.Bert(cfg, {k.removeprefix("bert."): v for k, v in t.items() if k.startswith("bert.")})
    h64 = {k: t[k].astype(np.float64) for k in t if k.startswith("cls.")}
    emb = t["bert.embeddings.word_embeddings.weight"].astype(np.float64)
    eps = cfg["layer_norm_eps"]

    def logits(ids, types, mask):
        p = "cls.predictions.transform."
        x = bert.last_hidden_state(ids, types, mask) @ h64[p + "dense.weight"].T + h64[p + "dense.bias"]
        x = 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
        mu = x.mean(-1, keepdims=True)
        x = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
        x = x * h64[p + "LayerNorm.weight"] + h64[p + "LayerNorm.bias"]
        return x @ emb.T + h64["cls.predictions.bias"]

    return logits


def splade_golden(models, texts, tok, feeds_one, ort_default):
    """golden/splade.json: per text (alone) the non-zero entries of layouts/splade's pooled
    output from onnxruntime, by index; the header has the largest difference, over every
    vocabulary entry of every text, from the float64 numpy model."""
    folder = models / "layouts" / "splade"
    sess = ort_default(folder / "onnx" / "model.onnx")
    ref = _numpy_mlm(folder)
    items, diff = [], 0.0
    for i, t in enumerate(texts):
        f = feeds_one(tok, t)
        (z,) = sess.run(["logits"], f)
        got = splade_pool(z, f["attention_mask"])[0]
        want = splade_pool(ref(f["input_ids"], f["token_type_ids"], f["attention_mask"]), f["attention_mask"])[0]
        diff = max(diff, float(np.abs(got - want).max()))
        nz = np.flatnonzero(got)
        items.append({"index": i, "indices": nz.tolist(), "values": [sig(v) for v in got[nz]]})
    header = {"model": "layouts/splade", "pooling": "max over the text's tokens of log(1 + relu(logits))",
              "vocab": int(z.shape[-1]), "decoder_bias": SPLADE_BIAS,
              "max_abs_diff_ort_vs_numpy64": diff, "max_length": MAX_LENGTH}
    return header, items


def dense_golden(models, texts, tok, feeds_one, ort_default):
    """golden/dense.json: per text (alone) layouts/dense's embedding: minilm/fp32.onnx, mean
    pooling, Dense (x·Wᵀ + b, tanh), L2 normalize, in float64 from the folder's files."""
    from safetensors.numpy import load_file

    folder = models / "layouts" / "dense"
    sess = ort_default(folder / "onnx" / "model.onnx")
    d = {k: v.astype(np.float64) for k, v in load_file(str(folder / "2_Dense" / "model.safetensors")).items()}
    items = []
    for i, t in enumerate(texts):
        f = feeds_one(tok, t)
        (h,) = sess.run(["last_hidden_state"], f)
        m = f["attention_mask"][0][:, None].astype(np.float64)
        pooled = (h[0].astype(np.float64) * m).sum(0) / max(m.sum(), 1e-9)
        y = np.tanh(d["linear.weight"] @ pooled + d["linear.bias"])
        y = y / max(np.linalg.norm(y), 1e-12)
        items.append({"index": i, "ort": [sig(v) for v in y]})
    header = {"model": "layouts/dense", "dim": DENSE_OUT, "pooling": "mean",
              "dense": {"activation_function": DENSE_ACTIVATION, "seed": DENSE_SEED}, "normalize": True,
              "max_length": MAX_LENGTH}
    return header, items
