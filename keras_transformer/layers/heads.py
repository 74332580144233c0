"""What sits on top of the last hidden states of a language model: a learned
bias on its logits, and the rule that padding is never a prediction.

Shape legend: V vocabulary size.
"""

import keras
from keras import ops

from keras_transformer.layers.masking import MASKED_LOGIT

# float16 would round -1e9 to -inf, and -inf times a zero label weight is NaN.
FLOAT16_MASKED_LOGIT = -6e4


@keras.saving.register_keras_serializable(package="keras_transformer")
class LogitsBias(keras.layers.Layer):
    """Adds a learned bias `(V,)` to logits `(..., V)`, in float32.

    What Hugging Face's Marian and BART call `final_logits_bias`; zeros at
    first. The bias is a float32 variable and the sum is float32 whatever the
    layer's dtype policy.

    Call arguments:
        inputs: logits `(..., V)` of any float dtype.

    Returns:
        float32 logits `(..., V)`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> bias = kt.layers.LogitsBias()
        >>> tuple(bias(np.zeros((2, 3, 5), "float32")).shape)
        (2, 3, 5)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # the padding mask passes through

    def build(self, inputs_shape):
        self.bias = self.add_weight(
            name="bias", shape=(inputs_shape[-1],), initializer="zeros", dtype="float32"
        )
        self.built = True

    def call(self, inputs):
        return ops.cast(inputs, "float32") + self.bias

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


def exclude_padding_logit(logits):
    """`logits` `(..., V)` with the padding id's (0) set to a large negative.

    For models whose row 0 is padding, not a real token (GPT-2, the
    encoder-decoder; their checkpoints' ids are shifted by one): the softmax
    over their logits is then the checkpoint's own softmax over its real
    tokens, so the cross-entropy equals the reference library's and
    training never moves the padding row through the output projection.
    Finite (-1e9; -6e4 in float16, whose range ends at 65504), so that sums
    and products over the vocabulary, such as label smoothing's, stay
    finite. The real tokens' logits are unchanged.
    """
    is_padding = ops.equal(ops.arange(ops.shape(logits)[-1]), 0)  # (V,)
    value = FLOAT16_MASKED_LOGIT if logits.dtype == "float16" else MASKED_LOGIT
    return ops.where(is_padding, ops.cast(value, logits.dtype), logits)
