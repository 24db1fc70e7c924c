"""BERT written as an ONNX graph with onnx.helper from safetensors weights: no torch.

build.py makes every default graph with it: minilm (the encoder, output last_hidden_state),
the SPLADE test model (encoder + BertForMaskedLM's head, output logits [batch, sequence, vocab];
sparse.py),
sentiment (encoder + mean pooling + L2 normalize + a linear head, output logits [batch, 2]) and
the reranker (BertForSequenceClassification(num_labels=1): encoder + pooler + classifier, output
logits [batch, 1]). The graphs have what torch.onnx.export (TorchScript exporter, opset 17) of
transformers' eager BertModel gave before (build.py checks each against the committed golden
files made with torch): inputs input_ids, attention_mask, token_type_ids int64 [batch, sequence]
with both axes dynamic; one float32 output; the same operators in the same order, so that
onnxruntime fuses them as it fused the export (FusedMatMul for Q·Kᵀ/√d, BiasGelu), and the
same names for the tensors layouts.py's odd-outputs graph exposes. One departure: the position
ids (below), whose shape inference lets onnxruntime also fuse each residual Add with its
LayerNormalization (SkipLayerNormalization), which Range-based ids did not allow.

Per layer: Q, K, V = x·Wᵀ + b, each reshaped to [batch, sequence, heads, head_size]
(Reshape [0, 0, heads, head_size]: the batch and sequence axes are copied) and transposed;
scores = Q·Kᵀ / √head_size + mask, where mask = (1 - attention_mask) · float32 min, added per key;
Softmax; ·V; back to [batch, sequence, hidden]; dense; LayerNormalization(residual); GELU(erf) as
x·(1 + erf(x/√2))·0.5 (Div, Erf, Add, Mul, Mul); dense; LayerNormalization(residual).
Embeddings: word + token type + position (Gather of CumSum(ones [batch, sequence]) - 1), LayerNormalization. epsilon from config.json (layer_norm_eps).
"""
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what opset 17 was written with (the export's): ORT reads it, and older tools too
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PRODUCER = "ortserve scripts/models/bertonnx.py"


def load(model_dir):
    """config.json (checked to be a BERT this builder writes) and the float32 weights of
    model.safetensors, keyed as there (embeddings.*, encoder.layer.N.*, pooler.dense.*)."""
    from safetensors.numpy import load_file

    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    want = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    for k, v in want.items():
        if cfg.get(k, "absolute" if k == "position_embedding_type" else None) != v:
            raise ValueError(f"{d / 'config.json'}: {k} is {cfg.get(k)!r}; bertonnx writes {v!r} only")
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        raise ValueError(f"{d / 'config.json'}: hidden_size is not a multiple of num_attention_heads")
    w = {k: v for k, v in load_file(str(d / "model.safetensors")).items() if k != "embeddings.position_ids"}
    return cfg, w


class _Graph:
    def __init__(self):
        self.nodes, self.inits = [], []

    def weight(self, name, array):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name))
        return name

    def const(self, value, dtype=np.float32):
        """An initializer for a small constant (named after its value, shared)."""
        a = np.asarray(value, dtype=dtype)
        shape = "x".join(map(str, a.shape)) or "scalar"
        name = f"const_{a.dtype}_{shape}_{'_'.join(str(x) for x in a.ravel().tolist())}".replace("-", "m").replace(".", "p").replace("+", "")
        if not any(i.name == name for i in self.inits):
            self.inits.append(numpy_helper.from_array(a, name))
        return name

    def op(self, op_type, inputs, name, output=None, **attrs):
        out = output or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out


def _dense(g, x, w, key, name, tname):
    """x·Wᵀ + b with W [out, in] as torch stores it: MatMul with the transposed weight, then Add."""
    mm = g.op("MatMul", [x, g.weight(f"{tname}.weight_T", w[f"{key}.weight"].T)], f"{name}/MatMul")
    return g.op("Add", [g.weight(f"{tname}.bias", w[f"{key}.bias"]), mm], f"{name}/Add")


def _layer_norm(g, x, w, key, name, tname, eps, output=None):
    return g.op("LayerNormalization", [x, g.weight(f"{tname}.weight", w[f"{key}.weight"]),
                                       g.weight(f"{tname}.bias", w[f"{key}.bias"])],
                f"{name}/LayerNormalization", output=output, axis=-1, epsilon=eps)


