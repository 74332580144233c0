"""The matrix products our layers compute: `product`, which sums a
half-precision product in float32 on every CPU, and `in_place`, which keeps
an int8 kernel's cast inside its product under XLA (see
`kt.layers.quantization`)."""

import keras
from keras import ops

HALF = ("bfloat16", "float16")


def product(x, w, equation=None):
    """`x @ w` (`ops.einsum(equation, x, w)` with an equation), in `x`'s
    dtype. In bfloat16 or float16 the inputs are cast to float32, the
    products summed there and the result rounded once, as torch computes
    its products on every CPU (and oneDNN on a CPU with AVX-512 BF16).
    TensorFlow's Eigen kernels, which a CPU without it runs, sum a
    half-precision product in half precision: a 512-term bfloat16 product
    then errs by 2.7 where one rounding errs by 0.125. (XLA sums a
    half-precision product in float32 itself.)

    Example:
        >>> import numpy as np
        >>> import keras
        >>> from keras import ops
        >>> from keras_transformer.layers.products import product
        >>> x = ops.cast(np.full((1, 512), 1 + 2**-7), "bfloat16")
        >>> y = product(x, ops.ones((512, 1), "bfloat16"))
        >>> dtype = keras.backend.standardize_dtype(y.dtype)
        >>> dtype, float(ops.cast(y, "float32")[0, 0])
        ('bfloat16', 516.0)
    """
    dtype = keras.backend.standardize_dtype(x.dtype)
    if dtype in HALF:
        x, w = ops.cast(x, "float32"), ops.cast(w, "float32")
    y = ops.matmul(x, w) if equation is None else ops.einsum(equation, x, w)
    return ops.cast(y, dtype) if dtype in HALF else y


def in_place(values, x):
    """int8 `values` and the input `x` of their product, unchanged: `values
    + 0` and `x / 1`, the zero and the one computed from `x` (XLA cannot
    fold them away).

    In a compiled decoding loop the weights are loop invariants, so XLA
    would hoist `cast(values)` out of the loop and carry a float32 copy
    of every kernel, four times the bytes read at each step. Tied to the
    step's input, the cast stays in the product, which reads the int8
    bytes (`kernel_matrix`'s transposed layout).

    XLA on the CPU computes such a matrix-vector product as one fused
    loop, and it would also fuse the work that makes `x` (a layer norm, a
    GELU) into it, redoing that work for every output row. A division is
    never fused into a consumer that reads its elements many times, so
    `x / 1` makes XLA compute `x` once."""
    nan = ops.isnan(ops.sum(x[:1, :1]))
    zero = ops.minimum(ops.cast(nan, "int8"), ops.zeros((), "int8"))
    return values + zero, x / (1 - ops.cast(zero, x.dtype))


@keras.saving.register_keras_serializable(package="keras_transformer")
class Conv1D(keras.layers.Conv1D):
    """Keras' `Conv1D` whose convolution, in bfloat16 or float16, sums in
    float32, adds its bias (and applies its activation) there and rounds
    once (see `product`), as torch's does; Whisper's stem. The same
    weights, config and files as Keras'.

    Example:
        >>> import numpy as np
        >>> from keras_transformer.layers.products import Conv1D
        >>> layer = Conv1D(2, 3, padding="same")
        >>> tuple(layer(np.ones((1, 5, 4), "float32")).shape)
        (1, 5, 2)
    """

    def call(self, inputs):
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if dtype not in HALF:
            return super().call(inputs)
        padding = self.padding
        if padding == "causal":
            left = (self.kernel_size[0] - 1) * self.dilation_rate[0]
            inputs = ops.pad(inputs, [[0, 0], [left, 0], [0, 0]])
            padding = "valid"
        outputs = ops.conv(
            ops.cast(inputs, "float32"),
            ops.cast(self.kernel, "float32"),
            strides=list(self.strides),
            padding=padding,
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
        )
        if self.use_bias:
            shape = (1, 1, -1) if self.data_format == "channels_last" else (1, -1, 1)
            outputs = outputs + ops.reshape(ops.cast(self.bias, "float32"), shape)
        return activate(self.activation, outputs, dtype)


def activate(activation, x, dtype=None):
    """`activation(x)` computed in float32 and rounded once to `dtype`
    (`x`'s by default), as torch computes GELU or SiLU of a half-precision
    tensor; TensorFlow's ops would round after each of their steps."""
    dtype = dtype or keras.backend.standardize_dtype(x.dtype)
    if activation is None or activation is keras.activations.linear:
        return ops.cast(x, dtype)
    if dtype not in HALF:
        return activation(x)
    return ops.cast(activation(ops.cast(x, "float32")), dtype)
