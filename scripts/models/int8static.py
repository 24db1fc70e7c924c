"""Static int8: calibrated QDQ quantization whose answer for a text does not depend on the texts
batched with it. build.py makes each default model's int8-static version with it, and
quantize.py (`make quantize MODE=int8-static`) adds one to any model folder.

Why: onnxruntime's quantize_dynamic puts a DynamicQuantizeLinear before every MatMulInteger,
and it computes ONE scale and zero point for its whole input, i.e. for the whole batch. A
text's activations are rounded on a grid set by its batch-mates, so its answer changes with
them. quantize_static fixes every activation scale beforehand, from calibration data: each
QuantizeLinear is element-wise with a constant scale, the integer GEMMs are exact, and a row's
result depends on that row alone, as fp32's does (the build checks each text alone against
inside shuffled batches of 8 and 32, and its report.md shows the result).

What is quantized, and how, was chosen on the val split; the figures are in docs/models.md,
"int8-static: the same answer alone or batched":
  * QuantFormat.QDQ; weights QInt8 per output channel (MiniLM has outlier weight columns, see
    build.py); activations QUInt8, asymmetric.
  * The MatMuls with a weight only (Q, K, V, attention output, both FFN layers), and only their
    inputs: the MatMul outputs stay float (OpTypesToExcludeOutputQuantization), so ORT fuses
    each into MatMulIntegerToFloat; quantizing the outputs as well (QLinearMatMul) was the
    large loss of cosine to fp32. Attention's Q·Kᵀ and softmax·V stay float, as in dynamic int8;
    so do LayerNorm, Softmax, GELU, the mask Add, pooling and the sentiment head (a Gemm).
    Quantizing the mask Add or Softmax would also clamp the -3.4e38 bias of padded positions
    to a calibrated range, and padding would leak into real tokens.
  * Gather (the embedding tables) stays float: quantizing it makes the file smaller at the
    same speed, for slightly lower accuracy.
  * Calibration: Percentile 99.999 over CALIB_TEXTS sentences of the polarity TRAIN split
    (never test, the gate's data; the method was picked on val), evenly spread so both
    classes are in it, each text alone (batch 1, no padding) so the ranges are those of real
    tokens. MinMax and Entropy came out about the same; 99.9 clips MiniLM's outlier
    activation channels and breaks it.
"""
import contextlib
import csv
import io
import logging
from pathlib import Path

import numpy as np

from common import cosine_rows, encode_batch, load_tokenizer, run_groups, run_packed

CALIB_SPLIT = "train"
CALIB_TEXTS = 400
CALIB_METHOD = "Percentile"
CALIB_PERCENTILE = 99.999
METHODS = ("MinMax", "Percentile", "Entropy")


