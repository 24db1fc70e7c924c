"""Drives huggingface_hub's InferenceClient, pointed at an ortserve URL, as a user would.

usage: hf_inference.py BASE_URL feature-extraction < texts.json
       hf_inference.py BASE_URL feature-extraction-prompt PROMPT_NAME < texts.json
       hf_inference.py BASE_URL text-classification < texts.json
       hf_inference.py BASE_URL sentence-similarity < texts.json

InferenceClient(model=BASE_URL) posts each task to the URL itself, POST /, which serves the
server's first model. feature-extraction prints {"single": ..., "batch": ..., "raw": ...}: the
arrays feature_extraction returned for the first text alone, for all of them, and for all of
them with normalize=False (and the other TEI fields set). feature-extraction-prompt prints
{"prompted": ..., "short": ...}: all of them with prompt_name=PROMPT_NAME (truncate and
truncation_direction="right" set too), and with dimensions=128. text-classification prints
{"default": ..., "top1": ..., "none": ..., "sigmoid": ...}: per text, the [{label, score}]
text_classification returned by default, with top_k=1, and with function_to_apply "none"
and "sigmoid". sentence-similarity prints {"similarity": ...}: what sentence_similarity
returned for the first text against the others. cmd/server/clients_test.go compares them
with /embed, /predict and /similarity.
"""

import json
import sys

from huggingface_hub import InferenceClient


def predictions(elements):
    return [{"label": e.label, "score": e.score} for e in elements]


def main() -> None:
    base_url, task = sys.argv[1], sys.argv[2]
    texts = json.load(sys.stdin)
    client = InferenceClient(model=base_url, timeout=60)
    if task == "feature-extraction":
        out = {
            "single": client.feature_extraction(texts[0]).tolist(),
            "batch": client.feature_extraction(texts).tolist(),
            "raw": client.feature_extraction(
                texts, normalize=False, truncate=True, truncation_direction="right", encoding_format="float"
            ).tolist(),
        }
    elif task == "feature-extraction-prompt":
        out = {
            "prompted": client.feature_extraction(
                texts, prompt_name=sys.argv[3], truncate=True, truncation_direction="right"
            ).tolist(),
            "short": client.feature_extraction(texts, dimensions=128).tolist(),
        }
    elif task == "text-classification":
        out = {
            "default": [predictions(client.text_classification(t)) for t in texts],
            "top1": [predictions(client.text_classification(t, top_k=1)) for t in texts],
            "none": [predictions(client.text_classification(t, function_to_apply="none")) for t in texts],
            "sigmoid": [predictions(client.text_classification(t, function_to_apply="sigmoid")) for t in texts],
        }
    elif task == "sentence-similarity":
        out = {"similarity": client.sentence_similarity(texts[0], other_sentences=texts[1:])}
    else:
        sys.exit(
            f"unknown task {task!r}: feature-extraction, feature-extraction-prompt, text-classification"
            " or sentence-similarity"
        )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
