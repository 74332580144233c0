"""The decoder block of Gemma 3: rotary attention whose queries and keys are
RMS-normalized per head, and a norm before and after each sub-block.

The block computes what transformers' `Gemma3DecoderLayer` computes:

    h = x + post_attention_norm(attention(attention_norm(x)))
    y = h + post_feedforward_norm(feedforward(feedforward_norm(h)))

with Gemma's zero-centred RMS norms (`kt.layers.GemmaRMSNormalization`), a
tanh-GELU gated feed-forward, and an attention (`GemmaAttention`) that
normalizes each query and key head before rotating it. A block is local
(`sliding_window` set, its own rotary base) or global; the model chooses
per block.

Shape legend: B batch, T sequence length, E hidden size, H query heads,
K key/value heads, D head size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers.activations import gelu_approximate
from keras_transformer.layers.block import check_block_inputs, padding_attention_mask
from keras_transformer.layers.feedforward import GatedFeedForward
from keras_transformer.layers.masking import keras_mask
from keras_transformer.layers.normalization import GemmaRMSNormalization
from keras_transformer.layers.rotary_attention import RotaryAttention


@keras.saving.register_keras_serializable(package="keras_transformer")
class GemmaAttention(RotaryAttention):
    """`kt.layers.RotaryAttention` whose projected query and key heads are
    RMS-normalized (`query_norm`, `key_norm`: one
    `kt.layers.GemmaRMSNormalization` of size D each, shared by the heads)
    before they are rotated and the keys enter the cache, as transformers'
    `Gemma3Attention` does.

    Args:
        num_heads: number of query heads H.
        key_dim: size D of every head.
        layer_norm_epsilon: epsilon of the query and key norms.
        **kwargs: the arguments of `kt.layers.RotaryAttention`
            (`num_key_value_heads`, `rope_theta`, `rope_scaling`,
            `sliding_window`, `scale`, ...).

    Call arguments: those of `kt.layers.MultiHeadAttention`.

    Returns:
        As `kt.layers.MultiHeadAttention`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> attention = kt.layers.GemmaAttention(4, 8, num_key_value_heads=1,
        ...                                      sliding_window=3, scale=0.25)
        >>> x = np.random.rand(2, 5, 16).astype("float32")
        >>> tuple(attention(x, use_causal_mask=True).shape)
        (2, 5, 16)

    References:
        Gemma Team, "Gemma 3 Technical Report", 2025. Dehghani et al.,
        "Scaling Vision Transformers to 22 Billion Parameters", 2023
        (query-key normalization).
    """

    def __init__(self, num_heads, key_dim, layer_norm_epsilon=1e-6, **kwargs):
        validation.check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
        super().__init__(num_heads, key_dim, **kwargs)
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        for name in ("query_norm", "key_norm"):
            norm = GemmaRMSNormalization(
                self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
            norm.build((None, None, None, self.key_dim))
            setattr(self, name, norm)

    def _add_positions(self, q, k, start_index):
        # (B, T, H, D), (B, T, K, D): each head normalized over D, then rotated.
        return super()._add_positions(self.query_norm(q), self.key_norm(k), start_index)

    def get_config(self):
        config = super().get_config()
        config["layer_norm_epsilon"] = self.layer_norm_epsilon
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Gemma3DecoderBlock(keras.layers.Layer):
    """`h = x + norm(attention(norm(x)))`, then `h + norm(feedforward(norm(h)))`.

    The block of transformers' `Gemma3DecoderLayer`: four
    `kt.layers.GemmaRMSNormalization`s (before and after each sub-block),
    causal `kt.layers.GemmaAttention` (query-key norms, grouped key/value
    heads, an optional sliding window) and a tanh-GELU gated feed-forward
    (`kt.layers.GatedFeedForward`). It takes the cache arguments of
    `kt.layers.RotaryDecoderBlock`, so one forward pass serves the model
    and each cached decoding step.

    Args:
        num_heads: number of query heads.
        intermediate_dim: width of the gated feed-forward.
        num_key_value_heads: number of key/value heads (dividing
            `num_heads`); None = `num_heads`.
        head_dim: size of each head.
        rope_theta: the rotary base.
        rope_scaling: None or a Hugging Face rope scaling dict.
        sliding_window: None (a global block), or how many positions
            (itself included) a query attends to (a local block).
        query_pre_attn_scalar: the attention scores are scaled by
            `query_pre_attn_scalar ** -0.5` (Gemma's; not `head_dim`'s).
        layer_norm_epsilon: epsilon of every RMS normalization.
        dropout: dropout rate on the attention probabilities and on each
            sub-block's output before the residual sum.
        kernel_initializer: initializer of all kernels.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(B, T, E)`.
        padding_mask: boolean `(B, T)`, True at real tokens; defaults to
            the Keras mask of `inputs`. Unused with a cache.
        training: whether dropout is active.
        self_attention_cache: `(B, 2, S_max, K, D)` keys and values so far.
        self_attention_cache_update_index: position of `inputs[:, 0]`.

    Returns:
        `(B, T, E)`; with `self_attention_cache`, the tuple `(outputs,
        self_attention_cache)` with this call's keys and values written in.

    Layers (attributes): `attention_norm`, `attention`,
    `post_attention_norm`, `feedforward_norm`, `feedforward`,
    `post_feedforward_norm` (the names its `.keras` files store weights
    under).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> block = kt.layers.Gemma3DecoderBlock(4, 32, num_key_value_heads=1,
        ...                                      head_dim=8, sliding_window=4)
        >>> tuple(block(np.random.rand(2, 5, 16).astype("float32")).shape)
        (2, 5, 16)

    References:
        Gemma Team, "Gemma 3 Technical Report", 2025.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        *,
        num_key_value_heads=None,
        head_dim=None,
        rope_theta=10000.0,
        rope_scaling=None,
        sliding_window=None,
        query_pre_attn_scalar=None,
        layer_norm_epsilon=1e-6,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("intermediate_dim", intermediate_dim)
        validation.check_positive_int("head_dim", head_dim, allow_none=True)
        if query_pre_attn_scalar is not None:
            validation.check_positive_number(
                "query_pre_attn_scalar", query_pre_attn_scalar
            )
        validation.check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
        validation.check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.sliding_window = sliding_window
        self.query_pre_attn_scalar = query_pre_attn_scalar
        self.layer_norm_epsilon = layer_norm_epsilon
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        validation.check_rank("inputs", inputs_shape, 3)
        hidden_dim = inputs_shape[-1]
        head_dim = self.head_dim or hidden_dim // self.num_heads
        scalar = self.query_pre_attn_scalar or head_dim
        self.attention = GemmaAttention(
            self.num_heads,
            head_dim,
            layer_norm_epsilon=self.layer_norm_epsilon,
            num_key_value_heads=self.num_key_value_heads,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            sliding_window=self.sliding_window,
            dropout=self.dropout,
            output_dim=hidden_dim,
            scale=float(scalar) ** -0.5,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention.build(inputs_shape)
        self.feedforward = GatedFeedForward(
            self.intermediate_dim,
            activation=gelu_approximate,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name="feedforward",
        )
        self.feedforward.build(inputs_shape)
        for name in ("attention_norm", "post_attention_norm", "feedforward_norm",
                     "post_feedforward_norm"):  # fmt: skip
            norm = GemmaRMSNormalization(
                self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
            norm.build(inputs_shape)
            setattr(self, name, norm)
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        training=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
    ):
        check_block_inputs(inputs, padding_mask)
        h = self.attention_norm(inputs)
        if self_attention_cache is not None:
            h, self_attention_cache = self.attention(
                h,
                use_causal_mask=True,
                training=training,
                cache=self_attention_cache,
                cache_update_index=(
                    0
                    if self_attention_cache_update_index is None
                    else self_attention_cache_update_index
                ),
            )
        else:
            if padding_mask is None:
                padding_mask = keras_mask(inputs)
            h = self.attention(
                h,
                attention_mask=padding_attention_mask(padding_mask),
                use_causal_mask=True,
                training=training,
            )
        h = self.post_attention_norm(h)
        x = inputs + self.dropout_layer(h, training=training)
        h = self.feedforward(self.feedforward_norm(x))
        h = self.post_feedforward_norm(h)
        x = x + self.dropout_layer(h, training=training)
        return x if self_attention_cache is None else (x, self_attention_cache)

    @property
    def self_attention_layer(self):
        """The attention, by the name decoding's `empty_caches` asks for."""
        return self.attention

    def _initializer(self):
        # A fresh initializer object per sublayer, so no two share a seed.
        return keras.initializers.get(
            keras.initializers.serialize(self.kernel_initializer)
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "num_key_value_heads": self.num_key_value_heads,
                "head_dim": self.head_dim,
                "rope_theta": self.rope_theta,
                "rope_scaling": self.rope_scaling,
                "sliding_window": self.sliding_window,
                "query_pre_attn_scalar": self.query_pre_attn_scalar,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config

    def compute_output_shape(self, inputs_shape):
        return inputs_shape
