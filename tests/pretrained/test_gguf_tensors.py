"""A GGUF file's tensors as our weights (`pretrained/gguf_tensors.py`):
every type we dequantize gives `gguf`'s own floats, exactly, piece by
piece; Q8_0 / Q4_0 int8 blocks at their edges (a zero scale, -128) stand
for, and compute with, the file's dequantized weights."""

import gguf
import numpy as np
import pytest

from keras_transformer import _gguf
from keras_transformer.layers import quantization
from keras_transformer.pretrained import checkpoint, gguf_tensors
from keras_transformer.pretrained.gguf import DEQUANTIZED

# Byte offsets of the float16 scales in a K-quant block (ggml's layouts, as
# `gguf.quants` splits them): with sane values there, any other bytes are
# valid quants (`gguf.quants.quantize` has no K-quants).
K_SCALES = {
    "Q2_K": (80, 82),  # scales[16], qs[64], d, dmin
    "Q3_K": (108,),  # hmask[32], qs[64], scales[12], d
    "Q4_K": (0, 2),  # d, dmin, scales[12], qs[128]
    "Q5_K": (0, 2),  # d, dmin, scales[12], qh[32], qs[128]
    "Q6_K": (208,),  # ql[128], qh[64], scales[16], d
}


def kind_of(name):
    return getattr(gguf.GGMLQuantizationType, name)


def random_tensor(kind, rows, columns, rng):
    """`(rows, row bytes)` of a tensor of type `kind`."""
    if kind not in K_SCALES:
        weights = rng.normal(size=(rows, columns)).astype("float32")
        return gguf.quants.quantize(weights, kind_of(kind))
    size, block_bytes = gguf.GGML_QUANT_SIZES[kind_of(kind)]
    blocks = rng.integers(0, 256, (rows, columns // size, block_bytes), np.uint8)
    for offset in K_SCALES[kind]:
        scale = rng.uniform(-0.1, 0.1, (rows, columns // size)).astype(np.float16)
        blocks[..., offset : offset + 2] = scale[..., None].view(np.uint8)
    return blocks.reshape(rows, -1)


def file_tensors(path, tensors, dtype):
    """Our `FileTensors` of a file written with `tensors`, `{name: (kind,
    bytes)}`, by their own names."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (kind, data) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=kind_of(kind))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = _gguf.open_file(str(path))
    return gguf_tensors.FileTensors(reader, {n: n for n in tensors}, {}, dtype)


@pytest.mark.parametrize("kind", DEQUANTIZED)
def test_dequantized_types_give_ggufs_floats_exactly(kind, tmp_path, monkeypatch):
    # 5 rows of 512 values, 2 rows at a time: 3 pieces, the last shorter.
    monkeypatch.setattr(gguf_tensors, "DEQUANTIZE_VALUES", 1024)
    data = random_tensor(kind, 5, 512, np.random.default_rng(0))
    expected = gguf.quants.dequantize(data, kind_of(kind))
    assert expected.shape == (5, 512) and np.isfinite(expected).all()
    assert np.unique(expected).size > 500  # not a degenerate block
    table = "model.embed_tokens.weight"  # read as a `RowSource`, by rows
    tensors = {"up": (kind, data), table: (kind, data)}
    for dtype in ("float32", "bfloat16"):
        ours = file_tensors(tmp_path / f"{dtype}.gguf", tensors, dtype)
        want = expected.astype(checkpoint.numpy_dtype(dtype))
        np.testing.assert_array_equal(ours["up"], want, strict=True)
        np.testing.assert_array_equal(ours[table][1:4], want[1:4], strict=True)
        np.testing.assert_array_equal(np.asarray(ours[table]), want, strict=True)


def q8_0(d, q):
    """Q8_0 bytes `(O, B * 34)` of float16 scales `d` `(O, B)` and values
    `q` `(O, B, 32)`."""
    d = np.asarray(d, np.float16)[..., None].view(np.uint8)
    return np.concatenate([d, np.asarray(q, np.int8).view(np.uint8)], -1).reshape(
        len(d), -1
    )


def q4_0(d, q):
    """Q4_0 bytes `(O, B * 18)` of scales `d` `(O, B)` and values `q` in
    [-8, 7] `(O, B, 32)`: its first 16 in the low halves, last 16 high."""
    stored = np.asarray(q, np.int16) + 8
    packed = (stored[..., :16] | stored[..., 16:] << 4).astype(np.uint8)
    d = np.asarray(d, np.float16)[..., None].view(np.uint8)
    return np.concatenate([d, packed], -1).reshape(len(d), -1)


def int8_of(kind, data):
    """Our `(values, scales)` of int8 tensor bytes `(O, row bytes)`, and
    `gguf`'s float weights `(O, I)` of them."""
    inputs = data.shape[1] // gguf.GGML_QUANT_SIZES[kind_of(kind)][1] * 32
    tensor = _gguf.Tensor("w", kind_of(kind), (inputs, len(data)), data.size, 0, "")
    values, scales = gguf_tensors.int8_blocks(tensor, data)
    return values, scales, gguf.quants.dequantize(data, kind_of(kind))


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0"])
def test_int8_blocks_of_a_zero_scale_and_the_lowest_values(kind):
    # 3 outputs x 2 blocks: (0, 0) has a zero scale over nonzero values;
    # row 1 holds the lowest value (-128; Q4_0's -8) with a positive scale,
    # row 2 with a negative one (Q4_0: +8 then, as int8 holds it).
    rng = np.random.default_rng(1)
    low, make = (-128, q8_0) if kind == "Q8_0" else (-8, q4_0)
    q = rng.integers(low + 1, -low, (3, 2, 32))
    q[0, 0] = np.where(q[0, 0] == 0, 5, q[0, 0])
    q[1, :, ::5] = low
    q[2, 1, ::3] = low
    d = rng.uniform(0.01, 0.05, (3, 2))
    d[0, 0] = 0.0
    d[2, 1] = -d[2, 1] if kind == "Q4_0" else d[2, 1]
    values, scales, weights = int8_of(kind, make(d, q))
    assert scales[0, 0] == 1.0 and not values[0, :32].any()
    assert (values[1] == low).sum() == 14 and values.dtype == np.int8
    if kind == "Q4_0":
        assert (values[2, 32:] == 8).sum() == 11
    blockwise = np.repeat(scales, 32, axis=1)
    np.testing.assert_allclose(values / blockwise, weights, rtol=1e-6, atol=0)
    assert not weights[0, :32].any() and weights[1].min() < 0

    # The layer that holds them computes with the file's weights.
    layer = quantization.Dense(3, use_bias=False)
    layer.build((None, 64))
    layer.quantize("int8", config=quantization.BlockConfig(32, values_follow=True))
    layer.assign_int8(values.T, scales)
    x = rng.normal(size=(4, 64)).astype("float32")
    np.testing.assert_allclose(layer(x), x @ weights.T, rtol=1e-5, atol=1e-6)


def test_minus_128_of_a_negative_q8_0_scale_is_refused():
    # -d * -128 = 128 * d: int8 cannot hold it with a positive scale.
    q = np.zeros((1, 1, 32), np.int8)
    q[0, 0, 7] = -128
    with pytest.raises(ValueError, match="'w' has a block that int8 cannot hold"):
        int8_of("Q8_0", q8_0([[-0.5]], q))
