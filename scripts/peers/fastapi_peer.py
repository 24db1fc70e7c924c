"""A FastAPI + onnxruntime peer for `make bench-peers` (scripts/bench-peers.sh).

TEI's POST /embed ({"inputs": "text"} or {"inputs": ["a", "b"]} -> [[floats...]]) for one
ONNX file of a sentence embedder that outputs hidden states: HF `tokenizers` for the tokens,
one onnxruntime InferenceSession with one intra-op thread, mean pooling over the attention
mask and L2 normalization, as ortserve's minilm. No batching across requests: FastAPI runs
each request's (blocking) handler in its thread pool, so requests call the one session
concurrently. Run it with one uvicorn worker:

  PEER_MODEL_DIR=.../models/current/minilm PEER_ONNX=fp32.onnx \\
    python -m uvicorn fastapi_peer:app --app-dir scripts/peers --host 127.0.0.1 --port 8082 \\
    --workers 1 --no-access-log
"""

import os

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from tokenizers import Tokenizer

MODEL_DIR = os.environ["PEER_MODEL_DIR"]
ONNX = os.environ.get("PEER_ONNX", "fp32.onnx")
MAX_LENGTH = int(os.environ.get("PEER_MAX_LENGTH", "256"))  # model.yaml's max_length
MAX_INPUTS = 32  # TEI's max_client_batch_size

# minilm's tokenizer.json cuts at 128 tokens and pads every text to 128: cut at max_length as
# ortserve does, and pad only to the longest text of a request ([PAD] is id 0, as BERT's).
tokenizer = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
tokenizer.enable_truncation(MAX_LENGTH)
tokenizer.enable_padding()

options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
session = ort.InferenceSession(os.path.join(MODEL_DIR, ONNX), options, providers=["CPUExecutionProvider"])
input_names = {i.name for i in session.get_inputs()}


class EmbedRequest(BaseModel):
    """TEI's /embed body; other fields (ortserve's model and version) are ignored."""

    inputs: str | list[str]


app = FastAPI()


@app.get("/health")
def health() -> dict:
    return {}


@app.post("/embed")
def embed(req: EmbedRequest) -> JSONResponse:
    texts = [req.inputs] if isinstance(req.inputs, str) else req.inputs
    if not 1 <= len(texts) <= MAX_INPUTS:
        raise HTTPException(422, f'"inputs" must be a text or a list of 1 to {MAX_INPUTS} texts')
    encs = tokenizer.encode_batch(texts)
    mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
    feeds = {"input_ids": np.array([e.ids for e in encs], dtype=np.int64), "attention_mask": mask}
    if "token_type_ids" in input_names:
        feeds["token_type_ids"] = np.array([e.type_ids for e in encs], dtype=np.int64)
    hidden = session.run(None, feeds)[0]  # [batch, sequence, hidden]
    m = mask[:, :, None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    # The list is JSON already: a JSONResponse skips FastAPI's jsonable_encoder pass.
    return JSONResponse(pooled.tolist())
