"""Boolean attention masks and the masked softmax every attention layer uses.

Shape legend: B batch, T query length, S key length.
Masks are boolean with True = "may attend". Softmax always runs in float32
and masked positions get exactly zero probability, so a row whose keys are
all masked gives zeros (never NaN) in float16 and bfloat16 too.
"""

from keras import ops

from keras_transformer import _compat

# Added to masked logits before the float32 softmax. Finite, so a fully masked
# row gives a uniform (not NaN) softmax that `masked_softmax` then zeroes.
MASKED_LOGIT = -1e9


def keras_mask(x):
    """Returns the Keras mask attached to `x` (e.g. by `mask_zero`), or None
    (Keras keeps it on the tensor: `_compat.keras_mask`)."""
    return _compat.keras_mask(x)


def positions(length, start_index=0):
    """`(1, T)` int32 positions `start_index .. start_index + T - 1`; with a
    `(B,)` `start_index` (each row of a batch at its own position, as a
    server's slots are), `(B, T)`."""
    start = ops.reshape(ops.cast(start_index, "int32"), (-1, 1))
    return ops.arange(length, dtype="int32")[None, :] + start


def causal_mask(query_length, key_length, start_index=0):
    """Lower-triangular mask of shape `(1, T, S)` (`(B, T, S)` for a `(B,)`
    `start_index`).

    Query `t` sits at absolute position `start_index + t` and may attend to
    keys at positions `<= start_index + t`. `start_index` lets a decoder with a
    fixed-size key/value cache mask the cache slots not yet written.
    """
    rows = positions(query_length, start_index)[:, :, None]
    cols = ops.arange(key_length, dtype="int32")[None, None, :]
    return ops.greater_equal(rows, cols)


def merge_masks(*masks):
    """Logical AND of the masks that are not None (broadcasting), or None."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def masked_softmax(scores, mask=None):
    """Softmax over the last axis in float32, exactly zero where `mask` is False.

    Args:
        scores: logits of any float dtype.
        mask: boolean, broadcastable to `scores`; True = keep.

    Returns:
        Probabilities in the dtype of `scores`.
    """
    dtype = scores.dtype
    scores = ops.cast(scores, "float32")
    if scores.shape[-1] == 1:
        # One key (e.g. the first decoding step): softmax is 1. Said here
        # because `ops.softmax` warns about a size-1 axis.
        probs = ops.ones_like(scores)
        if mask is not None:
            probs = ops.where(ops.cast(mask, "bool"), probs, 0.0)
        return ops.cast(probs, dtype)
    if mask is None:
        return ops.cast(ops.softmax(scores, axis=-1), dtype)
    mask = ops.cast(mask, "bool")
    scores = ops.where(mask, scores, MASKED_LOGIT)
    probs = ops.where(mask, ops.softmax(scores, axis=-1), 0.0)
    return ops.cast(probs, dtype)


def write_cache(cache, kv, start_index):
    """`cache` `(B, 2, L, K, D)` with `kv` `(B, 2, T, K, D)` written at
    positions `start_index ..` (a scalar: one slice for every row; a `(B,)`
    tensor: each row at its own position, one scatter, in which a position
    outside `[0, L)` writes nothing: a server's idle rows)."""
    kv = ops.cast(kv, cache.dtype)
    if ops.ndim(start_index) == 0:
        return ops.slice_update(cache, [0, 0, start_index, 0, 0], kv)
    batch, _, length, heads, depth = ops.shape(kv)
    slots = ops.shape(cache)[2]
    at = positions(length, start_index)  # (B, T)
    inside = ops.logical_and(ops.greater_equal(at, 0), ops.less(at, slots))
    at = ops.clip(at, 0, slots - 1)
    # Outside the cache, a row writes back what its (clipped) slot holds.
    held = ops.take_along_axis(cache, at[:, None, :, None, None], axis=2)
    kv = ops.where(inside[:, None, :, None, None], kv, held)
    shape = (batch, 2, length)
    rows = ops.broadcast_to(ops.arange(batch, dtype="int32")[:, None, None], shape)
    halves = ops.broadcast_to(ops.arange(2, dtype="int32")[None, :, None], shape)
    at = ops.broadcast_to(at[:, None, :], shape)
    indices = ops.reshape(ops.stack([rows, halves, at], axis=-1), (-1, 3))
    return ops.scatter_update(cache, indices, ops.reshape(kv, (-1, heads, depth)))
