"""The decoder block of Llama, Mistral and Qwen2: a configuration of
`kt.layers.TransformerDecoderBlock` (pre-norm RMS, rotary self-attention,
a gated feed-forward, no cross-attention).

Shape legend: B batch, T sequence length, E hidden size, K key/value heads,
D head size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers.decoder import TransformerDecoderBlock


@keras.saving.register_keras_serializable(package="keras_transformer")
class RotaryDecoderBlock(TransformerDecoderBlock):
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
    `feedforward` (the names its `.keras` files store weights under).

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

    HEAD_SIZE_ARGUMENT = "head_dim"
    # Files of this block store its weights under these names.
    SUBLAYERS = {
        "self_attention_norm": ("attention_norm",) * 2,
        "self_attention": ("attention",) * 2,
        "feedforward_norm": ("feedforward_norm",) * 2,
        "feedforward": ("feedforward",) * 2,
        "self_attention_dropout": ("attention_dropout",) * 2,
        "feedforward_dropout": ("feedforward_dropout",) * 2,
    }

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
        validation.check_positive_int("head_dim", head_dim, allow_none=True)
        validation.check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
        super().__init__(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            activation="silu",
            normalize_first=True,
            layer_norm_epsilon=layer_norm_epsilon,
            cross_attention=False,
            key_dim=head_dim,
            kernel_initializer=kernel_initializer,
            norm="rms",
            feedforward="gated",
            use_bias=False,
            positions="rotary",
            num_key_value_heads=num_key_value_heads,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            sliding_window=sliding_window,
            attention_bias=attention_bias,
            **kwargs,
        )
        self.head_dim = head_dim

    def build(self, inputs_shape):
        super().build(inputs_shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        training=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
    ):
        return super().call(
            inputs,
            padding_mask=padding_mask,
            training=training,
            self_attention_cache=self_attention_cache,
            self_attention_cache_update_index=self_attention_cache_update_index,
        )

    @property
    def self_attention_layer(self):
        """The attention, by the name decoding's `empty_caches` asks for."""
        return self.attention

    def get_config(self):
        config = keras.layers.Layer.get_config(self)
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
