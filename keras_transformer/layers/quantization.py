"""Weights read as matrices, whatever `model.quantize` made of them.

Our attention layers multiply by their `EinsumDense` sublayers' kernels
directly (several projections in one product), and tied output heads by the
token `Embedding`'s table. After Keras' `quantize("int8")` those variables
hold int8 values and a scale per output column (per row of an embedding
table): the float weight is `values / scale`. These helpers give a product
with the right numbers in both cases: the int8 values are cast in the
product and the scale is applied to its output, which is the same as
multiplying by the dequantized matrix.

Our projections (`Dense` here, `kt.layers.lora.Projection`) keep an int8
kernel in memory as its transposed matrix, `(out, in)` (`Int8Matrix`):
each output is then a dot product over a contiguous row, which XLA
computes from the int8 bytes (the cast fused into the product) when one
token is decoded. In Keras' `(in, out)` layout XLA first writes a float32
copy of the whole kernel, four times the bytes, at every step. `.keras`
files keep Keras' layout: transposed back on saving, again on loading.

An int8 projection may also have a scale per block of `block_size` input
rows in each output column (`BlockConfig`, `kt.models`' `quantize(...,
block_size=128)`, the default): `kernel_scale` is then `(out, blocks)` and
the weight is `values / scale` of the value's block. One outlier weight
then coarsens its block, not its whole column. The product multiplies the
cast int8 values by their block's ratio to the column's smallest scale (at
most 1) and divides the dot product by that smallest scale; XLA fuses the
multiply into the product, so decoding still reads the int8 bytes (and the
scales, 1/32 of them at 128).

`SUPPORTED_MODES` are the quantization modes this holds for; a model
refuses the others (`kt.models`' `quantize`).
"""

import contextlib
import math
import threading
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from keras_transformer._compat import kernel_variable, replace_kernel_variable, unlocked
from keras_transformer.layers.int8_blocks import (  # noqa: F401 (re-exported)
    BlockConfig,
    block_scales,
    quantize_blocks,
)
from keras_transformer.layers.products import activate, in_place, product

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


class Matrix(NamedTuple):
    """A kernel as a matrix (`kernel_matrix`): the weight is `values /
    scale` (`values` itself when `scale` is None), `values` being `(rows,
    columns)`, or `(columns, rows)` when `transposed`; `scale` is
    `(columns,)`, or `(columns, blocks)` (transposed only) for a scale
    per block of `block_size` rows; `lora` is `(A (rows, r), B (r,
    columns), alpha / r)` or None, left out of `values`."""

    values: object
    scale: object
    lora: object
    transposed: bool = False
    block_size: object = None

    @property
    def columns(self):
        return self.values.shape[0 if self.transposed else -1]


def kernel_matrix(layer, rows):
    """The kernel of an `EinsumDense` or `Dense` as a `Matrix` of `rows`
    rows (the product of its contracted axes), with its int8 scale and its
    LoRA update (a `kt.layers.lora.Projection`'s, or a `Dense`'s here)."""
    lora = getattr(layer, "lora_factors", lambda: None)()
    if check_mode(layer) is None:
        kernel = layer.kernel if lora is None else kernel_variable(layer)
        return Matrix(ops.reshape(kernel, (rows, -1)), None, lora)
    kernel, block_size = kernel_variable(layer), getattr(layer, "int8_block_size", None)
    if block_size:
        return Matrix(kernel, layer.kernel_scale, lora, True, block_size)
    scale = ops.reshape(layer.kernel_scale, (-1,))
    if getattr(layer, "transposed_int8", False):
        return Matrix(kernel, scale, lora, transposed=True)
    return Matrix(ops.reshape(kernel, (rows, -1)), scale, lora)


