"""Int8 weights with a scale per block of input rows (see
`kt.layers.quantization`): the config that asks for them, and the
quantization of a float matrix into them."""

import numbers

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class BlockConfig(keras.quantizers.Int8QuantizationConfig):
    """Keras' weight-only int8 config, with `block_size`: the input rows
    that share a scale in each output column of our projections (None:
    the whole column). Keras' own layers ignore it (a scale per column).

    `values_follow=True` (not saved in configs) is for values set right
    after quantizing (`Int8Matrix.assign_int8`, as a GGUF file's int8
    blocks are loaded): quantizing then writes zero values and unit scales
    of the right shapes instead of computing them from the float kernel,
    which it never reads.

    Example:
        >>> from keras_transformer.layers.quantization import BlockConfig
        >>> config = BlockConfig(block_size=64)
        >>> config.mode, config.block_size, config.activation_quantizer
        ('int8', 64, None)
    """

    def __init__(self, block_size=None, *, values_follow=False):
        if block_size is not None and (
            isinstance(block_size, bool)
            or not isinstance(block_size, numbers.Integral)
            or block_size <= 0
        ):
            raise ValueError(
                "`block_size` must be a positive integer or None. "
                f"Received: block_size={block_size!r}"
            )
        super().__init__(
            weight_quantizer=_Zeros() if values_follow else None,
            activation_quantizer=None,
        )
        self.block_size = None if block_size is None else int(block_size)
        self.values_follow = bool(values_follow)

    def get_config(self):
        return {"block_size": self.block_size}

    @classmethod
    def from_config(cls, config):
        return cls(config.get("block_size"))


class _Zeros(keras.quantizers.Quantizer):
    """Keras' weight quantizer protocol (`(values, scale)` of a kernel,
    reduced over axis 0), giving zeros and ones without reading it."""

    def __init__(self):
        super().__init__(output_dtype="int8")

    def __call__(self, x, to_numpy=False):
        shape = tuple(x.shape)
        return np.zeros(shape, "int8"), np.ones((1, *shape[1:]), "float32")

    def get_config(self):
        return {}


def quantize_blocks(matrix, block_size):
    """A float `(in, out)` matrix as int8 values `(out, in)` (transposed)
    and scales `(out, blocks)`: `values / scale` of each value's block of
    `block_size` rows (the last block may be shorter) is the weight,
    rounded to the nearest of 255 levels spanning the block's largest
    magnitude."""
    rows, columns = matrix.shape
    blocks = -(-rows // block_size)
    padded = ops.pad(
        ops.transpose(ops.cast(matrix, "float32")),
        [[0, 0], [0, blocks * block_size - rows]],
    )
    padded = ops.reshape(padded, (columns, blocks, block_size))
    largest = ops.max(ops.abs(padded), axis=-1)
    scale = 127.0 / ops.where(largest > 0, largest, 1.0)
    values = ops.clip(ops.round(padded * scale[..., None]), -127, 127)
    values = ops.reshape(values, (columns, blocks * block_size))[:, :rows]
    return ops.cast(values, "int8"), scale


def block_scales(scale, rows, block_size):
    """Scales `(out, blocks)` as `(out, rows)`: each row's block's."""
    return ops.repeat(scale, block_size, axis=1)[:, :rows]
