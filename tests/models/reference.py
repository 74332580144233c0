"""Whole-model forward passes in plain numpy: a GPT-2 and a BERT, written
from the papers' equations, not from our layers. They read the weights of
our models by their paths (`model.weights`), so a test can check a model
end to end: embeddings, attention with its masks, LayerNorm, MLP, head.

Shape legend: B batch, T sequence length, H heads, D head size, E hidden
size, V vocabulary size.
"""

import math

import numpy as np


def weights_by_path(model):
    return {w.path: np.asarray(w.numpy(), "float64") for w in model.weights}


def layer_norm(x, w, prefix, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * w[prefix + "/gamma"] + w[
        prefix + "/beta"
    ]


def gelu(x):  # exact: x Φ(x)
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def attention(x, w, prefix, may_attend):
    """Multi-head self-attention; `may_attend` (B, T, T) bool, True = keep."""
    q, k, v = (
        np.einsum("bte,ehd->bhtd", x, w[f"{prefix}/{name}/kernel"])
        + w[f"{prefix}/{name}/bias"][None, :, None, :]
        for name in ("query", "key", "value")
    )  # (B, H, T, D)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    scores = np.where(may_attend[:, None], scores, -np.inf)
    scores = scores - scores.max(-1, keepdims=True)
    probs = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    heads = probs @ v  # (B, H, T, D)
    output = np.einsum("bhtd,hde->bte", heads, w[f"{prefix}/attention_output/kernel"])
    return output + w[f"{prefix}/attention_output/bias"]


def mlp(x, w, prefix):
    h = gelu(x @ w[f"{prefix}/feedforward_intermediate_dense/kernel"]
             + w[f"{prefix}/feedforward_intermediate_dense/bias"])  # fmt: skip
    return (
        h @ w[f"{prefix}/feedforward_output_dense/kernel"]
        + w[f"{prefix}/feedforward_output_dense/bias"]
    )


def gpt2_logits(model, ids, epsilon=1e-5):
    """GPT-2: pre-LN causal blocks, final LayerNorm, tied output projection;
    padding keys (id 0) are never attended and the padding logit is -1e9."""
    w = weights_by_path(model)
    table = w["embeddings/token_embedding/embeddings"]
    length = ids.shape[1]
    x = table[ids] + w["embeddings/position_embeddings"][:length]  # (B, T, E)
    causal = np.tril(np.ones((length, length), bool))
    may_attend = causal[None] & (ids != 0)[:, None, :]
    for i in range(model.num_layers):
        block = f"transformer_layer_{i}"
        normed = layer_norm(x, w, f"{block}/self_attention_layer_norm", epsilon)
        x = x + attention(normed, w, f"{block}/self_attention", may_attend)
        normed = layer_norm(x, w, f"{block}/feedforward_layer_norm", epsilon)
        x = x + mlp(normed, w, block)
    x = layer_norm(x, w, "final_layer_norm", epsilon)
    logits = x @ table.T  # (B, T, V)
    logits[..., 0] = -1e9
    return logits


def bert_outputs(model, ids, segment_ids, epsilon=1e-12):
    """BERT: token + position + segment embeddings and LayerNorm, post-LN
    blocks attending to real tokens, pooled `tanh(W h[CLS] + b)`."""
    w = weights_by_path(model)
    length = ids.shape[1]
    x = (
        w["embeddings/token_embedding/embeddings"][ids]
        + w["embeddings/position_embeddings"][:length]
        + w["segment_embedding/embeddings"][segment_ids]
    )
    x = layer_norm(x, w, "embeddings_layer_norm", epsilon)
    may_attend = np.broadcast_to((ids != 0)[:, None, :], (len(ids), length, length))
    for i in range(model.num_layers):
        block = f"transformer_layer_{i}"
        x = x + attention(x, w, f"{block}/self_attention", may_attend)
        x = layer_norm(x, w, f"{block}/self_attention_layer_norm", epsilon)
        x = layer_norm(
            x + mlp(x, w, block), w, f"{block}/feedforward_layer_norm", epsilon
        )
    pooled = np.tanh(x[:, 0] @ w["pooled_dense/kernel"] + w["pooled_dense/bias"])
    return x, pooled
