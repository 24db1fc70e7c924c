"""Embeds texts through the official OpenAI Python client against an ortserve URL.

usage: openai_embed.py BASE_URL MODEL < texts.json

Prints {"float": [[...], ...], "base64": [[...], ...], "dimensions": [[...], ...], "model": ...,
"usage": {...}}: the vectors embeddings.create returned with encoding_format="float", with
the client's default (it asks for base64 and decodes it itself), and with dimensions=128
(and a user, which the server ignores). cmd/server/openai_client_test.go compares them with
/embed.
"""

import json
import sys

from openai import OpenAI


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    texts = json.load(sys.stdin)
    client = OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    as_float = client.embeddings.create(model=model, input=texts, encoding_format="float")
    default = client.embeddings.create(model=model, input=texts)
    short = client.embeddings.create(model=model, input=texts, dimensions=128, user="ortserve-test")
    json.dump(
        {
            "float": [d.embedding for d in sorted(as_float.data, key=lambda d: d.index)],
            "base64": [d.embedding for d in sorted(default.data, key=lambda d: d.index)],
            "dimensions": [d.embedding for d in sorted(short.data, key=lambda d: d.index)],
            "model": default.model,
            "usage": default.usage.model_dump(),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
