"""The gated feed-forward network of Llama, Mistral and Qwen2 (SwiGLU).

Shape legend: B batch, T sequence length, E hidden size, F intermediate size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers import products, quantization


@keras.saving.register_keras_serializable(package="keras_transformer")
class GatedFeedForward(keras.layers.Layer):
    """`down(activation(gate(x)) * up(x))`: a gated linear unit feed-forward.

    With the default SiLU activation this is SwiGLU, the feed-forward of
    Llama, Mistral and Qwen2 (transformers' `LlamaMLP`). The output is as wide
    as the input.

    Args:
        intermediate_dim: width F of `gate` and `up`.
        activation: applied to `gate`'s output (`"silu"`).
        use_bias: whether the three projections have biases.
        kernel_initializer: initializer of the kernels.
        bias_initializer: initializer of the biases.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(B, T, E)`.

    Returns:
        `(B, T, E)`.

    Layers (attributes): `gate` and `up` (`kt.layers.quantization.Dense`,
    a Keras `Dense`, E -> F), `down` (F -> E).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> ffn = kt.layers.GatedFeedForward(intermediate_dim=16)
        >>> tuple(ffn(np.ones((2, 3, 8), "float32")).shape)
        (2, 3, 8)

    References:
        Shazeer, "GLU Variants Improve Transformer", 2020.
    """

    def __init__(
        self,
        intermediate_dim,
        activation="silu",
        use_bias=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("intermediate_dim", intermediate_dim)
        validation.check_bool("use_bias", use_bias)
        self.intermediate_dim = intermediate_dim
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        validation.check_rank("inputs", inputs_shape, 3)
        hidden_dim = inputs_shape[-1]
        self.gate = self._dense("gate", self.intermediate_dim, inputs_shape)
        self.up = self._dense("up", self.intermediate_dim, inputs_shape)
        self.down = self._dense(
            "down", hidden_dim, (*inputs_shape[:-1], self.intermediate_dim)
        )
        self.built = True

    def call(self, inputs):
        gate = products.activate(self.activation, self.gate(inputs))
        return self.down(gate * self.up(inputs))

    def _dense(self, name, units, inputs_shape):
        layer = quantization.Dense(
            units,
            use_bias=self.use_bias,
            # Fresh initializer objects per sublayer, so no two share a seed.
            kernel_initializer=keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
            bias_initializer=keras.initializers.get(
                keras.initializers.serialize(self.bias_initializer)
            ),
            dtype=self.dtype_policy,
            name=name,
        )
        layer.build(inputs_shape)
        return layer

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": keras.activations.serialize(self.activation),
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config

    def compute_output_shape(self, inputs_shape):
        return inputs_shape
