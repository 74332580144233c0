"""What encoder and decoder blocks share: arguments, input checks, the
padding mask, the residual wiring (post-LN or pre-LN) and the position-wise
feed-forward network.

Shape legend: B batch, T sequence length, E hidden size, F intermediate size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers import quantization
from keras_transformer.layers.attention import MultiHeadAttention


def padding_attention_mask(padding_mask):
    """`(B, T)` padding -> `(B, T, T)`: real queries attend to real keys only.

    Padded queries get an all-False row (zero attention), so an explicit
    `padding_mask` and a Keras mask from `mask_zero` give identical numbers.
    """
    if padding_mask is None:
        return None
    padding_mask = keras.ops.cast(padding_mask, "bool")
    return keras.ops.logical_and(padding_mask[:, :, None], padding_mask[:, None, :])


def check_block_inputs(inputs, padding_mask=None, attention_mask=None):
    """Validates the ranks and mask shapes every block call receives."""
    validation.check_rank("inputs", inputs.shape, 3)
    batch, length = inputs.shape[0], inputs.shape[1]
    if padding_mask is not None:
        validation.check_mask_shape("padding_mask", padding_mask.shape, (batch, length))
    if attention_mask is not None:
        validation.check_mask_shape(
            "attention_mask", attention_mask.shape, (batch, length, length)
        )


class TransformerBlockBase(keras.layers.Layer):
    """Base of `TransformerEncoderBlock` and `TransformerDecoderBlock`.

    Not a public layer: it holds the arguments both blocks take, builds
    their named sublayers and wires one residual sub-block `f` as

    - post-LN (`normalize_first=False`, the paper): `norm(x + drop(f(x)))`
    - pre-LN (`normalize_first=True`, GPT-2): `x + drop(f(norm(x)))`

    with `_sublayer_input(x, norm)` before `f` and `_residual(x, f(...),
    norm, dropout)` after it.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        activation="relu",
        normalize_first=False,
        layer_norm_epsilon=1e-6,
        key_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("num_heads", num_heads)
        validation.check_positive_int("intermediate_dim", intermediate_dim)
        validation.check_positive_int("key_dim", key_dim, allow_none=True)
        validation.check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.key_dim = key_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _head_size(self, hidden_dim):
        if self.key_dim is not None:
            return self.key_dim
        if hidden_dim % self.num_heads:
            raise ValueError(
                "The hidden size must be divisible by `num_heads` when `key_dim` is "
                f"not given. Received: hidden size {hidden_dim}, "
                f"num_heads={self.num_heads}"
            )
        return hidden_dim // self.num_heads

    def _initializers(self):
        # Fresh initializer objects per sublayer, so no two share a seed.
        return {
            "kernel_initializer": keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
            "bias_initializer": keras.initializers.get(
                keras.initializers.serialize(self.bias_initializer)
            ),
        }

    def _build_attention(self, name, query_shape, value_shape=None):
        hidden_dim = query_shape[-1]
        attention = MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self._head_size(hidden_dim),
            dropout=self.dropout,
            output_dim=hidden_dim,
            dtype=self.dtype_policy,
            name=name,
            **self._initializers(),
        )
        attention.build(query_shape, value_shape)
        norm = self._layer_norm(f"{name}_layer_norm", query_shape)
        dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name=f"{name}_dropout"
        )
        return attention, norm, dropout

    def _build_feedforward(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        self.feedforward_intermediate_dense = quantization.Dense(
            self.intermediate_dim,
            activation=self.activation,
            dtype=self.dtype_policy,
            name="feedforward_intermediate_dense",
            **self._initializers(),
        )
        self.feedforward_intermediate_dense.build(inputs_shape)
        self.feedforward_output_dense = quantization.Dense(
            hidden_dim,
            dtype=self.dtype_policy,
            name="feedforward_output_dense",
            **self._initializers(),
        )
        self.feedforward_output_dense.build((*inputs_shape[:-1], self.intermediate_dim))
        self.feedforward_layer_norm = self._layer_norm(
            "feedforward_layer_norm", inputs_shape
        )
        self.feedforward_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="feedforward_dropout"
        )

    def _layer_norm(self, name, inputs_shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(inputs_shape)
        return norm

    def _sublayer_input(self, x, norm):
        """What a sub-block reads: `norm(x)` in pre-LN, `x` in post-LN."""
        return norm(x) if self.normalize_first else x

    def _residual(self, x, h, norm, dropout, training):
        """Adds a sub-block's output `h` `(B, T, E)` back onto its input `x`."""
        if self.normalize_first:
            return x + dropout(h, training=training)
        return norm(x + dropout(h, training=training))

    def _feedforward(self, x, training):
        norm = self.feedforward_layer_norm
        h = self._sublayer_input(x, norm)
        h = self.feedforward_output_dense(self.feedforward_intermediate_dense(h))
        return self._residual(x, h, norm, self.feedforward_dropout, training)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "normalize_first": self.normalize_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "key_dim": self.key_dim,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape
