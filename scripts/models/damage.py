"""Adds a deliberately damaged version of a model to a model repository, so that the accuracy
gate can be shown to fail what it must fail. Never serve one.

usage: python damage.py MODEL_DIR NAME MODE [--from VERSION] [--scale S] [--seed N]
       (scripts/quantize.sh runs it with the pinned venv; `make damage` runs that)

MODE noise:       every weight w becomes w·(1 + S·N(0,1)), each element its own draw from a
                  generator seeded with --seed. Weights are the float initializers (fp32 or
                  fp16) and, in an int8 graph, the integer weights, perturbed around their zero
                  point and rounded; quantization scales and zero points, and the graph's
                  constants (shapes, the attention mask's fill value), are left alone so the
                  graph still loads and runs. The default S = 0.3 costs the sentiment model
                  13-15 accuracy points on the test split, fp32 or int8, seed 0 or 1 (0.2:
                  5-10 points; 0.5: chance) while its answers still look plausible.
MODE swap-labels: a classifier whose logits come out in reverse label order, as if the head
                  had been trained with the labels the other way round: the rows of the final
                  linear layer (Gemm/MatMul/MatMulInteger feeding the model's output) and of
                  every per-class tensor after it (bias, per-channel scales and zero points)
                  are reversed. The model still reports its labels in the config's order, so
                  every prediction of a two-class model flips.

Like quantize.py: MODEL_DIR/NAME.onnx and a `NAME: {file: NAME.onnx}` entry in model.yaml,
never overwriting, both put in place by rename. --from defaults to default_version.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quantize import ModelFolder, check_same_io, compare, die, mb, next_step, run_probe, say  # noqa: E402

ME = "damage"
DEFAULT_SCALE = 0.3
# Nodes between the final linear layer and the output whose per-class tensors are reversed too.
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Cast", "Identity"}
LINEAR = {"Gemm", "MatMul", "MatMulInteger"}


def noise(model, scale, rng):
    """Perturbs the weights of model in place; returns (tensors changed, elements)."""
    from onnx import TensorProto, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    n_tensors = n_elems = 0
    for t in model.graph.initializer:
        if t.name.endswith(("_scale", "_zero_point")):
            continue  # quantization parameters: perturbing them too would double the damage
        w = numpy_helper.to_array(t)
        if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE):
            new = w.astype(np.float64) * (1 + scale * rng.standard_normal(w.shape))
        elif t.data_type in (TensorProto.INT8, TensorProto.UINT8) and t.name.endswith("_quantized"):
            zp_t = inits.get(t.name[:-len("_quantized")] + "_zero_point")
            zp = numpy_helper.to_array(zp_t).astype(np.float64) if zp_t is not None else 0.0
            if np.ndim(zp) == 1 and w.ndim >= 1 and zp.shape[0] != w.shape[-1]:
                if np.any(zp):
                    continue  # per-channel along an axis other than the last: not ours to guess
                zp = 0.0
            q = w.astype(np.float64) - zp
            new = np.rint(q * (1 + scale * rng.standard_normal(w.shape)) + zp)
            info = np.iinfo(w.dtype)
            new = np.clip(new, info.min, info.max)
        else:
            continue  # int64 shapes and indices, booleans, ...
        t.CopyFrom(numpy_helper.from_array(new.astype(w.dtype), t.name))
        n_tensors += 1
        n_elems += w.size
    if n_tensors == 0:
        die("the graph has no weights this knows how to perturb", ME)
    return n_tensors, n_elems


def swap_labels(model, n_classes):
    """Reverses the class axis of the final linear layer and of the per-class tensors between
    it and the output, in place; returns the names of the tensors reversed."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    if len(g.output) != 1:
        die(f"swap-labels wants a graph with one output (the logits), this has {len(g.output)}", ME)
    done, linear = [], []

    def reverse(name, axis):
        t = inits[name]
        w = numpy_helper.to_array(t)
        if w.ndim == 0 or w.shape[axis] != n_classes:
            return
        t.CopyFrom(numpy_helper.from_array(np.flip(w, axis=axis).copy(), name))
        done.append(name)

    seen, todo = set(), [g.output[0].name]
    while todo:
        name = todo.pop()
        node = producer.get(name)
        if node is None or id(node) in seen:
            continue  # a graph input or an initializer
        seen.add(id(node))
        if node.op_type in LINEAR:
            linear.append(node.name or node.op_type)
            w = node.input[1]
            if w not in inits:
                die(f"the final {node.op_type} ({node.name}) has no constant weight to reverse", ME)
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            reverse(w, 0 if node.op_type == "Gemm" and trans_b else -1)
            extra = node.input[2:] if node.op_type == "Gemm" else node.input[3:4]  # bias; weight zero point
            for x in extra:
                if x in inits:
                    reverse(x, -1)
            continue  # what feeds the layer is the same for every class
        if node.op_type not in ELEMENTWISE:
            continue  # e.g. DynamicQuantizeLinear: the activations' scale, one for all classes
        for x in node.input:
            if x in inits:
                reverse(x, -1)
            elif x:
                todo.append(x)
    if len(linear) != 1:
        die(f"found {len(linear)} linear layers feeding the output ({', '.join(linear) or 'none'}); "
            "swap-labels needs exactly one", ME)
    return done


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", help="a model folder with a model.yaml")
    ap.add_argument("name", help="the new version's name; the file is NAME.onnx")
    ap.add_argument("mode", choices=["noise", "swap-labels"])
    ap.add_argument("--from", dest="src", help="the version to damage (default: default_version)")
    ap.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                    help=f"noise: relative standard deviation of the perturbation (default {DEFAULT_SCALE})")
    ap.add_argument("--seed", type=int, default=0, help="noise: the generator's seed (default 0)")
    a = ap.parse_args()
    if not a.scale > 0:
        die("--scale must be > 0", ME)

    import onnx

    folder = ModelFolder(a.model_dir, me=ME)
    folder.check_new(a.name)
    src_version, src, devices = folder.source(a.src)
    labels = folder.cfg.get("labels") or []
    if a.mode == "swap-labels" and (folder.cfg.get("task") != "classify" or len(labels) < 2):
        die(f"swap-labels is for classify models; {folder.name}'s task is {folder.cfg.get('task')}", ME)

    t = time.perf_counter()
    model = onnx.load(str(src))
    if a.mode == "noise":
        n, k = noise(model, a.scale, np.random.default_rng(a.seed))
        how = f"noise: {n} weight tensors ({k:,} values) × (1 + {a.scale}·N(0,1)), seed {a.seed}"
    else:
        names = swap_labels(model, len(labels))
        how = f"swap-labels: reversed the class axis of {', '.join(names)}"
    with folder.staging() as stage:
        out = stage / f"{a.name}.onnx"
        onnx.save(model, str(out))
        check_same_io(src, out, me=ME)
        ref, _ = run_probe(src)
        got, err = run_probe(out)
        if got is None:
            die(f"the damaged graph does not run on the CPU: {err}", ME)
        if a.mode == "swap-labels" and ref is not None:
            d = float(np.abs(got.astype(np.float64) - ref[:, ::-1]).max())
            if d > 1e-4:
                die(f"the logits are not the source's reversed (differ by {d:.3g}); nothing written", ME)
            note = f"on a probe of two texts its logits are {src_version}'s reversed (to {d:.2g})"
        else:
            note = f"on a probe of two texts, vs {src_version}: {compare(ref, got)}" if ref is not None else ""
        line = folder.publish(out, a.name, devices, stage)
    dst = folder.dir / f"{a.name}.onnx"
    say(f"wrote {dst} ({mb(dst)}) from {src.name} in {time.perf_counter() - t:.1f} s; {how}", ME)
    if note:
        say(note, ME)
    say(f"added to {folder.yaml_path}:  {line}", ME)
    say(f"{folder.name}/{a.name} is damaged on purpose: the gate must FAIL it.", ME)
    next_step(folder, src_version, a.name)


if __name__ == "__main__":
    main()
