"""The decoder block of Llama, Mistral and Qwen2: pre-norm (RMS) rotary
self-attention, then a gated feed-forward network.

Shape legend: B batch, T sequence length, E hidden size, K key/value heads,
D head size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers.block import check_block_inputs, padding_attention_mask
from keras_transformer.layers.feedforward import GatedFeedForward
from keras_transformer.layers.masking import keras_mask
from keras_transformer.layers.normalization import RMSNormalization
from keras_transformer.layers.rotary_attention import (
    RotaryAttention,
    check_rotary_attention_arguments,
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class RotaryDecoderBlock(keras.layers.Layer):
    """`x + attention(norm(x))`, then `x + feedforward(norm(x))`.

    The block of transformers' `LlamaDecoderLayer` (and Mistral's, Qwen2's):
    RMS normalization before each sub-block, causal rotary self-attention
    (`kt.layers.RotaryAttention`, grouped key/value heads, an optional
    sliding window) and a SwiGLU feed-forward (`kt.layers.GatedFeedForward`),
    each added back onto its input. It takes the same cache arguments as
    `kt.layers.TransformerDecoderBlock`, so one forward pass serves the
    model and each cached decoding step.

    Args:
        num_heads: number of query heads.
        intermediate_dim: width of the feed-forward network.
        num_key_value_heads: number of key/value heads (dividing
            `num_heads`); None = `num_heads`.
        head_dim: size of each head; defaults to hidden size // `num_heads`.
        rope_theta: the rotary base.
        rope_scaling: None or a Hugging Face rope scaling dict.
        sliding_window: None, or how many positions (itself included) a
            query attends to.
        attention_bias: False, True (all four projections) or `"qkv"`.
        layer_norm_epsilon: epsilon of both RMS normalizations.
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

    Layers (attributes): `attention_norm`, `attention`, `feedforward_norm`,
    `feedforward`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> block = kt.layers.RotaryDecoderBlock(4, 32, num_key_value_heads=2)
        >>> tuple(block(np.random.rand(2, 5, 16).astype("float32")).shape)
        (2, 5, 16)

    References:
        Touvron et al., "LLaMA: Open and Efficient Foundation Language
        Models", 2023.
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
        attention_bias=False,
        layer_norm_epsilon=1e-6,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("num_heads", num_heads)
        validation.check_positive_int("intermediate_dim", intermediate_dim)
        validation.check_positive_int("head_dim", head_dim, allow_none=True)
        validation.check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
        validation.check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.sliding_window = sliding_window
        self.attention_bias = attention_bias
        self.layer_norm_epsilon = layer_norm_epsilon
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        check_rotary_attention_arguments(
            num_heads,
            num_key_value_heads,
            rope_theta,
            rope_scaling,
            sliding_window,
            attention_bias,
        )

    def build(self, inputs_shape):
        validation.check_rank("inputs", inputs_shape, 3)
        hidden_dim = inputs_shape[-1]
        head_dim = self.head_dim
        if head_dim is None:
            if hidden_dim % self.num_heads:
                raise ValueError(
                    "The hidden size must be divisible by `num_heads` when "
                    f"`head_dim` is not given. Received: hidden size {hidden_dim}, "
                    f"num_heads={self.num_heads}"
                )
            head_dim = hidden_dim // self.num_heads
        self.attention_norm = self._norm("attention_norm", inputs_shape)
        self.attention = RotaryAttention(
            self.num_heads,
            head_dim,
            num_key_value_heads=self.num_key_value_heads,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            sliding_window=self.sliding_window,
            attention_bias=self.attention_bias,
            dropout=self.dropout,
            output_dim=hidden_dim,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention.build(inputs_shape)
        self.feedforward_norm = self._norm("feedforward_norm", inputs_shape)
        self.feedforward = GatedFeedForward(
            self.intermediate_dim,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name="feedforward",
        )
        self.feedforward.build(inputs_shape)
        self.attention_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.feedforward_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="feedforward_dropout"
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
        use_cache = self_attention_cache is not None
        check_block_inputs(inputs, padding_mask)
        if padding_mask is None:
            padding_mask = keras_mask(inputs)
        h = self.attention_norm(inputs)
        if use_cache:
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
            h = self.attention(
                h,
                attention_mask=padding_attention_mask(padding_mask),
                use_causal_mask=True,
                training=training,
            )
        x = inputs + self.attention_dropout(h, training=training)
        h = self.feedforward(self.feedforward_norm(x))
        x = x + self.feedforward_dropout(h, training=training)
        return (x, self_attention_cache) if use_cache else x

    @property
    def self_attention_layer(self):
        """The attention, by the name decoding's `empty_caches` asks for."""
        return self.attention

    def _norm(self, name, inputs_shape):
        norm = RMSNormalization(
            self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(inputs_shape)
        return norm

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
                "attention_bias": self.attention_bias,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape
