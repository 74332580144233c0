"""The Transformer encoder block.

Shape legend: B batch, T sequence length, E hidden size.
"""

import keras

from keras_transformer.layers import validation
from keras_transformer.layers.block import TransformerBlockBase
from keras_transformer.layers.masking import keras_mask, merge_masks


def padding_attention_mask(padding_mask):
    """`(B, T)` padding -> `(B, T, T)`: real queries attend to real keys only.

    Padded queries get an all-False row (zero attention), so an explicit
    `padding_mask` and a Keras mask from `mask_zero` give identical numbers.
    """
    if padding_mask is None:
        return None
    padding_mask = keras.ops.cast(padding_mask, "bool")
    return keras.ops.logical_and(padding_mask[:, :, None], padding_mask[:, None, :])


def check_block_inputs(inputs, padding_mask=None, attention_mask=None, context=None):
    """Validates the ranks and mask shapes every block call receives."""
    validation.check_rank("inputs", inputs.shape, 3)
    batch, length = inputs.shape[0], inputs.shape[1]
    if padding_mask is not None:
        validation.check_mask_shape("padding_mask", padding_mask.shape, (batch, length))
    if attention_mask is not None:
        key_length = length if context is None else context.shape[1]
        validation.check_mask_shape(
            "attention_mask", attention_mask.shape, (batch, length, key_length)
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderBlock(TransformerBlockBase):
    """Self-attention and feed-forward sub-blocks, each with a residual and LayerNorm.

    Post-LN by default, as in the original paper:
    `x = LN(x + Dropout(MHA(x)))`, then `x = LN(x + Dropout(FFN(x)))` with
    `FFN(x) = Dense(hidden)(Dense(intermediate_dim, activation)(x))`.
    `normalize_first=True` gives pre-LN: `x = x + Dropout(MHA(LN(x)))`, etc.
    The hidden size is taken from the inputs.

    Args:
        num_heads: number of attention heads.
        intermediate_dim: width of the feed-forward hidden layer (`dff`).
        dropout: dropout rate after each sub-block and on attention weights.
        activation: feed-forward activation.
        normalize_first: pre-LN instead of post-LN.
        layer_norm_epsilon: LayerNorm epsilon.
        key_dim: per-head size; defaults to hidden size // `num_heads`.
        kernel_initializer: initializer of all kernels.
        bias_initializer: initializer of all biases.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(B, T, E)`.
        padding_mask: boolean `(B, T)`, True = real token. Defaults to the
            Keras mask of `inputs` (e.g. from `PositionalEmbedding`).
        attention_mask: boolean `(B, T, T)`, True = may attend; combined with
            the padding mask.
        training: whether dropout is active.

    Returns:
        `(B, T, E)`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> block = kt.layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=32)
        >>> x = np.random.rand(2, 5, 16).astype("float32")
        >>> tuple(block(x, padding_mask=np.array([[1] * 5, [1, 1, 1, 0, 0]])).shape)
        (2, 5, 16)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
    """

    def build(self, inputs_shape):
        validation.check_rank("inputs", inputs_shape, 3)
        (
            self.self_attention_layer,
            self.self_attention_layer_norm,
            self.self_attention_dropout,
        ) = self._build_attention("self_attention", inputs_shape)
        self._build_feedforward(inputs_shape)
        self.built = True

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None):
        check_block_inputs(inputs, padding_mask, attention_mask)
        if padding_mask is None:
            padding_mask = keras_mask(inputs)
        mask = merge_masks(padding_attention_mask(padding_mask), attention_mask)

        def self_attention(h):
            return self.self_attention_layer(h, attention_mask=mask, training=training)

        x = self._residual(
            inputs,
            self_attention,
            self.self_attention_layer_norm,
            self.self_attention_dropout,
            training,
        )
        return self._feedforward(x, training)
