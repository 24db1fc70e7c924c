"""BERT fine-tuning in numpy float64: the forward pass, its gradients written out by hand, and
AdamW, for the reranker (reranker.py) without torch.

The model is transformers' BertForSequenceClassification(num_labels=1) in eval mode (no
dropout), eager attention: embeddings (word + position + token type, LayerNorm), the encoder
layers (self-attention with the additive padding mask, LayerNorm after each residual, GELU(erf)
feed-forward), the pooler tanh(dense(h[CLS])) and the one-logit classifier. Weights are a dict
keyed as the package's safetensors (embeddings.*, encoder.layer.N.*, pooler.dense.*) plus
classifier.weight [1, hidden] and classifier.bias [1]; dense weights are [out, in] as in torch.

What matches torch, so that the recipe reranker.py used to run in torch is the same training:
  * nn.Embedding(padding_idx=pad_token_id): the word embedding row of [PAD] gets no gradient;
  * BCEWithLogits, mean over the batch;
  * torch.optim.AdamW(betas=(0.9, 0.999), eps=1e-8) over every parameter, weight decay on all
    of them (decoupled: p *= 1 - lr * wd before the Adam step), dense gradients, so rows of the
    embedding tables a batch does not use still move with their moments and decay.
gradient_check() compares the hand-written gradients with finite differences.
"""
import numpy as np
from scipy.special import erf

SQRT2 = np.sqrt(2.0)
INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)
MASKED = -1e30  # added to the scores of padded keys; softmax gives them exactly 0, as torch


def _ln(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    inv = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    xhat = xc * inv
    return xhat * g + b, (xhat, inv, g)


def _ln_back(dy, cache):
    xhat, inv, g = cache
    dg = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(0)
    db = dy.reshape(-1, dy.shape[-1]).sum(0)
    dxhat = dy * g
    dx = inv * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, dg, db


def _dense(x, w, b):
    # 2-D products: numpy hands those to BLAS; a stacked [B, T, in] @ [in, out] is far slower
    return (x.reshape(-1, x.shape[-1]) @ w.T + b).reshape(*x.shape[:-1], w.shape[0])


def _dense_back(dy, x, w):
    """dy [..., out], x [..., in], w [out, in] -> dx, dw, db."""
    d2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    return (d2 @ w).reshape(*dy.shape[:-1], w.shape[1]), d2.T @ x2, d2.sum(0)


def _bce(z, y):
    return float(np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))


