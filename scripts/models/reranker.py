"""The test cross-encoder reranker (build.py): MiniLM + a one-logit pair head, trained briefly.

A BertForSequenceClassification(num_labels=1) like cross-encoder/ms-marco-MiniLM-L6-v2: the
input is [CLS] query [SEP] passage [SEP] (token_type_ids 0 then 1), the output one logit
(sigmoid = relevance). It starts from the package's all-MiniLM-L6-v2 weights (encoder and
pooler; the classifier from numpy's generator seeded 0, initial_weights) and learns *topical
overlap*: the query is 2-4 distinct content words drawn from a sentence of train.csv, the
relevant passage is that sentence, the irrelevant one a random other sentence. That is
learnable in one short epoch (held-out top-1 among 10 passages: fp32 0.98, int8 0.97, on 100
queries of test.csv; see report.json) where the sentiment-matching task ("a positive review"
against a glowing or a scathing one) was not: a frozen-encoder probe and a brief fine-tune both
stayed at chance on it. So the reranker ranks a passage that contains the query's words first;
it does not understand sentiment or paraphrase. Training the classifier alone on the frozen
encoder is not enough for this either: a logistic regression on the pair's [CLS] features (raw
or through the pooler, fit on 4000 pairs) ranked the source sentence first for 0.34-0.41 of the
held-out queries.

The whole network is fine-tuned, in numpy (berttrain.py: the forward pass, its gradient written
out and checked against finite differences on every build, AdamW as torch's). Training is in
float64 (all weights, no dropout, AdamW, PAIRS pairs in length-sorted batches shown in a seeded
order) so that a rebuild on another machine lands on the same float32 weights to ~1e-7 and the
committed golden scores stay valid; float32 training would let rounding differences grow over
the steps. From the same starting weights it reproduces the torch training this replaced
(transformers' BertForSequenceClassification, torch.optim.AdamW, float64) to 6e-11 in every
float32 weight.
"""
import json
import random
import re
import time
from pathlib import Path

import numpy as np

from common import load_tokenizer, log, read_split

PAIRS = 640         # training pairs, half relevant (one epoch)
BATCH = 32
LR = 3e-4
WEIGHT_DECAY = 0.01
TRAIN_MAX_LENGTH = 40
TRAIN_WORDS = 20    # training passages are a sentence's first 20 words (cheaper steps)
SEED = 0
HELD_OUT_QUERIES = 100  # from test.csv, each ranked against its sentence and 9 others
STOP = set("""the a an and or but of to in on is it its it's that this with for as was are be by
at from his her their they he she you i film movie one than more most so not no all has have
can will just into about there what who which when out up like if only even much too very
been being does doesn't don't isn't it's that's there's would could should them then these
those your our we us my me him how why where while any some such own same other""".split())


def content_words(text):
    ws = [w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in STOP]
    return list(dict.fromkeys(ws))


def make_pairs(texts, rng, n):
    """n (query, passage, label) pairs, alternating relevant / irrelevant for the same query."""
    out = []
    while len(out) < n:
        j = rng.randrange(len(texts))
        ws = content_words(texts[j])
        if len(ws) < 3:
            continue
        q = " ".join(rng.sample(ws, rng.randint(2, min(4, len(ws)))))
        k = rng.randrange(len(texts))
        while k == j:
            k = rng.randrange(len(texts))
        out += [(q, texts[j], 1.0), (q, texts[k], 0.0)]
    return out


def encode_pairs(tok, pairs):
    """input_ids, token_type_ids, attention_mask of (query, passage) pairs, padded to the longest."""
    encs = tok.encode_batch([(q, p) for q, p, *_ in pairs])
    n = max(len(e.ids) for e in encs)
    ids, types, mask = (np.zeros((len(encs), n), dtype=np.int64) for _ in range(3))
    for i, e in enumerate(encs):
        ids[i, :len(e.ids)] = e.ids
        types[i, :len(e.ids)] = e.type_ids
        mask[i, :len(e.ids)] = e.attention_mask
    return ids, types, mask


def initial_weights(weights, cfg, seed=SEED):
    """The package's weights (encoder, pooler) in float64 and a new classifier: weight
    N(0, initializer_range) from numpy's seeded generator, bias 0, as transformers initializes
    a missing Linear (with its own, torch's, generator)."""
    w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items() if k != "embeddings.position_ids"}
    w["classifier.weight"] = np.random.default_rng(seed).normal(0.0, cfg["initializer_range"], (1, cfg["hidden_size"]))
    w["classifier.bias"] = np.zeros(1)
    return w


