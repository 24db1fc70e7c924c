"""Adds an int8, int8-static or fp16 version of a model to a model repository, made from its fp32
version with onnxruntime's own tooling: the same calls build.py makes for the default models.

usage: python quantize.py MODEL_DIR NAME MODE [--from VERSION] [--per-channel] [--reduce-range]
                          [--data DIR] [--calibration METHOD] [--calibration-texts N]
       (scripts/quantize.sh runs it with the pinned venv; `make quantize` runs that)

MODE int8: onnxruntime.quantization.quantize_dynamic, QInt8 weights, activations quantized at
           run time; --per-channel gives each output channel its own scale (MiniLM needs it:
           one scale per tensor drifts to mean cosine ~0.96 vs fp32, see build.py),
           --reduce-range uses 7-bit weights. One activation scale per batch: a text's answer
           depends on the texts batched with it.
MODE int8-static: int8static.quantize_int8_static, as build.py: calibrated QDQ, fixed
           activation scales, so a text's answer is the same alone or batched. Calibrates on
           sentences of DIR/train.csv (--data, the polarity data; `make quantize` passes
           $CACHE/data/polarity); --calibration MinMax|Percentile|Entropy (default Percentile),
           --calibration-texts N (default 400). Weights are always one scale per output channel.
MODE fp16: onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True), as
           build.py; when the CPU execution provider cannot run the result the version gets
           `devices: [cuda]`, as build.py does.

MODEL_DIR/NAME.onnx is written and `NAME: {file: NAME.onnx}` added under `versions:` in
MODEL_DIR/model.yaml; nothing else in the file changes. An existing version or file is never
overwritten. The server polls the repository and hot-reloads a changed model folder, so both
files appear by rename: the graph is built in a hidden folder inside MODEL_DIR (the server
skips folders when it fingerprints a model), linked into place, then model.yaml is replaced
in one rename. A reload therefore sees either the old config or the new one, never half a file.

damage.py uses the helpers here (ModelFolder) to add deliberately damaged versions.
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ME = "quantize"
# A version name is also a file name and a YAML key: start with a letter so that YAML reads
# it as a string ("1" would be a number), and keep to characters that need no quoting.
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$")
VERSIONS_RE = re.compile(r"^versions:\s*(#.*)?$")
ENTRY_RE = re.compile(r"^([ \t]+)\S")
PROBE = [[101, 7592, 2088, 102, 0, 0], [101, 2023, 2003, 1037, 3231, 102]]  # two texts, one padded


def die(msg, me=ME):
    print(f"{me}: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def say(msg, me=ME):
    print(f"{me}: {msg}", flush=True)


def mb(path):
    return f"{Path(path).stat().st_size / 1e6:.1f} MB"


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def add_version_text(text, name, entry):
    """model.yaml text with `name: entry` appended to the `versions:` block, keeping every other
    line as it is; None when `versions:` is not a block mapping this can extend."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, l in enumerate(lines) if VERSIONS_RE.match(l)), None)
    if start is None:
        return None
    last, indent = None, None
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = ENTRY_RE.match(line)
        if not m:
            break  # the next top-level key
        if indent is None:
            indent = m.group(1)
        last = i
    if last is None or indent.startswith("\t") or lines[last][len(indent)] in "-[{":
        return None
    if not lines[last].endswith("\n"):
        lines[last] += "\n"
    lines.insert(last + 1, f"{indent}{name}: {entry}\n")
    return "".join(lines)


def flow(file, devices):
    """A version entry in the flow style build.py writes."""
    if devices:
        return f"{{file: {file}, devices: [{', '.join(devices)}]}}"
    return f"{{file: {file}}}"


