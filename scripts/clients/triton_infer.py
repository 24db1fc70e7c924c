"""Drives the official Triton client, tritonclient.http, with its defaults against an ortserve URL.

usage: triton_infer.py BASE_URL EMBED_MODEL CLASSIFY_MODEL < texts.json

Prints one JSON object: what is_server_live, is_server_ready, get_server_metadata,
get_model_metadata and is_model_ready returned; the embeddings infer returned with the
client's defaults (the binary tensor data extension both ways) and with binary_data=False
(JSON both ways); the classifier's probabilities and labels, all binary and mixed (label binary,
probabilities JSON); and the error an unknown model raised. cmd/server/clients_test.go
compares them with /embed and /predict.
"""

import json
import sys

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def text_input(texts, binary_data=True):
    tensor = httpclient.InferInput("text", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_), binary_data=binary_data)
    return tensor


def binary_size(result, name):
    """The output's binary_data_size: None when it came as JSON."""
    return (result.get_output(name).get("parameters") or {}).get("binary_data_size")


def main() -> None:
    base_url, embed_model, classify_model = sys.argv[1:4]
    texts = json.load(sys.stdin)
    client = httpclient.InferenceServerClient(url=base_url.removeprefix("http://"), network_timeout=60)
    out = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "server": client.get_server_metadata(),
        "metadata": {m: client.get_model_metadata(m) for m in (embed_model, classify_model)},
        "model_ready": client.is_model_ready(embed_model) and client.is_model_ready(classify_model),
    }

    default = client.infer(embed_model, [text_input(texts)])
    out["embed_binary"] = default.as_numpy("embedding").tolist()
    out["embed_binary_size"] = binary_size(default, "embedding")
    as_json = client.infer(
        embed_model,
        [text_input(texts, binary_data=False)],
        outputs=[httpclient.InferRequestedOutput("embedding", binary_data=False)],
    )
    out["embed_json"] = as_json.as_numpy("embedding").tolist()
    out["embed_json_size"] = binary_size(as_json, "embedding")

    default = client.infer(classify_model, [text_input(texts)])
    out["probabilities"] = default.as_numpy("probabilities").tolist()
    out["labels"] = [b.decode() for b in default.as_numpy("label")]
    out["classify_binary_sizes"] = [binary_size(default, n) for n in ("probabilities", "label")]
    mixed = client.infer(
        classify_model,
        [text_input(texts)],
        outputs=[
            httpclient.InferRequestedOutput("label"),
            httpclient.InferRequestedOutput("probabilities", binary_data=False),
        ],
    )
    out["mixed_probabilities"] = mixed.as_numpy("probabilities").tolist()
    out["mixed_labels"] = [b.decode() for b in mixed.as_numpy("label")]
    out["mixed_binary_sizes"] = [binary_size(mixed, n) for n in ("probabilities", "label")]

    try:
        client.infer("no-such-model", [text_input(texts[:1])])
        out["unknown_model_error"] = None
    except InferenceServerException as e:
        out["unknown_model_error"] = e.message()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
