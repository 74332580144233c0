"""A GGUF file's tensors, read one at a time (`pretrained/gguf.py` maps
their names and builds the model): each dequantized into the model's dtype
or, for Q8_0 and Q4_0 projections, kept as int8 blocks of 32, and its
pages of the file released once converted.

Shape legend: O a projection's outputs, I its inputs, B its blocks of 32
inputs (I / 32).
"""

import collections
import collections.abc

import numpy as np

from keras_transformer import _gguf
from keras_transformer._compat import collect_once
from keras_transformer.layers.quantization import BlockConfig
from keras_transformer.pretrained import checkpoint
from keras_transformer.pretrained.row_source import RowSource

INT8 = ("Q8_0", "Q4_0")  # integers times a scale per block of 32
BLOCK = 32
# Tensors kept as int8 only where our layer holds int8 blocks: not the
# embedding table (a scale per row there).
NOT_INT8 = ("model.embed_tokens.weight",)


class FileTensors(collections.abc.Mapping):
    """A GGUF file's tensors by Hugging Face name, each read and converted
    when it is looked up and not kept: `checkpoint.assign` then holds the
    model and one tensor, never the file's tensors beside the model.

    A lookup gives the tensor as float `(O, I)` in `dtype` (dequantized,
    llama.cpp's permutation undone), or, for the tensors kept as int8
    blocks (`int8_names`), a zero-stride placeholder of that shape (the
    float variable they replace is never filled); `int8(name)` gives
    their blocks. `placeholder(name)` gives any tensor's shape and dtype
    without reading it (`checkpoint.assign`'s checks). Each tensor's pages
    of the file are released once it is converted."""

    def __init__(self, reader, names, permutations, dtype):
        self._tensors = {names[t.name]: t for t in reader.tensors}
        self._bytes = _gguf.TensorBytes()
        self._permutations = permutations
        self._dtype = checkpoint.numpy_dtype(dtype or "float32")
        self.int8_names = {
            name
            for name, tensor in self._tensors.items()
            if tensor.tensor_type.name in INT8 and name not in NOT_INT8
        }

    def placeholder(self, name):
        shape = tuple(int(n) for n in reversed(self._tensors[name].shape))
        return np.broadcast_to(np.zeros((), self._dtype), shape)

    def __getitem__(self, name):
        if name in self.int8_names:
            return self.placeholder(name)
        tensor = self._tensors[name]
        if name in NOT_INT8 and name not in self._permutations:
            # The token table, often the largest tensor (136M values for
            # Qwen2.5's vocabulary): read a block of rows at a time.
            shape = self.placeholder(name).shape
            return RowSource(
                shape, self._dtype, lambda start, stop: self._rows(tensor, start, stop)
            )
        try:
            values = dequantized(tensor, self._bytes.rows(tensor), self._dtype)
        finally:
            self._bytes.release(tensor)
        return self._permutations.get(name, _same)(values)

    def _rows(self, tensor, start, stop):
        """Rows `[start, stop)` of a tensor, dequantized; their pages of
        the file released."""
        rows = self._bytes.rows(tensor)[start:stop]
        piece = tensor._replace(shape=(*tensor.shape[:-1], len(rows)))
        try:
            return dequantized(piece, rows, self._dtype)
        finally:
            self._bytes.release(tensor)

    def int8(self, name):
        """`(values, scales)` of an int8 tensor (`int8_blocks`)."""
        tensor = self._tensors[name]
        try:
            values, scales = int8_blocks(tensor, self._bytes.rows(tensor))
        finally:
            self._bytes.release(tensor)
        order = self._permutations.get(name, _same)
        return order(values), order(scales)

    def __contains__(self, name):
        return name in self._tensors

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)

    def close(self):
        self._bytes.close()


def _same(w):
    return w


# Rows dequantized at a time: gguf's `dequantize` makes float32 temporaries
# of its input, so a large tensor goes in pieces of about 16 MB of output.
DEQUANTIZE_VALUES = 1 << 22


