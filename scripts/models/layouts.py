"""Model folders as users have them, without model.yaml (build.py; MODELS_DIR/layouts/).

What the server infers of a model from its folder alone (docs/models.md, "Models without
model.yaml") is tested on these. None holds a model.yaml and layouts/ itself holds no model,
so the repository loader does not pick them up. Where a layout's graph is one the build
already made, the ONNX file is a hard link to it:

  sentence-transformers/  the package's model folder as the Hugging Face hub has it (what a download
                          of sentence-transformers/all-MiniLM-L6-v2 gives: modules.json, 1_Pooling/,
                          sentence_bert_config.json, config.json BertModel, config_sentence_transformers.json,
                          tokenizer files, model.safetensors), 2_Normalize/ (empty, as
                          SentenceTransformer.save() makes it) + onnx/model.onnx (= minilm/fp32.onnx; where
                          the ONNX backend of sentence-transformers 5.1.2 saves it)
  optimum/                what `optimum-cli export onnx --task feature-extraction` writes:
                          model.onnx (= minilm/fp32.onnx) at the root, model_quantized.onnx
                          (= minilm/int8.onnx, quantize_dynamic QInt8 per channel),
                          model_fp16.onnx (= minilm/fp16.onnx), config.json, tokenizer files;
                          no pooling config
  hub/models--ortserve--minilm/  the Hugging Face hub cache of the sentence-transformers layout:
                          refs/main = the revision, snapshots/<rev>/... relative symlinks into
                          blobs/<sha256 of the content>
  sentiment-hf/           the sentiment classifier: config.json BertForSequenceClassification,
                          id2label {0: negative, 1: positive}, model.onnx (= sentiment/fp32.onnx)
  cross-encoder/          the reranker as sentence-transformers CrossEncoder.save() lays it out, written
                          here without torch: config.json BertForSequenceClassification, id2label
                          {0: LABEL_0}, sentence_transformers.activation_fn Sigmoid; model.safetensors
                          (the trained float32 weights, bert.* and classifier.*, written with
                          safetensors.numpy); README.md; tokenizer files (tokenizer_config.json with
                          model_max_length 256, as CrossEncoder(max_length=256).save() writes it);
                          onnx/model.onnx (= reranker/fp32.onnx). scripts/golden.sh loads it with
                          CrossEncoder (torch) for the committed reranker references
  odd-outputs/            minilm/fp32.onnx with its output renamed and two intermediate tensors
                          added as outputs (ODD_OUTPUTS), config.json (BertModel), tokenizer files
  splade/, dense/         a SPLADE SparseEncoder (BertForMaskedLM + SpladePooling) and the
                          sentence-transformers folder with a Dense module: sparse.py writes them
"""
import hashlib
import json
import os
import shutil
from pathlib import Path

from common import write_json

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
# the package's files of a sentence-transformers model folder (the hub's, less README.md,
# data_config.json and .gitattributes)
ST_FILES = ("modules.json", "sentence_bert_config.json", "config.json", "config_sentence_transformers.json",
            "1_Pooling/config.json", "model.safetensors") + TOKENIZER_FILES
# CrossEncoder.save() records the activation it applies to the one logit
CROSS_ENCODER_ST = {"activation_fn": "torch.nn.modules.activation.Sigmoid", "version": "5.1.2"}
HUB_REPO = "models--ortserve--minilm"
# odd-outputs: graph outputs in this order (name, shape); the token embeddings are the middle one
ODD_TOKEN_OUTPUT = "onnx::Shape_422"
ODD_OUTPUTS = [
    ("/bert/encoder/layer.5/attention/self/Softmax_output_0", ["batch", 12, "sequence", "sequence"]),
    (ODD_TOKEN_OUTPUT, ["batch", "sequence", 384]),
    ("/bert/encoder/layer.5/intermediate/intermediate_act_fn/Mul_1_output_0", ["batch", "sequence", 1536]),
]