def _product(x, matrix):
    """`x` `(N, rows)` times one `Matrix`'s weight (without LoRA)."""
    if matrix.transposed:  # a dot product per contiguous row
        values, x = in_place(matrix.values, x)
        weights = ops.cast(values, x.dtype)
        if len(matrix.scale.shape) == 1:
            y = product(x, weights, "nr,cr->nc")
            return y / ops.cast(matrix.scale, x.dtype)
        # A scale per block of rows: each column's smallest scale (its
        # scale per column) divides the product, as above, and each
        # block's ratio to it (<= 1, computed in float32) multiplies the
        # cast values, in the product's loop. (Without that division XLA
        # fuses the product with a bias added to it, and then writes the
        # float weights out first: 4x the bytes.)
        scale = ops.cast(matrix.scale, "float32")  # (columns, blocks)
        column = ops.min(scale, axis=1)
        ratios = block_scales(
            column[:, None] / scale, weights.shape[1], matrix.block_size
        )
        y = product(x, weights * ops.cast(ratios, x.dtype), "nr,cr->nc")
        return y / ops.cast(column, x.dtype)
    y = product(x, ops.cast(matrix.values, x.dtype))
    return y if matrix.scale is None else y / ops.cast(matrix.scale, x.dtype)


def matmul(x, matrices):
    """`x` `(N, rows)` times the `Matrix`es `matrices` (from
    `kernel_matrix`) side by side, in `x`'s dtype: one product over the
    kernels put side by side, or one product per kernel when an int8 one
    is transposed (so each is read in place).

    A LoRA update is computed beside the frozen kernel, `(x @ A) @ B *
    alpha / r`, never as `W + A @ B`: no kernel-sized copy is made in the
    forward pass, nor a kernel-sized gradient in the backward pass."""
    if len(matrices) == 1 or any(m.transposed for m in matrices):
        parts = [_product(x, m) for m in matrices]
        y = parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=1)
    else:
        kernel = ops.concatenate([m.values for m in matrices], axis=1)
        scales = [m.scale for m in matrices]
        scale = None if scales[0] is None else ops.concatenate(scales)
        y = _product(x, Matrix(kernel, scale, None))
    if all(m.lora is None for m in matrices):
        return y
    updates = []
    for matrix in matrices:
        if matrix.lora is None:
            updates.append(ops.zeros((ops.shape(x)[0], matrix.columns), x.dtype))
        else:
            a, b, factor = matrix.lora
            low = product(x, ops.cast(a, x.dtype))
            updates.append(product(low, ops.cast(b, x.dtype)) * factor)
    return y + (updates[0] if len(updates) == 1 else ops.concatenate(updates, axis=1))


_INT8_AT_BUILD = threading.local()


@contextlib.contextmanager
def int8_at_build(select):
    """`Dense` layers built inside are built int8 where `select(layer,
    (in, out))` gives their `BlockConfig`: int8 values and scales only (in
    our layout, zeros and ones), so no float kernel is ever made. For
    loaders whose int8 values are assigned next (`assign_int8`): a GGUF
    file's Q8_0 output head is 136M weights, half a GB in float32."""
    before = getattr(_INT8_AT_BUILD, "select", None)
    _INT8_AT_BUILD.select = select
    try:
        yield
    finally:
        if before is None:
            del _INT8_AT_BUILD.select
        else:
            _INT8_AT_BUILD.select = before