def train(src, data, init=None):
    """Fine-tunes BertForSequenceClassification(num_labels=1) from the package's weights in src
    (berttrain: numpy float64); returns its float32 weights (keys as berttrain) and a dict for the
    report. init: the float64 starting weights (default initial_weights)."""
    import berttrain
    from safetensors.numpy import load_file

    cfg = json.loads((Path(src) / "config.json").read_text())
    w = init if init is not None else initial_weights(load_file(str(Path(src) / "model.safetensors")), cfg)
    model = berttrain.Bert(cfg, w)
    tok = load_tokenizer(Path(src) / "tokenizer.json", max_length=TRAIN_MAX_LENGTH)
    texts, _ = read_split(data, "train")
    texts = [" ".join(t.split()[:TRAIN_WORDS]) for t in texts]
    pairs = make_pairs(texts, random.Random(SEED), PAIRS)
    pairs.sort(key=lambda p: (len(p[0]) + len(p[1]), p))
    batches = [pairs[s:s + BATCH] for s in range(0, len(pairs), BATCH)]
    order = list(range(len(batches)))
    random.Random(SEED + 1).shuffle(order)
    # the hand-written gradient against finite differences, on 4 pairs cut to 16 tokens
    check = load_tokenizer(Path(src) / "tokenizer.json", max_length=16)
    grad_error = berttrain.gradient_check(model, *encode_pairs(check, batches[order[0]][:4]),
                                          np.array([p[2] for p in batches[order[0]][:4]], dtype=np.float64))
    opt = berttrain.AdamW(model.w, lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    t = time.perf_counter()
    for i in order:
        b = batches[i]
        ids, types, mask = encode_pairs(tok, b)
        loss, grads = model.loss_and_grads(ids, types, mask, np.array([p[2] for p in b], dtype=np.float64))
        opt.step(grads)
        losses.append(loss)
    secs = time.perf_counter() - t
    log(f"reranker: {len(order)} steps, loss {losses[0]:.3f} -> {np.mean(losses[-4:]):.3f}, {secs:.1f} s")
    return {k: v.astype(np.float32) for k, v in model.w.items()}, {
        "task": "topical overlap: query = 2-4 content words of a train.csv sentence; "
                "relevant = that sentence, irrelevant = a random other one",
        "pairs": len(pairs), "batch": BATCH, "steps": len(order), "epochs": 1, "lr": LR,
        "optimizer": f"AdamW(weight_decay={WEIGHT_DECAY}), float64, no dropout; numpy (berttrain.py)",
        "train_max_length": TRAIN_MAX_LENGTH, "seed": SEED,
        "gradient_check_max_rel_error": grad_error,
        "loss_first": losses[0], "loss_last4_mean": float(np.mean(losses[-4:])),
        "train_s": round(secs, 1)}


def held_out(data, n=HELD_OUT_QUERIES, k=10):
    """Held-out ranking tasks from test.csv: (query, [passages], index of the relevant one)."""
    texts, _ = read_split(data, "test")
    rng = random.Random(SEED + 2)
    tasks = []
    while len(tasks) < n:
        j = rng.randrange(len(texts))
        ws = content_words(texts[j])
        if len(ws) < 3:
            continue
        q = " ".join(rng.sample(ws, rng.randint(2, min(4, len(ws)))))
        others = rng.sample([i for i in range(len(texts)) if i != j], k - 1)
        pos = rng.randrange(k)
        idx = others[:pos] + [j] + others[pos:]
        tasks.append((q, [texts[i] for i in idx], pos))
    return tasks


def rank_quality(score, tasks):
    """score(list of (q, p)) -> logits; top-1 accuracy and MRR over the held-out tasks."""
    pairs = [(q, p) for q, ps, _ in tasks for p in ps]
    z = np.asarray(score(pairs), dtype=np.float64).reshape(len(tasks), -1)
    ranks = [int((row > row[pos]).sum()) + 1 for row, (_, _, pos) in zip(z, tasks)]
    return {"queries": len(tasks), "passages_per_query": z.shape[1],
            "top1": float(np.mean([r == 1 for r in ranks])),
            "mrr": float(np.mean([1.0 / r for r in ranks]))}


def ort_scorer(sess, tok):
    """Logits of (query, passage) pairs from an ORT session, batches of 32 padded to the longest."""
    def score(pairs):
        out = []
        for s in range(0, len(pairs), 32):
            encs = tok.encode_batch(pairs[s:s + 32])
            n = max(len(e.ids) for e in encs)
            f = {k: np.zeros((len(encs), n), dtype=np.int64)
                 for k in ("input_ids", "attention_mask", "token_type_ids")}
            for i, e in enumerate(encs):
                f["input_ids"][i, :len(e.ids)] = e.ids
                f["attention_mask"][i, :len(e.ids)] = e.attention_mask
                f["token_type_ids"][i, :len(e.ids)] = e.type_ids
            (z,) = sess.run(["logits"], f)
            out.extend(z[:, 0].tolist())
        return out
    return score