def link(src, dst):
    """Hard link (copy when the file system refuses)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def copy_tokenizer(src, dst):
    for f in TOKENIZER_FILES:
        shutil.copyfile(Path(src) / f, Path(dst) / f)


def sentence_transformers_layout(src, minilm, dst):
    for f in ST_FILES:
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / f, dst / f)
    (dst / "2_Normalize").mkdir()  # Normalize has no files; save() makes the folder
    link(minilm / "fp32.onnx", dst / "onnx" / "model.onnx")


def optimum_layout(src, minilm, dst):
    dst.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("_name_or_path", None)
    write_json(dst / "config.json", cfg)
    copy_tokenizer(src, dst)
    link(minilm / "fp32.onnx", dst / "model.onnx")
    link(minilm / "int8.onnx", dst / "model_quantized.onnx")
    link(minilm / "fp16.onnx", dst / "model_fp16.onnx")


def hub_layout(snapshot_src, dst):
    """dst/models--ortserve--minilm/{refs/main, blobs/<sha256>, snapshots/<rev>/...}."""
    repo = dst / HUB_REPO
    files = sorted(p for p in snapshot_src.rglob("*") if p.is_file())
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    # a deterministic 40-hex revision: sha1 of the (path, blob) list, like a commit id
    rev = hashlib.sha1("".join(f"{p.relative_to(snapshot_src)}\0{d}\n" for p, d in digests.items())
                       .encode()).hexdigest()
    for p, d in digests.items():
        blob = repo / "blobs" / d
        if not blob.exists():
            link(p, blob)
        rel = p.relative_to(snapshot_src)
        s = repo / "snapshots" / rev / rel
        s.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, s.parent), s)
    # empty folders (2_Normalize) exist in a snapshot only through their files: none
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)  # the hub writes the revision without a newline
    return rev


def sentiment_layout(src, sentiment, labels, dst):
    dst.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("_name_or_path", None)
    cfg.update({"architectures": ["BertForSequenceClassification"],
                "id2label": {str(i): l for i, l in enumerate(labels)},
                "label2id": {l: i for i, l in enumerate(labels)},
                "problem_type": "single_label_classification"})
    write_json(dst / "config.json", cfg)
    copy_tokenizer(src, dst)
    link(sentiment / "fp32.onnx", dst / "model.onnx")


def cross_encoder_layout(weights, src, rerank, max_length, dst):
    """The trained cross-encoder (weights: berttrain keys, float32) as CrossEncoder.save() lays
    it out, + onnx/model.onnx."""
    from safetensors.numpy import save_file

    dst.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    for k in ("_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    cfg.update({"architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"},
                "label2id": {"LABEL_0": 0}, "sentence_transformers": CROSS_ENCODER_ST})
    write_json(dst / "config.json", dict(sorted(cfg.items())))
    tensors = {("" if k.startswith("classifier.") else "bert.") + k: v for k, v in weights.items()}
    save_file({k: tensors[k] for k in sorted(tensors)}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    copy_tokenizer(src, dst)
    tc = json.loads((src / "tokenizer_config.json").read_text())
    tc["model_max_length"] = max_length
    write_json(dst / "tokenizer_config.json", tc)
    (dst / "README.md").write_text(
        "---\ntags:\n- sentence-transformers\n- cross-encoder\n- reranker\npipeline_tag: text-ranking\n"
        "library_name: sentence-transformers\n---\n\n# CrossEncoder\n\nortserve's test reranker "
        "(scripts/models/reranker.py): all-MiniLM-L6-v2 fine-tuned as a BertForSequenceClassification "
        f"with one label on topical-overlap pairs. Maximum sequence length: {max_length} tokens.\n")
    link(rerank / "fp32.onnx", dst / "onnx" / "model.onnx")
    return dst


def odd_outputs_layout(src, minilm, dst):
    import onnx

    dst.mkdir(parents=True)
    m = onnx.load(str(minilm / "fp32.onnx"))
    produced = {o for n in m.graph.node for o in n.output}
    if ODD_TOKEN_OUTPUT in produced:
        raise SystemExit(f"{ODD_TOKEN_OUTPUT} already names a tensor of minilm/fp32.onnx")
    for n in m.graph.node:
        for i, o in enumerate(n.output):
            if o == "last_hidden_state":
                n.output[i] = ODD_TOKEN_OUTPUT
    del m.graph.output[:]
    for name, shape in ODD_OUTPUTS:
        if name != ODD_TOKEN_OUTPUT and name not in produced:
            raise SystemExit(f"minilm/fp32.onnx has no tensor {name}")
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape))
    onnx.checker.check_model(m)
    onnx.save(m, str(dst / "model.onnx"))
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("_name_or_path", None)
    write_json(dst / "config.json", cfg)
    copy_tokenizer(src, dst)


def build(out, src, labels, max_length, reranker_weights):
    """Writes out/layouts/; returns a dict for the report (files, the hub revision)."""
    lay = out / "layouts"
    lay.mkdir()
    sentence_transformers_layout(src, out / "minilm", lay / "sentence-transformers")
    optimum_layout(src, out / "minilm", lay / "optimum")
    rev = hub_layout(lay / "sentence-transformers", lay / "hub")
    sentiment_layout(src, out / "sentiment", labels, lay / "sentiment-hf")
    cross_encoder_layout(reranker_weights, src, out / "reranker", max_length, lay / "cross-encoder")
    odd_outputs_layout(src, out / "minilm", lay / "odd-outputs")
    return {"hub_revision": rev,
            "files": {d.name: sorted(str(p.relative_to(d)) for p in d.rglob("*") if not p.is_dir())
                      for d in sorted(lay.iterdir())}}
