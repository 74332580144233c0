"""Activations the layers take by name beyond Keras' own."""

import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
def gelu_approximate(x):
    """GELU with the tanh approximation, as GPT-2 computes it.

    `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`: Hugging Face's
    `gelu_new`, and `keras.activations.gelu(x, approximate=True)`. Keras'
    `"gelu"` is the exact `x Φ(x)` that BERT uses.

    Examples:
        >>> import keras_transformer as kt
        >>> round(float(kt.layers.gelu_approximate(1.0)), 6)
        0.841192
    """
    return keras.activations.gelu(x, approximate=True)
