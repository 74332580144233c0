"""T5's relative position bias: a learned scalar per head and bucket of the
distance between a query and a key, added to the attention scores.

Shape legend: H heads, T query length, S key length.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_transformer import _validation as validation


def relative_position_buckets(num_buckets, max_distance, bidirectional):
    """The bucket of each distance `n = 0 .. max_distance` (a numpy int32
    table; larger distances share the last entry).

    Distances below half the buckets of a direction are exact; the rest are
    log-spaced up to `max_distance`. The table is computed once, in float32
    in the order transformers' `T5Attention._relative_position_bucket`
    computes it, so every distance falls into the checkpoint's bucket
    (`tests/layers/test_relative_position.py` compares all of them).
    """
    if bidirectional:
        num_buckets //= 2
    exact = num_buckets // 2
    n = np.arange(max_distance + 1)
    ratio = np.log(np.maximum(n, 1).astype("float32") / np.float32(exact))
    steps = ratio / np.float32(math.log(max_distance / exact)) * (num_buckets - exact)
    large = np.minimum(exact + steps.astype("int64"), num_buckets - 1)
    return np.where(n < exact, n, large).astype("int32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class RelativePositionBias(keras.layers.Layer):
    """The additive attention bias of T5's relative positions.

    The distance `key - query` between two positions falls into one of
    `num_buckets` buckets (`bidirectional`: half for keys before the query,
    half for keys after it; causal: all for keys before it); each bucket
    holds one learned number per head. Within a direction, the first half
    of the buckets are the distances 0, 1, 2 ... and the rest grow
    logarithmically up to `max_distance`, beyond which all distances share
    the last bucket. The bias goes to `kt.layers.MultiHeadAttention`'s
    `position_bias` (and a block's: `TransformerDecoderBlock(...,
    positions="bias")`).

    Args:
        num_heads: attention heads H.
        num_buckets: buckets in all (both directions).
        max_distance: the distance from which all share the last bucket.
        bidirectional: buckets for both directions (an encoder) or for keys
            before the query only (a causal decoder).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(B, T, ...)` hidden states of the queries (only their
            length T is read).
        key_length: S, the number of keys; defaults to T.
        query_start: the position of the first query (a cached decoding
            step's index); the keys are at positions `0 .. S - 1`.

    Returns:
        float32 `(1, H, T, S)`.

    Layers (weights): `embeddings` `(num_buckets, H)`, Hugging Face's
    `relative_attention_bias.weight`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> bias = kt.layers.RelativePositionBias(num_heads=2, bidirectional=False)
        >>> tuple(bias(np.zeros((1, 5, 8), "float32")).shape)
        (1, 2, 5, 5)
        >>> tuple(bias(np.zeros((1, 1, 8)), key_length=16, query_start=7).shape)
        (1, 2, 1, 16)

    References:
        Raffel et al., "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", 2020; Shaw et al.,
        "Self-Attention with Relative Position Representations", 2018.
    """

    def __init__(
        self, num_heads, num_buckets=32, max_distance=128, bidirectional=True, **kwargs
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("num_heads", num_heads)
        validation.check_positive_int("num_buckets", num_buckets)
        validation.check_positive_int("max_distance", max_distance)
        validation.check_bool("bidirectional", bidirectional)
        per_direction = num_buckets // 2 if bidirectional else num_buckets
        if per_direction < 2 or max_distance <= per_direction // 2:
            raise ValueError(
                "`num_buckets` must give each direction at least 2 buckets, and "
                "`max_distance` must exceed half of them. Received: "
                f"num_buckets={num_buckets}, max_distance={max_distance}, "
                f"bidirectional={bidirectional}"
            )
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self._buckets = relative_position_buckets(
            num_buckets, max_distance, bidirectional
        )

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.num_buckets, self.num_heads),
            initializer=keras.initializers.RandomNormal(stddev=1.0),
        )
        self.built = True

    def call(self, inputs, key_length=None, query_start=0):
        query_length = ops.shape(inputs)[1]
        key_length = query_length if key_length is None else key_length
        queries = ops.arange(query_length, dtype="int32") + ops.cast(
            query_start, "int32"
        )
        keys = ops.arange(key_length, dtype="int32")
        relative = keys[None, :] - queries[:, None]  # (T, S): key - query
        if self.bidirectional:
            distance = ops.abs(relative)
        else:
            distance = ops.maximum(-relative, 0)  # later keys: bucket 0
        distance = ops.minimum(distance, self.max_distance)
        buckets = ops.take(ops.convert_to_tensor(self._buckets), distance)
        if self.bidirectional:  # keys after the query use the upper half
            buckets = buckets + ops.cast(relative > 0, "int32") * (
                self.num_buckets // 2
            )
        bias = ops.take(ops.cast(self.embeddings, "float32"), buckets, axis=0)
        return ops.transpose(bias, (2, 0, 1))[None]  # (1, H, T, S)

    def compute_output_spec(self, inputs, key_length=None, query_start=0):
        length = inputs.shape[1]
        keys = length if key_length is None else key_length
        keys = keys if isinstance(keys, int) else None
        return keras.KerasTensor((1, self.num_heads, length, keys), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "num_buckets": self.num_buckets,
                "max_distance": self.max_distance,
                "bidirectional": self.bidirectional,
            }
        )
        return config
