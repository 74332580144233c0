"""Weights read as matrices, whatever `model.quantize` made of them.

Our attention layers multiply by their `EinsumDense` sublayers' kernels
directly (several projections in one product), and tied output heads by the
token `Embedding`'s table. After Keras' `quantize("int8")` those variables
hold int8 values and a scale per output column (per row of an embedding
table): the float weight is `values / scale`. These helpers give a product
with the right numbers in both cases: the int8 values are cast in the
product and the scale is applied to its output, which is the same as
multiplying by the dequantized matrix.

`SUPPORTED_MODES` are the quantization modes this holds for; a model
refuses the others (`kt.models`' `quantize`).
"""

import keras
from keras import ops

SUPPORTED_MODES = ("int8",)


def check_mode(layer):
    """The layer's quantization mode (None: float), or a ValueError."""
    mode = getattr(layer, "quantization_mode", None)
    if mode is not None and mode not in SUPPORTED_MODES:
        raise ValueError(
            f"Layer {layer.name!r} is quantized with mode {mode!r}; "
            f"supported: {SUPPORTED_MODES}. Received: mode={mode!r}"
        )
    return mode


def kernel_matrix(layer, rows):
    """`(values (rows, N), scale (N,) or None, lora)`: the kernel of an
    `EinsumDense` or `Dense` as a matrix, the weight being `values / scale`
    (`values` itself when `scale` is None), plus a LoRA update when the
    layer has one: `lora` is `(A (rows, r), B (r, N), alpha / r)` (a
    `kt.layers.lora.Projection`'s; None otherwise), left out of `values`."""
    lora = getattr(layer, "lora_factors", lambda: None)()
    if check_mode(layer) is None:
        kernel = layer.kernel if lora is None else layer._kernel
        return ops.reshape(kernel, (rows, -1)), None, lora
    values = ops.reshape(layer._kernel, (rows, -1))
    return values, ops.reshape(layer.kernel_scale, (-1,)), lora


def matmul(x, matrices):
    """`x` `(N, rows)` times the matrices `[(values, scale, lora), ...]`
    (from `kernel_matrix`) side by side, in one product, in `x`'s dtype.

    A LoRA update is computed beside the frozen kernel, `(x @ A) @ B *
    alpha / r`, never as `W + A @ B`: no kernel-sized copy is made in the
    forward pass, nor a kernel-sized gradient in the backward pass."""
    values = [v for v, _, _ in matrices]
    kernel = values[0] if len(values) == 1 else ops.concatenate(values, axis=1)
    y = ops.matmul(x, ops.cast(kernel, x.dtype))
    scales = [s for _, s, _ in matrices]
    if scales[0] is not None:
        scale = scales[0] if len(scales) == 1 else ops.concatenate(scales)
        y = y / ops.cast(scale, x.dtype)
    if all(lora is None for _, _, lora in matrices):
        return y
    updates = []
    for values, _, lora in matrices:
        if lora is None:
            updates.append(ops.zeros((ops.shape(x)[0], values.shape[-1]), x.dtype))
        else:
            a, b, factor = lora
            low = ops.matmul(x, ops.cast(a, x.dtype))
            updates.append(ops.matmul(low, ops.cast(b, x.dtype)) * factor)
    return y + (updates[0] if len(updates) == 1 else ops.concatenate(updates, axis=1))


def embedding_logits(x, embedding):
    """`x` `(..., E)` times the transposed table `(V, E)` of a Keras
    `Embedding`, in `x`'s dtype: `(..., V)` (a tied output head)."""
    table = embedding.embeddings
    y = ops.matmul(x, ops.transpose(ops.cast(table, x.dtype)))
    if check_mode(embedding) is None:
        return y
    return y / ops.cast(embedding.embeddings_scale, x.dtype)


class TiedEmbedding(keras.layers.Embedding):
    """A Keras `Embedding` that also computes a tied output head:
    `layer(x, reverse=True)` is `x` `(..., E)` times the transposed table,
    `(..., V)`, with the int8 scales applied once quantized. Being a layer
    call, the head reads the table's current variable in a functional
    model (an op on the variable in the model's own graph would keep the
    float variable that `quantize` replaces). Its weights and file format
    are `Embedding`'s."""

    def call(self, inputs, reverse=False):
        if reverse:
            return embedding_logits(inputs, self)
        return super().call(inputs)

    def quantized_call(self, inputs, reverse=False, **kwargs):
        if reverse:
            return embedding_logits(inputs, self)
        return super().quantized_call(inputs, **kwargs)

    def compute_output_spec(self, inputs, reverse=False):
        if reverse:
            shape = (*inputs.shape[:-1], self.input_dim)
            return keras.KerasTensor(shape, dtype=self.compute_dtype)
        return super().compute_output_spec(inputs)

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras skips subclasses of `Embedding`; this one computes the same.
        super().quantize(mode, type_check=False, config=config)