class Bert:
    """Forward and backward of BertForSequenceClassification(num_labels=1); float64."""

    def __init__(self, cfg, weights):
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.hidden = cfg["hidden_size"]
        self.eps = cfg["layer_norm_eps"]
        self.pad = cfg.get("pad_token_id", 0)
        if cfg.get("hidden_act") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only hidden_act gelu (erf) and absolute positions are implemented")
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}

    def logits(self, ids, types, mask):
        return self._forward(ids, types, mask, keep=False)[0]

    def loss(self, ids, types, mask, y):
        """Mean binary cross-entropy of the logits against y (0/1)."""
        return _bce(self.logits(ids, types, mask), y)

    def loss_and_grads(self, ids, types, mask, y):
        """The loss and its gradient for every weight (a dict like self.w)."""
        z, caches = self._forward(ids, types, mask, keep=True)
        dz = (1.0 / (1.0 + np.exp(-z)) - y) / len(y)
        return _bce(z, y), self._backward(dz, caches)

    def last_hidden_state(self, ids, types, mask):
        """The last layer's hidden states [batch, sequence, hidden] (BertModel's
        last_hidden_state): sparse.py's float64 reference for the SPLADE graph."""
        return self._encode(ids, types, mask, keep=False)[0]

    def _forward(self, ids, types, mask, keep):
        w = self.w
        x, c = self._encode(ids, types, mask, keep)
        h0 = x[:, 0]
        pooled = np.tanh(_dense(h0, w["pooler.dense.weight"], w["pooler.dense.bias"]))
        z = _dense(pooled, w["classifier.weight"], w["classifier.bias"])[:, 0]
        c.update(h0=h0, pooled=pooled, x_shape=x.shape)
        return z, c

    def _encode(self, ids, types, mask, keep):
        w, H = self.w, self.heads
        B, T = ids.shape
        D = self.hidden // H
        c = {"ids": ids, "types": types, "T": T}
        e = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T] \
            + w["embeddings.token_type_embeddings.weight"][types]
        x, c["emb_ln"] = _ln(e, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        add = np.where(mask[:, None, None, :] > 0, 0.0, MASKED)
        c["layers"] = []
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            lc = {"x": x}
            split = lambda t: t.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # noqa: E731
            q = split(_dense(x, w[p + "attention.self.query.weight"], w[p + "attention.self.query.bias"]))
            k = split(_dense(x, w[p + "attention.self.key.weight"], w[p + "attention.self.key.bias"]))
            v = split(_dense(x, w[p + "attention.self.value.weight"], w[p + "attention.self.value.bias"]))
            s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D) + add
            s = np.exp(s - s.max(-1, keepdims=True))
            prob = s / s.sum(-1, keepdims=True)
            ctx = (prob @ v).transpose(0, 2, 1, 3).reshape(B, T, H * D)
            a = _dense(ctx, w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"])
            x1, lc["ln1"] = _ln(a + x, w[p + "attention.output.LayerNorm.weight"],
                                w[p + "attention.output.LayerNorm.bias"], self.eps)
            u = _dense(x1, w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"])
            g = 0.5 * u * (1.0 + erf(u / SQRT2))
            o = _dense(g, w[p + "output.dense.weight"], w[p + "output.dense.bias"])
            x, lc["ln2"] = _ln(o + x1, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
            if keep:
                lc.update(q=q, k=k, v=v, prob=prob, ctx=ctx, x1=x1, u=u, g=g)
                c["layers"].append(lc)
        return x, c

    def _backward(self, dz, c):
        w, H = self.w, self.heads
        grads = {}
        dz = dz[:, None]
        dpooled, grads["classifier.weight"], grads["classifier.bias"] = _dense_back(dz, c["pooled"], w["classifier.weight"])
        dpre = dpooled * (1.0 - c["pooled"] ** 2)
        dh0, grads["pooler.dense.weight"], grads["pooler.dense.bias"] = _dense_back(dpre, c["h0"], w["pooler.dense.weight"])
        dx = np.zeros(c["x_shape"])
        dx[:, 0] = dh0
        B, T, _ = c["x_shape"]
        D = self.hidden // H
        for i in reversed(range(self.layers)):
            p = f"encoder.layer.{i}."
            lc = c["layers"][i]
            dsum, grads[p + "output.LayerNorm.weight"], grads[p + "output.LayerNorm.bias"] = _ln_back(dx, lc["ln2"])
            dg, grads[p + "output.dense.weight"], grads[p + "output.dense.bias"] = _dense_back(dsum, lc["g"], w[p + "output.dense.weight"])
            u = lc["u"]
            du = dg * (0.5 * (1.0 + erf(u / SQRT2)) + u * INV_SQRT_2PI * np.exp(-0.5 * u * u))
            dx1, grads[p + "intermediate.dense.weight"], grads[p + "intermediate.dense.bias"] = _dense_back(du, lc["x1"], w[p + "intermediate.dense.weight"])
            dx1 = dx1 + dsum  # the residual around the feed-forward
            dsum1, grads[p + "attention.output.LayerNorm.weight"], grads[p + "attention.output.LayerNorm.bias"] = _ln_back(dx1, lc["ln1"])
            dctx, grads[p + "attention.output.dense.weight"], grads[p + "attention.output.dense.bias"] = _dense_back(dsum1, lc["ctx"], w[p + "attention.output.dense.weight"])
            dctx = dctx.reshape(B, T, H, D).transpose(0, 2, 1, 3)
            prob, q, k, v = lc["prob"], lc["q"], lc["k"], lc["v"]
            dprob = dctx @ v.transpose(0, 1, 3, 2)
            dv = prob.transpose(0, 1, 3, 2) @ dctx
            ds = prob * (dprob - (dprob * prob).sum(-1, keepdims=True)) / np.sqrt(D)
            dq = ds @ k
            dk = ds.transpose(0, 1, 3, 2) @ q
            merge = lambda t: t.transpose(0, 2, 1, 3).reshape(B, T, H * D)  # noqa: E731
            dx = dsum1  # the residual around attention
            for name, d in (("query", dq), ("key", dk), ("value", dv)):
                dxi, grads[p + f"attention.self.{name}.weight"], grads[p + f"attention.self.{name}.bias"] = \
                    _dense_back(merge(d), lc["x"], w[p + f"attention.self.{name}.weight"])
                dx = dx + dxi
        de, grads["embeddings.LayerNorm.weight"], grads["embeddings.LayerNorm.bias"] = _ln_back(dx, c["emb_ln"])
        dword = np.zeros_like(w["embeddings.word_embeddings.weight"])
        np.add.at(dword, c["ids"].ravel(), de.reshape(-1, de.shape[-1]))
        dword[self.pad] = 0.0  # nn.Embedding(padding_idx=pad_token_id)
        grads["embeddings.word_embeddings.weight"] = dword
        dpos = np.zeros_like(w["embeddings.position_embeddings.weight"])
        dpos[:c["T"]] = de.sum(0)
        grads["embeddings.position_embeddings.weight"] = dpos
        dtype_ = np.zeros_like(w["embeddings.token_type_embeddings.weight"])
        np.add.at(dtype_, c["types"].ravel(), de.reshape(-1, de.shape[-1]))
        grads["embeddings.token_type_embeddings.weight"] = dtype_
        return grads


class AdamW:
    """torch.optim.AdamW (amsgrad off) over a dict of float64 arrays, updated in place."""

    def __init__(self, params, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8):
        self.p, self.lr, self.wd, self.b1, self.b2, self.eps = params, lr, weight_decay, *betas, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads):
        self.t += 1
        bc1, bc2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for k, p in self.p.items():
            g = grads[k]
            p *= 1 - self.lr * self.wd
            m, v = self.m[k], self.v[k]
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= (self.lr / bc1) * m / (np.sqrt(v) / np.sqrt(bc2) + self.eps)


def gradient_check(model, ids, types, mask, y, n=48, h=1e-5, seed=0):
    """Largest error of the hand-written gradient against central finite differences at n
    (weight, index) points drawn over every kind of weight, relative to the larger of the two
    and 1e-6 (the key biases' gradient is 0 up to rounding: softmax ignores them). Float64 with
    h = 1e-5: ~1e-6 when the gradient is right, ~1 when a term is wrong or missing."""
    rng = np.random.default_rng(seed)
    _, grads = model.loss_and_grads(ids, types, mask, y)
    used = sorted(set(ids.ravel().tolist()) - {model.pad})
    worst = 0.0
    for name in rng.choice(sorted(model.w), size=n, replace=True):
        wv = model.w[name]
        if name == "embeddings.word_embeddings.weight":
            idx = (int(rng.choice(used)), int(rng.integers(wv.shape[1])))
        elif name == "embeddings.position_embeddings.weight":
            idx = (int(rng.integers(ids.shape[1])), int(rng.integers(wv.shape[1])))
        else:
            idx = tuple(int(rng.integers(s)) for s in wv.shape)
        old = wv[idx]
        wv[idx] = old + h
        lp = model.loss(ids, types, mask, y)
        wv[idx] = old - h
        lm = model.loss(ids, types, mask, y)
        wv[idx] = old
        num, ana = (lp - lm) / (2 * h), grads[name][idx]
        worst = max(worst, abs(num - ana) / max(abs(num), abs(ana), 1e-6))
    return worst
