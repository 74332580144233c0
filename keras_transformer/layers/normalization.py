"""RMS normalization as transformers' Llama, Mistral and Qwen2 compute it,
and as Gemma computes it (`GemmaRMSNormalization`).

Shape legend: B batch, T sequence length, E hidden size.
"""

import keras
from keras import ops

from keras_transformer import _validation as validation


@keras.saving.register_keras_serializable(package="keras_transformer")
class RMSNormalization(keras.layers.Layer):
    """Root-mean-square normalization with a learned `scale` `(E,)`.

    `scale * cast(x / sqrt(mean(x²) + epsilon))`: the statistics and the
    division run in float32, the result is cast back to the input's dtype,
    and only then multiplied by `scale` (in that dtype), exactly as
    transformers' `LlamaRMSNorm`. `keras.layers.RMSNormalization` multiplies
    by the scale before casting back, which rounds differently in bfloat16
    (one bfloat16 step on about a fifth of the values of the
    `tests/layers/test_normalization.py` case), so this layer is our own.

    Args:
        epsilon: added to the mean square.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(..., E)`.

    Returns:
        `(..., E)`, in the input's dtype.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> norm = kt.layers.RMSNormalization(epsilon=1e-6)
        >>> np.round(norm(np.array([[3.0, 4.0]], "float32")), 4)
        array([[0.8485, 1.1314]], dtype=float32)

    References:
        Zhang and Sennrich, "Root Mean Square Layer Normalization", 2019.
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        validation.check_positive_number("epsilon", epsilon)
        self.epsilon = epsilon
        self.supports_masking = True

    def build(self, inputs_shape):
        self.scale = self.add_weight(
            name="scale", shape=(inputs_shape[-1],), initializer="ones"
        )
        self.built = True

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        x = x * ops.rsqrt(
            ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon
        )
        return ops.cast(self.scale, inputs.dtype) * ops.cast(x, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config["epsilon"] = self.epsilon
        return config

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class GemmaRMSNormalization(RMSNormalization):
    """Gemma's RMS normalization: `x / sqrt(mean(x²) + epsilon) * (1 +
    scale)`, all in float32, cast back to the input's dtype at the end.

    The scale is stored zero-centred (it starts at zeros and the layer
    multiplies by `1 + scale`), as Gemma checkpoints store it, and the
    product is taken in float32 before the cast, as transformers'
    `Gemma3RMSNorm` computes it (`RMSNormalization`, Llama's, casts first
    and multiplies in the input's dtype: a different rounding in
    bfloat16).

    Args:
        epsilon: added to the mean square.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(..., E)`.

    Returns:
        `(..., E)`, in the input's dtype.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> norm = kt.layers.GemmaRMSNormalization(epsilon=1e-6)
        >>> np.round(norm(np.array([[3.0, 4.0]], "float32")), 4)  # scale 0
        array([[0.8485, 1.1314]], dtype=float32)

    References:
        Gemma Team, "Gemma 3 Technical Report", 2025.
    """

    def build(self, inputs_shape):
        self.scale = self.add_weight(
            name="scale", shape=(inputs_shape[-1],), initializer="zeros"
        )
        self.built = True

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        x = x * ops.rsqrt(
            ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon
        )
        return ops.cast(x * (1.0 + ops.cast(self.scale, "float32")), inputs.dtype)
