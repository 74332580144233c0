"""The Transformer encoder block.

Shape legend: B batch, T sequence length, E hidden size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers.block import (
    TransformerBlockBase,
    check_block_inputs,
    padding_attention_mask,
)
from keras_transformer.layers.masking import keras_mask, merge_masks


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
        **kwargs: base `keras.layers.Layer` arguments, and the options of
            `kt.layers.TransformerDecoderBlock` that are not about positions
            or cross-attention (`norm`, `feedforward`, `use_bias`, `scale`,
            `key_bias`).

    Call arguments:
        inputs: `(B, T, E)`.
        padding_mask: boolean `(B, T)`, True = real token. Defaults to the
            Keras mask of `inputs` (e.g. from `PositionalEmbedding`).
        attention_mask: boolean `(B, T, T)`, True = may attend; combined with
            the padding mask.
        training: whether dropout is active.
        position_bias: optional float `(B, H, T, T)` (any axis may be 1)
            added to the self-attention's scores, such as T5's relative
            positions (`kt.layers.RelativePositionBias`).

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
        self._build_sublayers(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        position_bias=None,
    ):
        check_block_inputs(inputs, padding_mask, attention_mask)
        if padding_mask is None:
            padding_mask = keras_mask(inputs)
        mask = merge_masks(padding_attention_mask(padding_mask), attention_mask)
        norm = self.self_attention_layer_norm
        h = self._sublayer_input(inputs, norm)
        h = self.self_attention_layer(
            h, attention_mask=mask, training=training, position_bias=position_bias
        )
        x = self._residual(inputs, h, norm, self.self_attention_dropout, training)
        return self._feedforward(x, training)