class ModelFolder:
    """One model folder of a repository: its model.yaml and version files."""

    def __init__(self, path, me=ME):
        import yaml

        self.me = me
        self.dir = Path(path)
        self.yaml_path = self.dir / "model.yaml"
        if not self.yaml_path.is_file():
            die(f"{self.yaml_path} not found: MODEL_DIR is a model folder (one per model, "
                "with a model.yaml), e.g. ~/.cache/ortserve/models/work/minilm", me)
        self.text = self.yaml_path.read_text(encoding="utf-8")
        try:
            self.cfg = yaml.safe_load(self.text)
        except yaml.YAMLError as e:
            die(f"{self.yaml_path}: {str(e).splitlines()[0]}", me)
        if not isinstance(self.cfg, dict) or not isinstance(self.cfg.get("versions"), dict):
            die(f"{self.yaml_path} has no `versions:` mapping", me)
        self.name = self.cfg.get("name", self.dir.name)
        self.versions = self.cfg["versions"]

    def source(self, version):
        """(version, path, devices) of an existing version; version None: default_version."""
        version = version or self.cfg.get("default_version")
        v = self.versions.get(version)
        if not isinstance(v, dict) or not v.get("file"):
            die(f"{self.yaml_path}: no version {version!r} (versions: {', '.join(map(str, self.versions))})",
                self.me)
        path = self.dir / v["file"]
        if not path.is_file():
            die(f"{path} (version {version}) not found", self.me)
        return version, path, list(v.get("devices") or [])

    def check_new(self, name):
        """Dies unless name is a valid, unused version name whose file does not exist."""
        if not NAME_RE.match(name):
            die(f"version name {name!r}: use a letter, then letters, digits, '.', '_' or '-'", self.me)
        import yaml

        if list(yaml.safe_load(f"{name}: x")) != [name]:  # YAML 1.1 reads e.g. "on" as a bool
            die(f"version name {name!r} does not read back from YAML as a string; pick another", self.me)
        if name in self.versions:
            die(f"{self.yaml_path} already has a version {name}: pick another name "
                "(versions are never overwritten)", self.me)
        if (self.dir / f"{name}.onnx").exists():
            die(f"{self.dir / (name + '.onnx')} already exists: pick another name or remove it", self.me)

    @contextmanager
    def staging(self):
        """A hidden scratch folder inside the model folder (same file system, so publish can
        rename from it; a folder, so the server's fingerprint of the model skips it)."""
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.me}-", dir=self.dir))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def publish(self, staged_onnx, name, devices, stage):
        """Links staged_onnx to MODEL_DIR/NAME.onnx (never replacing a file), then replaces
        model.yaml with the version added, in one rename. Returns the entry line."""
        import yaml

        entry = flow(f"{name}.onnx", devices)
        new_text = add_version_text(self.text, name, entry)
        if new_text is None:
            die(f"{self.yaml_path}: `versions:` is not a block mapping this can extend; "
                f"add `  {name}: {entry}` under versions by hand ({staged_onnx} is not kept)", self.me)
        want = dict(self.cfg, versions=dict(self.versions, **{name: yaml.safe_load(entry)}))
        if yaml.safe_load(new_text) != want:
            die(f"{self.yaml_path}: adding version {name!r} would not read back as written; add "
                f"`  {name}: {entry}` under versions by hand", self.me)
        if self.yaml_path.read_text(encoding="utf-8") != self.text:
            die(f"{self.yaml_path} changed while this ran; nothing written, run again", self.me)
        fsync_file(staged_onnx)
        dst = self.dir / f"{name}.onnx"
        try:
            os.link(staged_onnx, dst)  # fails if dst exists, unlike rename
        except FileExistsError:
            die(f"{dst} appeared while this ran; nothing written", self.me)
        except OSError:  # a file system without hard links: check, then rename
            if dst.exists():
                die(f"{dst} appeared while this ran; nothing written", self.me)
            os.rename(staged_onnx, dst)
        tmp = stage / "model.yaml"
        try:
            tmp.write_text(new_text, encoding="utf-8")
            shutil.copymode(self.yaml_path, tmp)
            fsync_file(tmp)
            os.replace(tmp, self.yaml_path)
        except BaseException:
            dst.unlink(missing_ok=True)
            raise
        return f"{name}: {entry}"


def graph_io(path):
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    ins = [i.name for i in m.graph.input]
    outs = [(o.name, o.type.tensor_type.elem_type) for o in m.graph.output]
    return ins, outs, m


def check_fp32_source(path, me=ME):
    """Dies unless path is a float32 graph (not already quantized or converted)."""
    import onnx

    _, _, m = graph_io(path)
    ops = {n.op_type for n in m.graph.node}
    quant = sorted(ops & {"MatMulInteger", "DynamicQuantizeLinear", "QuantizeLinear", "QLinearMatMul",
                          "ConvInteger", "DequantizeLinear"})
    if quant:
        die(f"{path} is already quantized ({', '.join(quant)} nodes): start from the fp32 version (--from)", me)
    types = {i.data_type for i in m.graph.initializer}
    if onnx.TensorProto.FLOAT16 in types:
        die(f"{path} has float16 weights: start from the fp32 version (--from)", me)
    if onnx.TensorProto.FLOAT not in types:
        die(f"{path} has no float32 weights to convert", me)


def probe_feeds(input_names):
    ids = np.array(PROBE, dtype=np.int64)
    all_feeds = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64),
                 "token_type_ids": np.zeros_like(ids)}
    return {k: all_feeds[k] for k in input_names if k in all_feeds}


def run_probe(path):
    """(outputs, None) from running path on the CPU on two fixed token sequences, or
    (None, first line of the error)."""
    import onnxruntime as ort

    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        s = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
        feeds = probe_feeds([i.name for i in s.get_inputs()])
        return s.run(None, feeds)[0], None
    except Exception as e:  # noqa: BLE001
        return None, str(e).strip().splitlines()[0][:300]


def compare(ref, got):
    """A one-line comparison of two outputs of the probe: a smoke test, not the gate."""
    a, b = ref.astype(np.float64), got.astype(np.float64)
    if a.ndim == 3:  # [batch, sequence, hidden]: the real tokens' vectors
        keep = np.array(PROBE) != 0
        a, b, what = a[keep], b[keep], "token vectors"
    else:
        a, b, what = a.reshape(len(a), -1), b.reshape(len(b), -1), "outputs"
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return (f"cosine of the {what} mean {cos.mean():.5f}, min {cos.min():.5f}; "
            f"largest difference {np.abs(a - b).max():.3g}")


