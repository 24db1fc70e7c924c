"""Drives tritonclient.http's model configuration and repository index calls against ortserve.

usage: triton_config.py BASE_URL MODEL VERSION

Prints one JSON object: get_model_config for MODEL, without and with VERSION; the
get_model_metadata it must agree with; get_model_repository_index; and the errors an unknown
model and an unknown version raised. cmd/server/clients_test.go compares them with /info.
"""

import json
import sys

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def error_of(call):
    """The message of the InferenceServerException call raised, or None when it raised none."""
    try:
        call()
    except InferenceServerException as e:
        return e.message()
    return None


def main() -> None:
    base_url, model, version = sys.argv[1:4]
    client = httpclient.InferenceServerClient(url=base_url.removeprefix("http://"), network_timeout=60)
    out = {
        "config": client.get_model_config(model),
        "version_config": client.get_model_config(model, model_version=version),
        "metadata": client.get_model_metadata(model),
        "index": client.get_model_repository_index(),
        "unknown_model_error": error_of(lambda: client.get_model_config("no-such-model")),
        "unknown_version_error": error_of(lambda: client.get_model_config(model, model_version="no-such-version")),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
