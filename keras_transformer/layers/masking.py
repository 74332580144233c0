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


def causal_mask(query_length, key_length, start_index=0):
    """Lower-triangular mask of shape `(1, T, S)`.

    Query `t` sits at absolute position `start_index + t` and may attend to
    keys at positions `<= start_index + t`. `start_index` lets a decoder with a
    fixed-size key/value cache mask the cache slots not yet written.
    """
    rows = ops.arange(query_length)[:, None] + start_index
    cols = ops.arange(key_length)[None, :]
    return ops.expand_dims(ops.greater_equal(rows, cols), 0)


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
