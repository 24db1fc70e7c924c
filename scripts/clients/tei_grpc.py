"""Drives TEI's gRPC API (tei.v1) with a Python client generated from its proto, as a TEI user
would, against ortserve's --grpc-addr.

usage: tei_grpc.py ADDR < texts.json

The stubs in teipb/ are generated from server/grpc/teipb/tei.proto (TEI's package, services,
messages and field numbers; regenerate with `python -m grpc_tools.protoc -I server/grpc/teipb
--python_out=scripts/clients/teipb --grpc_python_out=scripts/clients/teipb tei.proto`). Prints
{"embed": ..., "stream": ..., "predict": ..., "rerank": ..., "tokens": ...}: Embed of the first
text, EmbedStream of all, Predict of the second, Rerank of all against the last as query (with
their texts), and Tokenize of the first. cmd/server/tei_grpc_test.go compares them with
/embed, /predict, /rerank and /tokenize.
"""

import json
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "teipb"))
import tei_pb2  # noqa: E402
import tei_pb2_grpc  # noqa: E402


def main() -> None:
    addr = sys.argv[1]
    texts = json.load(sys.stdin)
    with grpc.insecure_channel(addr) as channel:
        embed = tei_pb2_grpc.EmbedStub(channel)
        one = embed.Embed(tei_pb2.EmbedRequest(inputs=texts[0], normalize=True), timeout=60)
        stream = list(embed.EmbedStream((tei_pb2.EmbedRequest(inputs=t, normalize=True) for t in texts), timeout=60))
        pred = tei_pb2_grpc.PredictStub(channel).Predict(tei_pb2.PredictRequest(inputs=texts[1]), timeout=60)
        ranked = tei_pb2_grpc.RerankStub(channel).Rerank(
            tei_pb2.RerankRequest(query=texts[-1], texts=texts, return_text=True), timeout=60
        )
        toks = tei_pb2_grpc.TokenizeStub(channel).Tokenize(
            tei_pb2.EncodeRequest(inputs=texts[0], add_special_tokens=True), timeout=60
        )
    out = {
        "embed": list(one.embeddings),
        "stream": [list(r.embeddings) for r in stream],
        "predict": [{"label": p.label, "score": p.score} for p in pred.predictions],
        "rerank": [{"index": r.index, "score": r.score, "text": r.text} for r in ranked.ranks],
        "tokens": [{"id": t.id, "text": t.text, "special": t.special} for t in toks.tokens],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
