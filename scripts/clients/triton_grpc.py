"""Drives the official Triton gRPC client, tritonclient.grpc, with its defaults against ortserve's --grpc-addr.

usage: triton_grpc.py HOST:PORT EMBED_MODEL < texts.json

Prints one JSON object: what is_server_live, is_server_ready, get_model_metadata and
get_model_config returned; the embeddings infer returned for a BYTES input of the texts (sent,
as the client does, in raw_input_contents); the error an unknown model raised; and the error a
request with a 1 ms deadline (client_timeout) raised. cmd/server/grpc_test.go compares them
with the KServe REST route.
"""

import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


def error(call):
    """The status and message call raised, or None if it did not."""
    try:
        call()
    except InferenceServerException as e:
        return {"status": e.status(), "message": e.message()}
    return None


def main() -> None:
    addr, embed_model = sys.argv[1:3]
    texts = json.load(sys.stdin)
    client = grpcclient.InferenceServerClient(url=addr)
    tensor = grpcclient.InferInput("text", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
    out = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "metadata": client.get_model_metadata(embed_model, as_json=True),
        "config": client.get_model_config(embed_model, as_json=True),
    }
    result = client.infer(embed_model, [tensor])
    out["embedding"] = result.as_numpy("embedding").tolist()
    out["unknown_model_error"] = error(lambda: client.infer("no-such-model", [tensor]))
    out["deadline_error"] = error(lambda: client.infer(embed_model, [tensor], client_timeout=0.001))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
