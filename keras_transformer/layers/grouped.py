"""The attention computation of `MultiHeadAttention` and its subclasses:
H query heads over K <= H key/value heads.

Shape legend: B batch, T query length, S key length, H query heads, K
key/value heads, G = H // K query heads per key/value head, D head size.

Query head `h = k * G + g` reads key/value head `k` (transformers'
`repeat_kv` order). Keys and values are never repeated per query head: the
queries are viewed as `(B, T, K, G, D)` and each key/value head is read by
its whole group at once, so a decoding step reads the `(B, S, K, D)` cache
once. Plain multi-head attention is the case K == H (G = 1): the size-1
group axis leaves every product and sum as it is, so its numbers are those
of `(B, T, H, D)` einsums bit for bit (float32, bfloat16 and float16,
eagerly and under XLA), and plain attention needs no path of its own.

Precision, as transformers' default (SDPA) attention computes it on the
CPU: the scores `Q·Kᵀ` are products of float32 copies of the queries and
keys (a bfloat16 or float16 product is exact in float32, and the sum is
float32 too), the bias, mask and softmax stay in float32, and only the
probabilities are rounded to the values' dtype for the weighted sum with
`V`, whose result is in that dtype. Rounding the scores to bfloat16 (8
significant bits) moves a sharp softmax: see docs/llama.md, "Half
precision".
"""

import keras
from keras import ops

from keras_transformer.layers.masking import masked_softmax
from keras_transformer.layers.products import HALF, product


def attend(q, k, v, mask, dropout, training=None, bias=None):
    """Scaled queries `(B, T, H, D)`, keys `(B, S, K, D)` and values
    `(B, S, K, D_v)` -> `(outputs (B, T, H, D_v), probabilities (B, H, T, S))`.

    `mask` is boolean `(B, T, S)` (True = may attend) or None; `dropout` is
    the layer applied to the probabilities; `bias` is None or a float
    tensor broadcastable to `(B, H, T, S)`, added to the scores before the
    softmax (see `biased_softmax`). The queries must already carry the
    scale; they may be float32 while keys and values are in the model's
    dtype. Outputs and probabilities are in the dtype of `v`.
    """
    heads, kv_heads = q.shape[2], k.shape[2]
    groups = heads // kv_heads
    batch, length, keys = ops.shape(q)[0], ops.shape(q)[1], ops.shape(k)[1]
    if mask is not None:
        mask = ops.expand_dims(mask, 1)  # (B, 1, T, S): same for every head
    grouped = ops.reshape(q, (batch, length, kv_heads, groups, q.shape[-1]))
    if q.shape[1] == 1:
        return _attend_one(grouped, k, v, mask, bias, dropout, training)
    scores = ops.einsum("btkgd,bskd->bkgts", *_float32(grouped, k))
    scores = ops.reshape(scores, (batch, heads, length, keys))
    probs = ops.cast(biased_softmax(scores, mask, bias), v.dtype)
    dropped = ops.reshape(
        dropout(probs, training=training), (batch, kv_heads, groups, length, keys)
    )
    output = product(dropped, v, "bkgts,bskd->btkgd")
    return ops.reshape(output, (batch, length, heads, v.shape[-1])), probs


def biased_softmax(scores, mask, bias=None):
    """`masked_softmax(scores + bias, mask)` in the dtype of `scores`.

    The sum is taken in float32, where the softmax runs, so a bias is not
    rounded to bfloat16 first. Without a bias it is `masked_softmax`
    itself.
    """
    if bias is None:
        return masked_softmax(scores, mask)
    biased = ops.cast(scores, "float32") + ops.cast(bias, "float32")
    return ops.cast(masked_softmax(biased, mask), scores.dtype)


def _attend_one(q, k, v, mask, bias, dropout, training):
    """One query `(B, 1, K, G, D)` (a decoding step) as two batched
    matrix products over the `(B, S, K, D)` key/value cache.

    Broadcast products summed afterwards (`q * k` then a sum) make XLA
    write the `(B, S, K, G, D)` product out before reducing it: at 2,048
    cached positions that is 10 times the cache's bytes per step. The
    products read the cache once (XLA may first copy it to a `(B, K, S,
    D)` layout, the cache's own size). The same numbers up to the order of
    the additions.
    """
    kv_heads, groups = q.shape[2], q.shape[3]
    batch = ops.shape(q)[0]
    heads = kv_heads * groups
    if groups == 1:
        return _attend_one_per_head(q[:, 0, :, 0], k, v, mask, bias, dropout, training)
    scores = ops.einsum("bkgd,bskd->bkgs", *_float32(q[:, 0], k))  # (B, K, G, S)
    scores = ops.reshape(scores, (batch, heads, 1, -1))  # (B, H, 1, S)
    probs = ops.cast(biased_softmax(scores, mask, bias), v.dtype)
    dropped = dropout(probs, training=training)
    weights = ops.reshape(dropped, (batch, kv_heads, groups, -1))  # (B, K, G, S)
    output = product(weights, v, "bkgs,bskd->bkgd")  # (B, K, G, D_v)
    return ops.reshape(output, (batch, 1, heads, v.shape[-1])), probs


def _float32(*tensors):
    """The tensors in float32: the operands of float32 scores."""
    return [ops.cast(t, "float32") for t in tensors]


def _attend_one_per_head(q, k, v, mask, bias, dropout, training):
    """`_attend_one` where each head has its own keys and values (no
    groups): products and sums over the `(B, S, H, D)` cache, which XLA
    fuses into one pass that reads the cache in place (the same size as
    the cache, the products are never written out; batched matrix
    products first copied the cache to a `(B, H, S, D)` layout at every
    step: GPT-2-small shapes decoded 1.6x slower at batch 8)."""
    query, keys = _float32(q, k)  # (B, H, D), (B, S, H, D)
    scores = ops.sum(query[:, None] * keys, axis=-1)  # (B, S, H)
    scores = ops.transpose(scores, (0, 2, 1))[:, :, None, :]  # (B, H, 1, S)
    probs = ops.cast(biased_softmax(scores, mask, bias), v.dtype)
    dropped = dropout(probs, training=training)
    weights = ops.transpose(dropped[:, :, 0, :], (0, 2, 1))[..., None]  # (B, S, H, 1)
    if keras.backend.standardize_dtype(v.dtype) in HALF:  # as `product` sums
        output = ops.sum(ops.cast(weights, "float32") * ops.cast(v, "float32"), axis=1)
        output = ops.cast(output, v.dtype)
    else:
        output = ops.sum(weights * v, axis=1)  # (B, H, D_v)
    return output[:, None], probs
