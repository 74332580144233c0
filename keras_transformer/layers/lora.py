"""`Projection`: the attention layers' `EinsumDense` sublayer, whose LoRA
update is one low-rank product over its kernel read as a matrix.

Keras' `EinsumDense.enable_lora` factors a kernel of shape `(E, H, D)` (an
attention query, key or value) as `(E, H, r) @ (r, D)`: a rank per head,
`r * (E * H + D)` numbers. LoRA as the paper, PEFT and Hugging Face
checkpoints define it factors the `(E, H * D)` matrix: `(E, r) @ (r, H * D)`,
`r * (in + out)` numbers. A `Projection` does that: `lora_kernel_a` is
`(in, r)`, `lora_kernel_b` is `(r, out)`, `in` being the product of the
kernel's contracted (leading) axes and `out` of the others. Its `kernel`
is `W + alpha / r * reshape(A @ B)`, read by the attention layers' products
and merged into the kernel when the layer is saved, as Keras does.
"""

import keras
from keras import ops

from keras_transformer._compat import kernel_variable, unlocked
from keras_transformer.layers.quantization import Int8Matrix


class Projection(Int8Matrix, keras.layers.EinsumDense):
    """An `EinsumDense` whose kernel's leading axes are the ones contracted
    with the input, with LoRA over the kernel as a matrix (see the module).

    Example:
        >>> import numpy as np
        >>> from keras_transformer.layers.lora import Projection
        >>> layer = Projection("bte,ehd->bthd", output_shape=(None, 2, 4))
        >>> layer.build((None, None, 8))
        >>> layer.enable_lora(2)
        >>> tuple(layer.lora_kernel_a.shape), tuple(layer.lora_kernel_b.shape)
        ((8, 2), (2, 8))
    """

    @property
    def contracted_axes(self):
        """How many leading kernel axes are contracted with the input."""
        inputs, weights = self.equation.split("->")[0].split(",")
        return sum(1 for axis in weights if axis in inputs)

    def enable_lora(
        self, rank, lora_alpha=None, a_initializer="he_uniform", b_initializer="zeros"
    ):
        if not self.built:
            raise ValueError(
                "Cannot enable LoRA on a layer that isn't built. "
                f"Received: layer {self.name!r} with built=False"
            )
        if self.lora_enabled:
            raise ValueError(
                f"LoRA is already enabled on layer {self.name!r}. "
                f"Received: layer {self.name!r} with lora_enabled=True"
            )
        if self.quantization_mode not in (None, "int8"):
            raise ValueError(
                f"LoRA on a {self.quantization_mode} kernel is not supported "
                f"(int8 is). Received: layer {self.name!r} with "
                f"quantization_mode={self.quantization_mode!r}"
            )
        rows, columns = self.matrix_shape()
        with unlocked(self):
            self.lora_kernel_a = self.add_weight(
                name="lora_kernel_a",
                shape=(rows, rank),
                initializer=keras.initializers.get(a_initializer),
                dtype="float32",
            )
            self.lora_kernel_b = self.add_weight(
                name="lora_kernel_b",
                shape=(rank, columns),
                initializer=keras.initializers.get(b_initializer),
                dtype="float32",
            )
            kernel_variable(self).trainable = False
        self.lora_enabled = True
        self.lora_rank = rank
        self.lora_alpha = lora_alpha if lora_alpha is not None else rank

    def lora_factors(self):
        """`(A, B, alpha / r)` with LoRA enabled, else None: the attention
        layers' products add `(x @ A) @ B * alpha / r` beside the frozen
        kernel (`kt.layers.quantization.matmul`)."""
        if not getattr(self, "lora_enabled", False):
            return None
        return self.lora_kernel_a, self.lora_kernel_b, self.lora_alpha / self.lora_rank

    @property
    def kernel(self):
        if not getattr(self, "lora_enabled", False):
            return super().kernel
        if self.quantization_mode:  # int8: the update is computed apart
            return self.int8_values()
        update = ops.matmul(self.lora_kernel_a, self.lora_kernel_b)
        kernel = kernel_variable(self)
        update = ops.reshape(update, kernel.shape)
        scale = self.lora_alpha / self.lora_rank
        return ops.cast(
            ops.add(ops.cast(kernel, "float32"), scale * update),
            self.compute_dtype,
        )
