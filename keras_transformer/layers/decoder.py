"""The Transformer decoder block, composed from options: its normalization
(LayerNorm or RMS, before or after each sub-block), its feed-forward
(dense or gated, any activation), cross-attention (on or off) and its
positions (none, rotary, or an additive bias). The seq2seq and GPT-2 blocks
and `RotaryDecoderBlock` (Llama's) are configurations of it.

Shape legend: B batch, T target length, S context (encoder) length,
E hidden size, H heads, D head size.
"""

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers.block import (
    TransformerBlockBase,
    check_block_inputs,
    padding_attention_mask,
)
from keras_transformer.layers.masking import keras_mask, merge_masks
from keras_transformer.layers.rotary_attention import (
    RotaryAttention,
    check_rotary_attention_arguments,
)

POSITIONS = (None, "rotary", "bias")


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderBlock(TransformerBlockBase):
    """Causal self-attention, optional cross-attention, then feed-forward.

    Each sub-block has a residual connection and a norm (post-LN by
    default, pre-LN with `normalize_first=True`). With `cross_attention=True`
    the second sub-block attends to `context` (the encoder output); with
    `cross_attention=False` this is a GPT-2 block. `norm="rms"`,
    `feedforward="gated"`, `positions="rotary"` make Llama's block
    (`kt.layers.RotaryDecoderBlock` is that configuration); `positions=
    "bias"` with `scale=1.0` and `use_bias=False` is T5's, its relative
    bias given to `call` as `position_bias`.

    For generation, `call` takes a fixed-shape self-attention cache
    `(B, 2, S_max, H, D)` written at `self_attention_cache_update_index`, and a
    precomputed cross-attention cache (see `compute_cross_attention_cache`),
    so the same layer objects serve both the full and the cached pass.

    Args:
        num_heads: number of attention heads.
        intermediate_dim: width of the feed-forward hidden layer (`dff`).
        dropout: dropout rate after each sub-block and on attention weights.
        activation: feed-forward activation.
        normalize_first: pre-LN instead of post-LN.
        layer_norm_epsilon: LayerNorm epsilon.
        cross_attention: whether the block attends to `context`.
        key_dim: per-head size; defaults to hidden size // `num_heads`.
        kernel_initializer: initializer of all kernels.
        bias_initializer: initializer of all biases.
        norm: `"layer"` (LayerNorm) or `"rms"` (`kt.layers.RMSNormalization`).
        feedforward: `"dense"` (two dense layers, `activation` between) or
            `"gated"` (`kt.layers.GatedFeedForward`, `activation` on the gate).
        use_bias: biases on the projections and the feed-forward layers
            (a rotary self-attention's are `attention_bias`).
        scale: the attention scores' scale; None is 1/sqrt(key_dim).
        positions: None (positions come with the embeddings), `"rotary"`
            (a `kt.layers.RotaryAttention` self-attention, with the options
            below) or `"bias"` (an additive `position_bias` given to `call`).
        num_key_value_heads: key/value heads of the self-attention (grouped
            query attention); None = `num_heads`.
        rope_theta: the rotary base (`positions="rotary"`; see
            `kt.layers.RotaryAttention` for these four).
        rope_scaling: None or a Hugging Face rope scaling dict.
        sliding_window: None, or how many positions (itself included) a
            query attends to.
        attention_bias: the rotary self-attention's projection biases
            (False, True or `"qkv"`).
        **kwargs: base `keras.layers.Layer` arguments, and `key_bias`: with
            `use_bias`, whether the attentions' key projections have biases
            (Whisper's have none).

    Call arguments:
        inputs: `(B, T, E)` target-side hidden states.
        context: `(B, S, E)` encoder output; required when
            `cross_attention=True` unless `cross_attention_cache` is given.
        padding_mask: boolean `(B, T)`; defaults to the Keras mask of `inputs`.
        context_padding_mask: boolean `(B, S)`; defaults to the Keras mask of
            `context`.
        training: whether dropout is active.
        self_attention_cache: `(B, 2, S_max, H, D)` keys/values so far.
        self_attention_cache_update_index: position of `inputs[:, 0]`.
        cross_attention_cache: `(B, 2, S, H, D)` from
            `compute_cross_attention_cache(context)`.
        position_bias: float `(B, H, T, S)` added to the self-attention's
            scores (`positions="bias"`).

    Returns:
        `(B, T, E)`; with `self_attention_cache`, the tuple
        `(outputs, self_attention_cache)` with this call's keys and values
        written in. A `cross_attention_cache` is only read, never returned.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> block = kt.layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=32)
        >>> x = np.random.rand(2, 4, 16).astype("float32")
        >>> context = np.random.rand(2, 6, 16).astype("float32")
        >>> tuple(block(x, context).shape)
        (2, 4, 16)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
        Radford et al., "Language Models are Unsupervised Multitask Learners",
        2019.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        activation="relu",
        normalize_first=False,
        layer_norm_epsilon=1e-6,
        cross_attention=True,
        key_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        *,
        norm="layer",
        feedforward="dense",
        use_bias=True,
        scale=None,
        positions=None,
        num_key_value_heads=None,
        rope_theta=10000.0,
        rope_scaling=None,
        sliding_window=None,
        attention_bias=False,
        **kwargs,
    ):
        super().__init__(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            activation=activation,
            normalize_first=normalize_first,
            layer_norm_epsilon=layer_norm_epsilon,
            key_dim=key_dim,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            norm=norm,
            feedforward=feedforward,
            use_bias=use_bias,
            scale=scale,
            **kwargs,
        )
        validation.check_choice("positions", positions, POSITIONS)
        rotary = dict(
            rope_theta=(rope_theta, 10000.0),
            rope_scaling=(rope_scaling, None),
            sliding_window=(sliding_window, None),
            attention_bias=(attention_bias, False),
        )
        given = [k for k, (value, default) in rotary.items() if value != default]
        if given and positions != "rotary":
            raise ValueError(
                f"{given} are options of a rotary self-attention; set "
                f'positions="rotary". Received: positions={positions!r}'
            )
        validation.check_positive_int(
            "num_key_value_heads", num_key_value_heads, allow_none=True
        )
        if positions == "rotary":
            check_rotary_attention_arguments(
                num_heads,
                num_key_value_heads,
                rope_theta,
                rope_scaling,
                sliding_window,
                attention_bias,
            )
        self.cross_attention = cross_attention
        self.positions = positions
        self.num_key_value_heads = num_key_value_heads
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.sliding_window = sliding_window
        self.attention_bias = attention_bias

    def build(self, inputs_shape, context_shape=None):
        validation.check_rank("inputs", inputs_shape, 3)
        attention = None
        if self.positions == "rotary":
            hidden_dim = inputs_shape[-1]
            attention = RotaryAttention(
                self.num_heads,
                self._head_size(hidden_dim),
                num_key_value_heads=self.num_key_value_heads,
                rope_theta=self.rope_theta,
                rope_scaling=self.rope_scaling,
                sliding_window=self.sliding_window,
                attention_bias=self.attention_bias,
                dropout=self.dropout,
                output_dim=hidden_dim,
                scale=self.scale,
                kernel_initializer=self._initializers()["kernel_initializer"],
                dtype=self.dtype_policy,
                name=self.SUBLAYERS["self_attention"][1],
            )
        if self.cross_attention:
            context_shape = inputs_shape if context_shape is None else context_shape
            validation.check_rank("context", context_shape, 3)
        self._build_sublayers(
            inputs_shape,
            context_shape if self.cross_attention else None,
            self_attention=attention,
            num_key_value_heads=self.num_key_value_heads,
        )
        self.built = True

    def call(
        self,
        inputs,
        context=None,
        padding_mask=None,
        context_padding_mask=None,
        training=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        position_bias=None,
    ):
        use_cache = self_attention_cache is not None
        check_block_inputs(inputs, padding_mask)
        if self.cross_attention and context is None and cross_attention_cache is None:
            raise ValueError(
                "`context` is required when `cross_attention=True`. "
                "Received: context=None"
            )
        if position_bias is not None and self.positions != "bias":
            raise ValueError(
                '`position_bias` is taken by a block with positions="bias". '
                f"Received: a position_bias with positions={self.positions!r}"
            )
        if padding_mask is None:
            padding_mask = keras_mask(inputs)

        norm = self.sublayer("self_attention_norm")
        h = self._sublayer_input(inputs, norm)
        if use_cache:
            h, self_attention_cache = self.sublayer("self_attention")(
                h,
                use_causal_mask=True,
                training=training,
                cache=self_attention_cache,
                cache_update_index=(
                    0
                    if self_attention_cache_update_index is None
                    else self_attention_cache_update_index
                ),
                position_bias=position_bias,
            )
        else:
            h = self.sublayer("self_attention")(
                h,
                attention_mask=padding_attention_mask(padding_mask),
                use_causal_mask=True,
                training=training,
                position_bias=position_bias,
            )
        dropout = self.sublayer("self_attention_dropout")
        x = self._residual(inputs, h, norm, dropout, training)

        if self.cross_attention:
            norm = self.cross_attention_layer_norm
            h = self._sublayer_input(x, norm)
            h = self._cross_attend(
                h,
                context,
                padding_mask,
                context_padding_mask,
                cross_attention_cache,
                training,
            )
            x = self._residual(x, h, norm, self.cross_attention_dropout, training)

        x = self._feedforward(x, training)
        return (x, self_attention_cache) if use_cache else x

    def compute_cross_attention_cache(self, context):
        """Projects the encoder output once into the `(B, 2, S, H, D)` cache."""
        return self.cross_attention_layer.compute_cache(context)

    def _cross_attend(
        self, h, context, padding_mask, context_padding_mask, cache, training
    ):
        if context_padding_mask is None and context is not None:
            context_padding_mask = keras_mask(context)
        key_mask = (
            None
            if context_padding_mask is None
            else ops.expand_dims(context_padding_mask, 1)  # (B, 1, S)
        )
        if cache is not None:
            h, _ = self.cross_attention_layer(
                h, attention_mask=key_mask, cache=cache, training=training
            )
            return h
        query_mask = None if padding_mask is None else ops.expand_dims(padding_mask, -1)
        return self.cross_attention_layer(
            h,
            context,
            attention_mask=merge_masks(query_mask, key_mask),
            training=training,
        )

    def get_config(self):
        config = super().get_config()
        config["cross_attention"] = self.cross_attention
        if self.positions is not None:  # written only when set: configs
            # written before have no `positions`
            config["positions"] = self.positions
        rotary = dict(
            num_key_value_heads=(self.num_key_value_heads, None),
            rope_theta=(self.rope_theta, 10000.0),
            rope_scaling=(self.rope_scaling, None),
            sliding_window=(self.sliding_window, None),
            attention_bias=(self.attention_bias, False),
        )
        config.update({k: v for k, (v, default) in rotary.items() if v != default})
        return config


# The name the design card uses.
DecoderBlock = TransformerDecoderBlock