def dequantized(tensor, rows, dtype=np.float32):
    """A tensor's values as `(O, I)` in `dtype`, from its bytes `rows`
    (`TensorBytes.rows`; F16 and BF16 exactly; every quantized type by
    `gguf.quants.dequantize`, one piece of rows at a time)."""
    from gguf.quants import dequantize

    shape = tuple(int(n) for n in reversed(tensor.shape))  # ggml counts I first
    kind = tensor.tensor_type
    values = np.empty((rows.shape[0], int(tensor.shape[0])), dtype)
    step = max(1, DEQUANTIZE_VALUES // values.shape[1])
    for start in range(0, rows.shape[0], step):
        piece = np.ascontiguousarray(rows[start : start + step])
        values[start : start + step] = dequantize(piece, kind).reshape(len(piece), -1)
    return values.reshape(shape)


def int8_blocks(tensor, rows):
    """`(values, scales)` of a Q8_0 / Q4_0 tensor from its bytes `rows`:
    int8 `(O, I)` and float32 scales `(O, B)` such that each weight is
    `values / scale` of its block (our int8 layout; llama.cpp's is
    `d * q`, so scale = 1 / d).

    Q8_0 blocks are 34 bytes: `d` (float16), then 32 int8 `q`. Q4_0 blocks
    are 18 bytes: `d`, then 16 bytes whose low halves are `q + 8` of the
    block's first 16 weights and high halves of its last 16. A negative
    `d` (Q4_0's usual sign) is moved onto the values; a zero `d` leaves
    zeros with a scale of 1."""
    outputs, inputs = int(tensor.shape[1]), int(tensor.shape[0])
    blocks = inputs // BLOCK
    data = rows.reshape(outputs, blocks, -1)
    values = np.empty((outputs, inputs), np.int8)
    scales = np.empty((outputs, blocks), np.float32)
    step = max(1, DEQUANTIZE_VALUES // inputs)  # rows at a time: small temporaries
    for start in range(0, outputs, step):
        part = slice(start, start + step)
        values[part], scales[part] = _int8_rows(tensor, data[part])
    return values, scales


def _int8_rows(tensor, data):
    """`int8_blocks` of the bytes `data` `(rows, B, block bytes)`."""
    d = data[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)  # (O, B)
    if tensor.tensor_type.name == "Q8_0":
        q = data[..., 2:].view(np.int8).astype(np.int16)  # (O, B, 32)
    else:
        packed = data[..., 2:]
        q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.int16) - 8
    q = np.where((d < 0)[..., None], -q, q)
    d = np.abs(d)
    if q.min() < -128 or q.max() > 127:  # only a -128 of a negative Q8_0 scale
        raise ValueError(
            f"GGUF tensor {tensor.name!r} has a block that int8 cannot hold "
            "(-128 with a negative scale). Received: quantized values in "
            f"[{int(q.min())}, {int(q.max())}]"
        )
    q = np.where((d == 0)[..., None], 0, q)
    scales = np.where(d == 0, 1.0, 1.0 / np.where(d == 0, 1.0, d))
    return q.reshape(len(data), -1), scales


def built_int8(tensors):
    """`select(layer, (in, out))` of `int8_at_build`: the projections
    built int8, never float: those of int8 tensors whose shape no other
    projection tensor of the file has (as a Q8_0 output head's), so the
    shape names the layer. The others are quantized after construction
    (`set_int8`)."""
    shapes = collections.Counter(
        tensors.placeholder(name).shape[::-1]  # (I, O)
        for name in tensors
        if tensors.placeholder(name).ndim == 2 and name not in NOT_INT8
    )
    unique = {
        tensors.placeholder(name).shape[::-1]
        for name in tensors.int8_names
        if shapes[tensors.placeholder(name).shape[::-1]] == 1
    }
    config = BlockConfig(BLOCK, values_follow=True)
    return lambda layer, shape: config if shape in unique else None


def set_int8(model, tensors, projection_layers):
    """Quantizes the layers of the `tensors.int8_names` (int8 with blocks of
    32 rows, their float kernels never read) and sets their values and
    scales (`projection_layers(model)`: `{Hugging Face name: our layer}`);
    the model then reports `quantized_mode == "int8"`. Run before
    the float tensors are assigned, so a float kernel that int8 replaces
    is freed first. Returns the names set."""
    if not tensors.int8_names:
        return set()
    layers = projection_layers(model)
    names = sorted(tensors.int8_names)
    for name in names:  # checked before any is set
        shape = layers[name].matrix_shape()[::-1]  # (O, I)
        if tensors.placeholder(name).shape != shape:
            raise ValueError(
                f"GGUF tensor {name!r} has shape {tensors.placeholder(name).shape}, "
                f"which disagrees with the file's metadata (expected {shape}). "
                f"Received: {name}.shape={tensors.placeholder(name).shape}"
            )
    with collect_once():
        for name in names:
            layer = layers[name]
            if layer.quantization_mode is None:  # else built int8
                layer.quantize("int8", config=BlockConfig(BLOCK, values_follow=True))
            values, scales = tensors.int8(name)
            layer.assign_int8(values.T, scales)  # (I, O): Keras' kernel layout
    # The embedding and any dequantized projection stay float.
    model.mark_quantized("int8", BLOCK, keep_float=True)
    return set(names)