def calibration_texts(data_dir, n=CALIB_TEXTS, split=CALIB_SPLIT):
    """n texts of DATA_DIR/<split>.csv, evenly spread over the file (both classes)."""
    if split == "test":
        raise ValueError("the test split is the gate's data: calibrate on train")
    with open(Path(data_dir) / f"{split}.csv", encoding="utf-8", newline="") as f:
        texts = [r["text"] for r in csv.DictReader(f)]
    if not texts:
        raise ValueError(f"{Path(data_dir) / (split + '.csv')} has no rows")
    step = max(1, len(texts) // n)
    return texts[::step][:n]


def activation_matmuls(model):
    """The MatMul nodes with no constant operand: attention's Q·Kᵀ and softmax·V."""
    consts = {i.name for i in model.graph.initializer}
    consts |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    return [n.name for n in model.graph.node
            if n.op_type == "MatMul" and not any(i in consts for i in n.input)]


def quantize_int8_static(src, dst, tokenizer_json, data_dir, n=CALIB_TEXTS, method=CALIB_METHOD,
                         per_channel=True, reduce_range=False):
    """Writes dst, a QDQ static int8 quantization of the float graph src, calibrated on n
    texts of the train split in data_dir tokenized with tokenizer_json. Returns a line saying
    how it was made."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    if method not in METHODS:
        raise ValueError(f"calibration method {method!r}: use one of {', '.join(METHODS)}")
    logging.getLogger().setLevel(logging.ERROR)  # "consider pre-processing" notice, as build.py
    tok = load_tokenizer(tokenizer_json)
    model = onnx.load(str(src), load_external_data=False)
    inputs = [i.name for i in model.graph.input]
    texts = calibration_texts(data_dir, n)

    class Reader(CalibrationDataReader):
        """The texts one at a time, each its own [1, tokens] batch. quantize_static asks for
        them in ranges of CalibStridedMinMax (1): the histogram calibrators stack a call's
        outputs into one array, which texts of different lengths cannot be."""

        def __init__(self):
            self.set_range(0, len(texts))

        def __len__(self):
            return len(texts)

        def set_range(self, start_index, end_index):
            self.it = iter(texts[start_index:end_index])

        def get_next(self):
            t = next(self.it, None)
            if t is None:
                return None
            return {k: v for k, v in encode_batch(tok, [t]).items() if k in inputs}

    extra = {
        # MatMul weights are [in, out]: one scale per output column.
        "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1},
        "OpTypesToExcludeOutputQuantization": ["MatMul"],
        "CalibTensorRangeSymmetric": False,
        # One text per collect_data call (see Reader); ranges and histograms are merged call
        # by call, so no text's intermediate outputs are kept.
        "CalibStridedMinMax": 1,
    }
    if method == "Percentile":
        extra["CalibPercentile"] = CALIB_PERCENTILE
    # The calibrators print a line per collect_data call, i.e. per text.
    with contextlib.redirect_stdout(io.StringIO()):
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul"], nodes_to_exclude=activation_matmuls(model),
                        per_channel=per_channel, reduce_range=reduce_range,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method), extra_options=extra)
    return (f"quantize_static QDQ: the weight MatMuls' inputs (outputs float), QInt8 weights "
            f"{'per output channel' if per_channel else 'per tensor'}{', reduce_range' if reduce_range else ''}, "
            f"QUInt8 activations calibrated with {method}"
            f"{f' {CALIB_PERCENTILE}' if method == 'Percentile' else ''} on {len(texts)} sentences "
            f"of the {CALIB_SPLIT} split, one at a time")


# ---- measuring: a text alone against the same text batched ---------------------------------

def mixed_groups(n, size, seed=0):
    """Indices 0..n-1 shuffled (a fixed permutation) and cut into groups of size: batches of
    mixed lengths, so each text is padded to some longer batch-mate."""
    order = np.random.default_rng(seed).permutation(n)
    return [order[s:s + size].tolist() for s in range(0, n, size)]


def run_alone(sess, tok, texts, output):
    """Each text's answer run alone (batch 1, no padding): mean-pooled normalized embeddings,
    or softmaxed logits. batch_invariance and packed_invariance compare against these."""
    return run_groups(sess, tok, texts, [[i] for i in range(len(texts))], output, probabilities=True)


def batch_invariance(sess, tok, texts, output, sizes=(8, 32), alone=None):
    """How far each text's answer moves between running it alone (run_alone's answers, made
    here unless given) and inside shuffled batches of each size: {size: {"cos_min", "cos_p01"}
    (embeddings) or {"max_abs_dp", "label_flips", "cos_min", "cos_p01"} (probabilities)}."""
    if alone is None:
        alone = run_alone(sess, tok, texts, output)
    r = {}
    for size in sizes:
        got = run_groups(sess, tok, texts, mixed_groups(len(texts), size), output, probabilities=True)
        c = cosine_rows(alone, got)
        r[size] = {"cos_min": float(c.min()), "cos_p01": float(np.percentile(c, 1))}
        if output != "last_hidden_state":
            r[size]["max_abs_dp"] = float(np.abs(alone - got).max())
            r[size]["label_flips"] = int((alone.argmax(1) != got.argmax(1)).sum())
    return r


def packed_invariance(sess, tok, texts, sizes=(8, 32), alone=None):
    """As batch_invariance for minilm, with each group packed end to end in one row
    (common.run_packed) instead of padded: {size: {"cos_min", "cos_p01"}}."""
    if alone is None:
        alone = run_alone(sess, tok, texts, "last_hidden_state")
    r = {}
    for size in sizes:
        got = run_packed(sess, tok, texts, mixed_groups(len(texts), size))
        c = cosine_rows(alone, got)
        r[size] = {"cos_min": float(c.min()), "cos_p01": float(np.percentile(c, 1))}
    return r