def _encoder(g, cfg, w, hidden_output, packing=False):
    eps = float(cfg["layer_norm_eps"])
    heads = cfg["num_attention_heads"]
    size = cfg["hidden_size"] // heads
    e = "/bert/embeddings"
    words = g.op("Gather", [g.weight("bert.embeddings.word_embeddings.weight", w["embeddings.word_embeddings.weight"]),
                            "input_ids"], f"{e}/word_embeddings/Gather")
    types = g.op("Gather", [g.weight("bert.embeddings.token_type_embeddings.weight",
                                     w["embeddings.token_type_embeddings.weight"]), "token_type_ids"],
                 f"{e}/token_type_embeddings/Gather")
    x = g.op("Add", [words, types], f"{e}/Add")
    # position ids 0..sequence-1 looked up with Gather, as the export's (a Gather on a weight table
    # is what quantize_dynamic quantizes, so int8 treats all three tables alike). They are a
    # running count of ones shaped like input_ids, less one, rather than the export's
    # Range(0, sequence): shape inference then carries [batch, sequence] through every layer,
    # where a Range's length is unknown and the residual Adds' two inputs end up with different
    # unknown sequence axes. onnxruntime's SkipLayerNormFusion checks those two shapes: it fused
    # none of fp32's 13 LayerNormalizations with the Range, all 13 with these ids (build.py's
    # check_fused holds it to that), and its LayerNormalization kernel costs 4 times
    # SkipLayerNormalization's on CPU (docs/performance.md, "LayerNormalization fused").
    ones = g.op("Cast", [g.op("Equal", ["input_ids", "input_ids"], f"{e}/Equal")], f"{e}/Cast", to=TensorProto.INT64)
    ids = g.op("Sub", [g.op("CumSum", [ones, g.const(1, np.int64)], f"{e}/CumSum"), g.const(1, np.int64)], f"{e}/Sub")
    if packing:
        # Packed rows: attention_mask numbers the texts of a row (1, 1, 2, 2, 2, 3, ...). A token
        # attends to the tokens of its own text only, and positions restart at each text's first
        # token. With a 0/1 mask this is the usual padding mask and positions 0..n-1 for the real
        # tokens (padding attends to padding only: its outputs are never read).
        same = g.op("Equal", [g.op("Unsqueeze", ["attention_mask", g.const([2], np.int64)], "/bert/segments/Unsqueeze"),
                              g.op("Unsqueeze", ["attention_mask", g.const([1], np.int64)], "/bert/segments/Unsqueeze_1")],
                    "/bert/segments/Equal")
        first = g.op("ArgMax", [g.op("Cast", [same], "/bert/segments/Cast", to=TensorProto.FLOAT)],
                     "/bert/segments/ArgMax", axis=2, keepdims=0)
        ids = g.op("Sub", [ids, first], "/bert/segments/Sub")
    pos = g.op("Gather", [g.weight("bert.embeddings.position_embeddings.weight", w["embeddings.position_embeddings.weight"]),
                          ids], f"{e}/position_embeddings/Gather")
    x = g.op("Add", [x, pos], f"{e}/Add_1")
    x = _layer_norm(g, x, w, "embeddings.LayerNorm", f"{e}/LayerNorm", "bert.embeddings.LayerNorm", eps)

    if packing:
        mask = g.op("Where", [same, g.const(0.0), g.const(np.finfo(np.float32).min)], "/bert/segments/Where")
        mask = g.op("Unsqueeze", [mask, g.const([1], np.int64)], "/bert/Unsqueeze")  # [batch, 1, query, key]
    else:
        m = g.op("Unsqueeze", ["attention_mask", g.const([1, 2], np.int64)], "/bert/Unsqueeze")
        m = g.op("Cast", [m], "/bert/Cast", to=TensorProto.FLOAT)
        m = g.op("Sub", [g.const(1.0), m], "/bert/Sub")
        mask = g.op("Mul", [m, g.const(np.finfo(np.float32).min)], "/bert/Mul")

    heads_shape = g.const([0, 0, heads, size], np.int64)
    hidden_shape = g.const([0, 0, heads * size], np.int64)
    n = cfg["num_hidden_layers"]
    for i in range(n):
        key, name, tname = f"encoder.layer.{i}", f"/bert/encoder/layer.{i}", f"bert.encoder.layer.{i}"
        a = f"{name}/attention/self"
        proj = {}
        for j, (part, perm) in enumerate((("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3]))):
            t = _dense(g, x, w, f"{key}.attention.self.{part}", f"{a}/{part}", f"{tname}.attention.self.{part}")
            t = g.op("Reshape", [t, heads_shape], f"{a}/Reshape" + (f"_{j}" if j else ""))
            proj[part] = g.op("Transpose", [t], f"{a}/Transpose" + (f"_{j}" if j else ""), perm=perm)
        s = g.op("MatMul", [proj["query"], proj["key"]], f"{a}/MatMul")
        s = g.op("Div", [s, g.const(np.sqrt(size))], f"{a}/Div")
        s = g.op("Add", [s, mask], f"{a}/Add")
        p = g.op("Softmax", [s], f"{a}/Softmax", axis=-1)
        c = g.op("MatMul", [p, proj["value"]], f"{a}/MatMul_1")
        c = g.op("Transpose", [c], f"{a}/Transpose_3", perm=[0, 2, 1, 3])
        c = g.op("Reshape", [c, hidden_shape], f"{a}/Reshape_3")
        o = _dense(g, c, w, f"{key}.attention.output.dense", f"{name}/attention/output/dense",
                   f"{tname}.attention.output.dense")
        o = g.op("Add", [o, x], f"{name}/attention/output/Add")
        x1 = _layer_norm(g, o, w, f"{key}.attention.output.LayerNorm", f"{name}/attention/output/LayerNorm",
                         f"{tname}.attention.output.LayerNorm", eps)
        u = _dense(g, x1, w, f"{key}.intermediate.dense", f"{name}/intermediate/dense", f"{tname}.intermediate.dense")
        act = f"{name}/intermediate/intermediate_act_fn"
        t = g.op("Div", [u, g.const(np.sqrt(2.0))], f"{act}/Div")
        t = g.op("Erf", [t], f"{act}/Erf")
        t = g.op("Add", [t, g.const(1.0)], f"{act}/Add")
        t = g.op("Mul", [u, t], f"{act}/Mul")
        t = g.op("Mul", [t, g.const(0.5)], f"{act}/Mul_1")
        o = _dense(g, t, w, f"{key}.output.dense", f"{name}/output/dense", f"{tname}.output.dense")
        o = g.op("Add", [o, x1], f"{name}/output/Add")
        x = _layer_norm(g, o, w, f"{key}.output.LayerNorm", f"{name}/output/LayerNorm", f"{tname}.output.LayerNorm",
                        eps, output=hidden_output if i == n - 1 else None)
    return x


def _mean_pool_normalize_linear(g, h, weight, bias):
    """Mean over the attention mask (count clipped at 1e-9), L2 normalize (norm clipped at
    1e-12), then weight·x + bias: sentence-transformers' Pooling(mean) + Normalize + a head."""
    m = g.op("Unsqueeze", ["attention_mask", g.const([-1], np.int64)], "/pool/Unsqueeze")
    m = g.op("Cast", [m], "/pool/Cast", to=TensorProto.FLOAT)
    s = g.op("ReduceSum", [g.op("Mul", [h, m], "/pool/Mul"), g.const([1], np.int64)], "/pool/ReduceSum", keepdims=0)
    n = g.op("ReduceSum", [m, g.const([1], np.int64)], "/pool/ReduceSum_1", keepdims=0)
    n = g.op("Clip", [n, g.const(1e-9)], "/pool/Clip")
    pooled = g.op("Div", [s, n], "/pool/Div")
    norm = g.op("ReduceL2", [pooled], "/normalize/ReduceL2", axes=[1], keepdims=1)
    norm = g.op("Clip", [norm, g.const(1e-12)], "/normalize/Clip")
    x = g.op("Div", [pooled, norm], "/normalize/Div")
    return g.op("Gemm", [x, g.weight("head.weight", weight), g.weight("head.bias", bias)], "/head/Gemm",
                output="logits", transB=1)


def _pooler_classifier(g, h, w):
    """BertForSequenceClassification's head: classifier(tanh(pooler(h[:, 0])))."""
    cls = g.op("Gather", [h, g.const(0, np.int64)], "/bert/pooler/Gather", axis=1)
    p = g.op("Gemm", [cls, g.weight("bert.pooler.dense.weight", w["pooler.dense.weight"]),
                      g.weight("bert.pooler.dense.bias", w["pooler.dense.bias"])], "/bert/pooler/dense/Gemm", transB=1)
    p = g.op("Tanh", [p], "/bert/pooler/activation/Tanh")
    return g.op("Gemm", [p, g.weight("classifier.weight", w["classifier.weight"]),
                         g.weight("classifier.bias", w["classifier.bias"])], "/classifier/Gemm",
                output="logits", transB=1)


def _mlm_head(g, h, w, eps):
    """BertForMaskedLM's head (BertLMPredictionHead): LayerNorm(gelu(dense(h))) times the word
    embeddings transposed (the decoder is tied to them, as transformers ties it) plus a bias,
    per token. The tied table is the embeddings' own initializer: the graph transposes it."""
    c = "/cls/predictions"
    t = _dense(g, h, w, "cls.predictions.transform.dense", f"{c}/transform/dense", "cls.predictions.transform.dense")
    u = g.op("Div", [t, g.const(np.sqrt(2.0))], f"{c}/transform/transform_act_fn/Div")
    u = g.op("Erf", [u], f"{c}/transform/transform_act_fn/Erf")
    u = g.op("Add", [u, g.const(1.0)], f"{c}/transform/transform_act_fn/Add")
    u = g.op("Mul", [t, u], f"{c}/transform/transform_act_fn/Mul")
    u = g.op("Mul", [u, g.const(0.5)], f"{c}/transform/transform_act_fn/Mul_1")
    u = _layer_norm(g, u, w, "cls.predictions.transform.LayerNorm", f"{c}/transform/LayerNorm",
                    "cls.predictions.transform.LayerNorm", eps)
    et = g.op("Transpose", ["bert.embeddings.word_embeddings.weight"], f"{c}/decoder/Transpose", perm=[1, 0])
    z = g.op("MatMul", [u, et], f"{c}/decoder/MatMul")
    return g.op("Add", [z, g.weight("cls.predictions.bias", w["cls.predictions.bias"])], f"{c}/decoder/Add",
                output="logits")


def build(cfg, w, head=None, head_weight=None, head_bias=None, packing=False):
    """The ModelProto. head None: output last_hidden_state [batch, sequence, hidden];
    "sentiment": mean pool + normalize + head_weight [labels, hidden] / head_bias [labels] ->
    logits [batch, labels]; "cross-encoder": w's pooler and classifier (classifier.weight [1,
    hidden]) -> logits [batch, 1]; "mlm": w's cls.predictions.* (BertForMaskedLM) -> logits
    [batch, sequence, vocab]."""
    g = _Graph()
    if packing and head not in (None, "mlm"):
        raise ValueError("packing: only a graph whose output is per token (head None or mlm) reads it per text")
    h = _encoder(g, cfg, w, "last_hidden_state" if head is None else None, packing)
    if head is None:
        out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                            ["batch", "sequence", cfg["hidden_size"]])
    elif head == "sentiment":
        _mean_pool_normalize_linear(g, h, head_weight, head_bias)
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", len(head_bias)])
    elif head == "cross-encoder":
        _pooler_classifier(g, h, w)
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", w["classifier.bias"].shape[0]])
    elif head == "mlm":
        _mlm_head(g, h, w, float(cfg["layer_norm_eps"]))
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", cfg["vocab_size"]])
    else:
        raise ValueError(f"head {head!r}")
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in INPUTS]
    graph = helper.make_graph(g.nodes, "main_graph", inputs, [out], initializer=g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER,
                          ir_version=IR_VERSION)
    if packing:
        stamp_packing(m)
    onnx.checker.check_model(m)
    return m


PACKING_KEY, PACKING_VALUE = "ortserve.packing", "segments"


def stamp_packing(m):
    """Declare, in the model's metadata, that its attention_mask may number several texts packed
    into one row (see _encoder): ortserve then runs queued texts as one row with no padding. The
    quantizers do not all keep metadata, so build.py stamps every variant it writes."""
    if not any(p.key == PACKING_KEY for p in m.metadata_props):
        onnx.helper.set_model_props(m, {**{p.key: p.value for p in m.metadata_props}, PACKING_KEY: PACKING_VALUE})


def save(model, path):
    onnx.save(model, str(path))