def check_same_io(src, dst, me=ME):
    si, so, _ = graph_io(src)
    di, do, _ = graph_io(dst)
    if si != di or so != do:
        die(f"{dst}: inputs/outputs {di} {do} differ from the source's {si} {so}", me)


def quantize_int8(src, dst, per_channel, reduce_range):
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # "consider pre-processing" notice, as build.py
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel,
                     reduce_range=reduce_range)


def next_step(folder, baseline, name):
    root = folder.dir.resolve().parent
    print(f"A server started with --models {root} hot-reloads the folder and serves "
          f"{folder.name}/{name} within its --reload-interval.")
    print("Next: gate it against the baseline before sending it traffic:")
    print(f"  ./bin/server gate --models {root} --model {folder.name} --baseline {baseline} --candidate {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", help="a model folder with a model.yaml")
    ap.add_argument("name", help="the new version's name; the file is NAME.onnx")
    ap.add_argument("mode", choices=["int8", "int8-static", "fp16"])
    ap.add_argument("--from", dest="src", help="the fp32 version to start from (default: default_version)")
    ap.add_argument("--per-channel", action="store_true", help="int8: one scale per output channel")
    ap.add_argument("--reduce-range", action="store_true", help="int8, int8-static: 7-bit weights")
    ap.add_argument("--data", help="int8-static: the folder with train.csv (text column) to calibrate on")
    ap.add_argument("--calibration", default=None, help="int8-static: MinMax, Percentile or Entropy (default Percentile)")
    ap.add_argument("--calibration-texts", type=int, default=None, help="int8-static: sentences to calibrate on (default 400)")
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import int8static

    if a.mode == "fp16" and (a.per_channel or a.reduce_range):
        die("--per-channel and --reduce-range are for int8")
    if a.mode != "int8-static" and (a.data or a.calibration or a.calibration_texts):
        die("--data, --calibration and --calibration-texts are for int8-static")
    if a.mode == "int8-static":
        if not a.data or not (Path(a.data) / f"{int8static.CALIB_SPLIT}.csv").is_file():
            die(f"int8-static calibrates on {int8static.CALIB_SPLIT}.csv: give --data DIR with it "
                "(the polarity data: make data, then --data ~/.cache/ortserve/data/polarity)")
        if a.calibration and a.calibration not in int8static.METHODS:
            die(f"--calibration {a.calibration}: use one of {', '.join(int8static.METHODS)}")
        if a.calibration_texts is not None and a.calibration_texts < 1:
            die(f"--calibration-texts {a.calibration_texts}: give at least 1")

    folder = ModelFolder(a.model_dir)
    folder.check_new(a.name)
    src_version, src, devices = folder.source(a.src)
    check_fp32_source(src)

    t = time.perf_counter()
    with folder.staging() as stage:
        out = stage / f"{a.name}.onnx"
        if a.mode == "int8":
            quantize_int8(src, out, a.per_channel, a.reduce_range)
            how = ("int8: quantize_dynamic, QInt8 weights, "
                   + ("one scale per output channel" if a.per_channel else "one scale per tensor")
                   + (", reduce_range" if a.reduce_range else ""))
        elif a.mode == "int8-static":
            tokenizer = folder.dir / folder.cfg.get("tokenizer", "tokenizer.json")
            if not tokenizer.is_file():
                die(f"{tokenizer} not found: int8-static tokenizes its calibration sentences with the model's tokenizer")
            try:
                how = "int8-static: " + int8static.quantize_int8_static(
                    src, out, tokenizer, a.data, n=a.calibration_texts or int8static.CALIB_TEXTS,
                    method=a.calibration or int8static.CALIB_METHOD, reduce_range=a.reduce_range)
            except ValueError as e:
                die(f"int8-static: {e}")
        else:
            from build import convert_fp16

            convert_fp16(src, out)
            how = "fp16: convert_float_to_float16(keep_io_types=True)"
        check_same_io(src, out)
        ref, err = run_probe(src)
        got, err2 = run_probe(out)
        if got is None and a.mode == "fp16":
            devices = ["cuda"]  # as build.py: fp16 graphs the CPU provider cannot run
            note = f"the CPU execution provider cannot run it ({err2}): devices [cuda]"
        elif got is None:
            die(f"the quantized graph does not run on the CPU: {err2}")
        else:
            note = f"runs on the CPU; on a probe of two texts, vs {src_version}: {compare(ref, got)}"
        line = folder.publish(out, a.name, devices, stage)
    say(f"wrote {folder.dir / (a.name + '.onnx')} ({mb(folder.dir / (a.name + '.onnx'))}) from "
        f"{src.name} ({mb(src)}) in {time.perf_counter() - t:.1f} s; {how}")
    say(note)
    say(f"added to {folder.yaml_path}:  {line}")
    next_step(folder, src_version, a.name)


if __name__ == "__main__":
    main()