class Int8Matrix:
    """Mixin of a `Dense` or `EinsumDense` subclass whose int8 kernel is
    kept in memory as its transposed matrix `(out, in)`, `in` being the
    product of the kernel's leading `contracted_axes` axes (see the
    module). `kernel` still reads as Keras' int8 values, in the float
    kernel's shape, and `.keras` files hold Keras' layout."""

    contracted_axes = 1

    @property
    def transposed_int8(self):
        """Whether the int8 kernel is held as an `(out, in)` matrix."""
        return getattr(self, "_float_kernel_shape", None) is not None

    @property
    def float_kernel_shape(self):
        """The kernel's shape in Keras' layout (the float kernel's)."""
        shape = getattr(self, "_float_kernel_shape", None)
        return shape or tuple(kernel_variable(self).shape)

    def matrix_shape(self):
        """`(in, out)`: the kernel as a matrix."""
        shape = self.float_kernel_shape
        rows = math.prod(shape[: self.contracted_axes])
        return rows, math.prod(shape) // rows

    int8_block_size = None  # the rows sharing a scale (None: a column)

    def quantize(self, mode=None, type_check=True, config=None):
        block_size = self._block_size(config) if mode == "int8" else None
        weights = None
        if block_size is not None and not getattr(config, "values_follow", False):
            weights = ops.convert_to_numpy(kernel_variable(self))
        # Keras skips subclasses; these compute the same.
        super().quantize(mode, type_check=False, config=config)
        if mode == "int8":
            self._own_int8_layout(block_size, weights)

    def _block_size(self, config):
        """`config`'s block size, None for one block (a scale per column,
        as Keras')."""
        block_size = getattr(config, "block_size", None)
        if block_size is not None and block_size >= self.matrix_shape()[0]:
            return None
        return block_size

    def _own_int8_layout(self, block_size, weights):
        """Keras' int8 kernel `(in, out)` and scales replaced by ours: the
        transposed matrix and, with `block_size`, `weights` (float `(in,
        out)`) quantized in blocks, or zeros when None (values follow)."""
        rows, columns = self.matrix_shape()
        kernel = kernel_variable(self)
        shape = tuple(kernel.shape)
        with unlocked(self):
            # Values following: the variables' own zeros and ones, nothing
            # computed or copied (a 0.5B model's head is 136M values).
            values = scale = None
            if block_size is not None:
                if weights is not None:
                    values, scale = quantize_blocks(
                        weights.reshape(rows, columns), block_size
                    )
                del self.kernel_scale
                self.kernel_scale = self.add_weight(
                    name="kernel_scale",
                    shape=(columns, -(-rows // block_size)),
                    initializer="ones",
                    dtype="float32",
                    trainable=False,
                )
                if scale is not None:
                    self.kernel_scale.assign(scale)
                self.int8_block_size = block_size
            else:
                values = ops.transpose(ops.reshape(kernel, (rows, columns)))
            if values is not None:
                values = np.ascontiguousarray(ops.convert_to_numpy(values))
            del kernel  # ours too: the variable goes once the layer drops it
            kernel = replace_kernel_variable(
                self,
                shape=(columns, rows),
                initializer="zeros",
                dtype="int8",
                trainable=False,
            )
        if values is not None:
            kernel.assign(values)
        self._float_kernel_shape = shape

    @property
    def kernel(self):
        if not self.transposed_int8:
            return super().kernel
        return self.int8_values()

    def int8_values(self):
        """The int8 kernel values in the float kernel's shape."""
        kernel = kernel_variable(self)
        if not self.transposed_int8:
            return kernel
        return ops.reshape(ops.transpose(kernel), self._float_kernel_shape)

    def assign_int8(self, values, scale):
        """Sets the int8 kernel from `values` in the float kernel's shape
        (or as an `(in, out)` matrix) and its `scale`."""
        # numpy: the transpose of a transposed view is the caller's own
        # contiguous array (no copy of a large head's values).
        matrix = np.reshape(np.asarray(values), self.matrix_shape())
        kernel = kernel_variable(self)
        kernel.assign(
            matrix.T if self.transposed_int8 else matrix.reshape(kernel.shape)
        )
        self.kernel_scale.assign(ops.reshape(scale, self.kernel_scale.shape))

    def dequantized(self):
        """The float `(in, out)` matrix that the int8 kernel stands for."""
        rows, columns = self.matrix_shape()
        values = ops.reshape(ops.cast(self.int8_values(), "float32"), (rows, columns))
        if self.int8_block_size:
            scale = block_scales(self.kernel_scale, rows, self.int8_block_size)
            return values / ops.transpose(scale)
        return values / ops.reshape(self.kernel_scale, (1, columns))

    def _get_kernel_with_merged_lora(self):
        """`(kernel, scale, None)` for saving, in Keras' layout, with a LoRA
        update merged: an int8 kernel is dequantized, merged and quantized
        again with the same blocks (Keras' own merge assumes its layout)."""
        if self.quantization_mode != "int8" or not (
            self.lora_enabled or self.transposed_int8
        ):
            return super()._get_kernel_with_merged_lora()
        if not self.lora_enabled:
            return self.int8_values(), self.kernel_scale, None
        rows, columns = self.matrix_shape()
        update = ops.matmul(self.lora_kernel_a, self.lora_kernel_b)
        merged = self.dequantized() + (self.lora_alpha / self.lora_rank) * update
        values, scale = quantize_blocks(merged, self.int8_block_size or rows)
        return (
            ops.reshape(ops.transpose(values), self.float_kernel_shape),
            ops.reshape(scale, self.kernel_scale.shape),
            None,
        )

    def load_own_variables(self, store):
        if self.transposed_int8:  # the file holds Keras' `(in, out)` layout
            store = {key: store[key] for key in store.keys()}
            matrix = np.asarray(store["0"]).reshape(self.matrix_shape())
            store["0"] = np.ascontiguousarray(matrix.T)
        super().load_own_variables(store)

    def call(self, inputs, training=None):
        """Keras' `Dense` / `EinsumDense` call, its product summed in
        float32 in half precision (`product`)."""
        if self.quantization_mode is not None:
            return super().call(inputs, training=training)
        x = product(inputs, self.kernel, getattr(self, "equation", None))
        if self.bias is not None:
            x = ops.add(x, self.bias)
        return activate(self.activation, x)

    def _int8_call(self, inputs, training=None):
        if not self.transposed_int8:
            return super()._int8_call(inputs, training=training)
        rows, _ = self.matrix_shape()
        leading = ops.shape(inputs)[: len(inputs.shape) - self.contracted_axes]
        y = matmul(ops.reshape(inputs, (-1, rows)), [kernel_matrix(self, rows)])
        y = ops.reshape(
            y, (*leading, *self._float_kernel_shape[self.contracted_axes :])
        )
        if self.bias is not None:
            y = y + ops.cast(self.bias, y.dtype)
        return activate(self.activation, y)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dense(Int8Matrix, keras.layers.Dense):
    """A Keras `Dense` (same weights and files) whose `quantize("int8")`
    keeps the kernel as an `(out, in)` int8 matrix, so one-token decoding
    reads int8 bytes, not a float32 copy (see the module).

    Example:
        >>> import numpy as np
        >>> from keras_transformer.layers.quantization import Dense
        >>> layer = Dense(4)
        >>> layer.build((None, 8))
        >>> x = np.ones((2, 8), "float32")
        >>> before = np.asarray(layer(x))
        >>> layer.quantize("int8")
        >>> layer.transposed_int8, tuple(layer.kernel.shape)
        (True, (8, 4))
        >>> bool(np.allclose(layer(x), before, atol=0.05))
        True
    """

    def build(self, input_shape):
        config = getattr(_INT8_AT_BUILD, "select", lambda *_: None)(
            self, (int(input_shape[-1]), int(self.units))
        )
        if config is None:
            super().build(input_shape)
            return
        # Keras builds a layer of an int8 policy with int8 variables only.
        self.quantization_config = config
        source = self.dtype_policy.name
        self.dtype_policy = keras.dtype_policies.QuantizedDTypePolicy("int8", source)
        super().build(input_shape)
        self._own_int8_layout(self._block_size(config), None)

    def lora_factors(self):
        """`(A, B, alpha / r)` with Keras' LoRA enabled, else None."""
        if not self.lora_enabled:
            return None
        return self.lora_kernel_a, self.lora_kernel_b, self.lora_alpha / self.lora_rank


def embedding_logits(x, embedding):
    """`x` `(..., E)` times the transposed table `(V, E)` of a Keras
    `Embedding`, in `x`'s dtype: `(..., V)` (a tied output head)."""
    table = embedding.embeddings
    if check_mode(embedding) is None:
        return product(x, ops.transpose(ops.cast(table, x.dtype)))
    # The table is `(V, E)`: a dot product per contiguous int8 row.
    rows = ops.reshape(x, (-1, x.shape[-1]))
    table, rows = in_place(table, rows)
    table = ops.cast(table, x.dtype)
    y = product(rows, table, "nr,cr->nc") / ops.cast(
        embedding.embeddings_scale, x.dtype
    )
    return ops.reshape(y, (*ops.shape(x)[:-1], table.shape[0]))


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
