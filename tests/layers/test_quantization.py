"""int8 kernels held as transposed matrices (`kt.layers.quantization`):
the same numbers and files as Keras' layout, and read in place by a
compiled decoding loop."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import quantization
from keras_transformer.layers.lora import Projection


def _dense_pair(seed=0, block_size=None):
    """Our `Dense` and Keras' with the same float weights, both int8 (ours
    with a scale per block of `block_size` rows, if given)."""
    ours, theirs = quantization.Dense(40), keras.layers.Dense(40)
    for layer in (ours, theirs):
        layer.build((None, 24))
    rng = np.random.default_rng(seed)
    kernel = rng.normal(size=(24, 40)).astype("float32")
    bias = rng.normal(size=(40,)).astype("float32")
    for layer in (ours, theirs):
        layer.set_weights([kernel, bias])
    ours.quantize("int8", config=quantization.BlockConfig(block_size))
    theirs.quantize("int8", config=quantization.BlockConfig())
    return ours, theirs


def _blocks_reference(kernel, block_size):
    """The weights that int8 values with a scale per block of `block_size`
    rows of each column stand for (numpy, block by block)."""
    weights = np.empty_like(kernel)
    for start in range(0, kernel.shape[0], block_size):
        block = kernel[start : start + block_size]
        largest = np.abs(block).max(axis=0)
        scale = 127 / np.where(largest > 0, largest, 1)
        values = np.clip(np.round(block * scale), -127, 127)
        weights[start : start + block_size] = values / scale
    return weights


@pytest.mark.parametrize("block_size", [8, 10])  # 24 rows: 8+8+8, 10+10+4
def test_int8_blocks_compute_with_their_own_scales(block_size, tmp_path):
    """A scale per block of rows: the outputs are those of the weights each
    block's scale gives, eager and compiled, and an outlying weight
    coarsens only its own block (one scale per column: the whole column)."""
    rng = np.random.default_rng(4)
    kernel = rng.normal(size=(24, 40)).astype("float32")
    kernel[3] *= 30.0  # an outlying row, in the first block
    bias = rng.normal(size=(40,)).astype("float32")
    layer = quantization.Dense(40)
    layer.build((None, 24))
    layer.set_weights([kernel, bias])
    layer.quantize("int8", config=quantization.BlockConfig(block_size))
    assert layer.int8_block_size == block_size
    assert tuple(layer._kernel.shape) == (40, 24)
    assert tuple(layer.kernel_scale.shape) == (40, 3)
    weights = _blocks_reference(kernel, block_size)
    np.testing.assert_allclose(layer.dequantized(), weights, rtol=1e-6, atol=1e-6)
    x = rng.normal(size=(2, 3, 24)).astype("float32")
    expected = x @ weights + bias
    np.testing.assert_allclose(layer(x), expected, rtol=1e-5, atol=1e-4)
    compiled = tf.function(layer, jit_compile=True)
    np.testing.assert_allclose(compiled(x[:1, :1]), expected[:1, :1], atol=1e-4)
    outside = slice(block_size, 24)
    per_column = _blocks_reference(kernel, 24)
    block_error = np.abs(weights - kernel)[outside].max()
    assert block_error < 0.1 * np.abs(per_column - kernel)[outside].max()

    store = {}
    layer.save_own_variables(store)
    assert np.asarray(store["0"]).shape == (24, 40)  # Keras' layout
    assert np.asarray(store["2"]).shape == (40, 3)  # kernel, bias, scale
    fresh = quantization.Dense(40)
    fresh.build((None, 24))
    fresh.quantize("int8", config=quantization.BlockConfig(block_size))
    fresh.load_own_variables(store)
    np.testing.assert_array_equal(fresh(x), layer(x))


def test_block_config_refuses_bad_sizes_and_round_trips():
    for bad in [0, -8, 2.5, "128", True]:
        with pytest.raises(ValueError, match=f"block_size={bad!r}"):
            quantization.BlockConfig(bad)
    assert quantization.BlockConfig(np.int64(64)).block_size == 64
    config = keras.saving.serialize_keras_object(quantization.BlockConfig(32))
    restored = keras.saving.deserialize_keras_object(config)
    assert isinstance(restored, quantization.BlockConfig)
    assert (restored.block_size, restored.activation_quantizer) == (32, None)


def test_dense_int8_is_kerass_values_held_transposed():
    ours, theirs = _dense_pair()
    assert tuple(ours._kernel.shape) == (40, 24)
    np.testing.assert_array_equal(np.asarray(ours.kernel), np.asarray(theirs._kernel))
    np.testing.assert_array_equal(
        np.asarray(ours.kernel_scale), np.asarray(theirs.kernel_scale)
    )
    x = np.random.default_rng(1).normal(size=(3, 5, 24)).astype("float32")
    np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-5)


def test_saved_int8_kernels_keep_kerass_layout_and_reload():
    ours, theirs = _dense_pair()
    store, reference = {}, {}
    ours.save_own_variables(store)
    theirs.save_own_variables(reference)
    assert sorted(store) == sorted(reference)
    for key in store:
        np.testing.assert_array_equal(
            np.asarray(store[key]), np.asarray(reference[key])
        )
    fresh, _ = _dense_pair(seed=5)  # other weights, the same layers
    fresh.load_own_variables(store)
    x = np.random.default_rng(2).normal(size=(4, 24)).astype("float32")
    np.testing.assert_array_equal(fresh(x), ours(x))


def test_projection_int8_matches_its_float_kernel_through_einsum():
    layer = Projection("bthd,hde->bte", output_shape=(None, 6), bias_axes="e")
    layer.build((None, None, 2, 4))
    rng = np.random.default_rng(3)
    kernel = rng.normal(size=(2, 4, 6)).astype("float32")
    layer.set_weights([kernel, rng.normal(size=6).astype("float32")])
    x = rng.normal(size=(2, 3, 2, 4)).astype("float32")
    float_outputs = np.asarray(layer(x))
    layer.quantize("int8", config=quantization.BlockConfig())
    assert tuple(layer._kernel.shape) == (6, 8)
    assert tuple(layer.kernel.shape) == (2, 4, 6)
    dequantized = np.asarray(layer.kernel, "float32") / np.asarray(layer.kernel_scale)
    expected = np.einsum("bthd,hde->bte", x, dequantized) + np.asarray(layer.bias)
    np.testing.assert_allclose(layer(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer(x), float_outputs, atol=0.05)
    store = {}
    layer.save_own_variables(store)
    assert np.asarray(store["0"]).shape == (2, 4, 6)


@pytest.mark.parametrize("kind", ["dense", "tied", "blocks"])
def test_a_compiled_loop_reads_int8_kernels_in_place(kind):
    """XLA hoists loop invariants: the cast of a weight read in a loop would
    become a float32 copy carried by the loop (four times the bytes read
    per step). The loop must carry no float32 matrix of the kernel's shape."""
    if kind == "tied":
        layer = quantization.TiedEmbedding(40, 24)
        layer.build((None,))
        layer.quantize("int8", config=quantization.BlockConfig())

        def step(x):
            return x + 1e-3 * layer(x, reverse=True)[:, :24]

    else:
        layer, _ = _dense_pair(block_size=8 if kind == "blocks" else None)

        def step(x):
            return x + 1e-3 * layer(x)[:, :24]

    @tf.function(jit_compile=True)
    def loop(x):
        return tf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, step(x)), (0, x))

    x = tf.ones((1, 24))
    hlo = loop.experimental_get_compiler_ir(x)(stage="optimized_hlo")
    loops = [line for line in hlo.splitlines() if " while(" in line]
    assert loops, hlo
    for line in loops:
        state = line.split(" while(")[0]
        assert not re.search(r"f32\[(40,24|24,40)\]", state), state
    assert re.search(r"s8\[40,24\]", "".join(loops))


def _computations(hlo):
    """The optimized HLO's computations, by name: name -> body text."""
    bodies, name = {}, None
    for line in hlo.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{$", line)
        if header:
            name, bodies[header.group(1)] = header.group(1), ""
        elif name is not None:
            bodies[name] += line + "\n"
    return bodies


def _dot_operand_kinds(body):
    """What a fused computation's `dot` reads, through bitcasts: the
    opcode that makes each operand ("parameter" if read from memory)."""
    made = {}  # name -> (opcode, its first operand)
    ref = r"%([\w.\-]+)"
    for line in body.splitlines():
        found = re.search(rf"{ref} = \S+(?: \S+)? ([\w\-]+)\((?:{ref})?", line)
        if found:
            made[found[1]] = (found[2], found[3])
    kinds = []
    for name in re.search(rf" dot\({ref}, {ref}\)", body).groups():
        while made[name][0] == "bitcast":
            name = made[name][1]
        kinds.append(made[name][0])
    return kinds


@pytest.mark.parametrize("kind", ["dense", "tied", "blocks"])
def test_an_int8_product_computes_its_input_once(kind):
    """XLA on the CPU fuses a matrix-vector product and its int8 cast into
    one loop over the output rows. The work that makes the vector (here
    `x * x + 1`, in a model a layer norm or a GELU) must stay outside that
    loop, or it is redone for every output row: the product reads the
    vector from memory."""
    if kind == "tied":
        layer = quantization.TiedEmbedding(40, 24)
        layer.build((None,))
        layer.quantize("int8", config=quantization.BlockConfig())

        def product(x):
            return layer(x, reverse=True)

    else:
        layer, _ = _dense_pair(block_size=8 if kind == "blocks" else None)
        product = layer

    @tf.function(jit_compile=True)
    def step(x):
        return product(x * x + 1.0)

    x = tf.ones((1, 24))
    hlo = step.experimental_get_compiler_ir(x)(stage="optimized_hlo")
    bodies = _computations(hlo).values()
    products = [body for body in bodies if " dot(" in body and "s8[" in body]
    assert products, hlo
    for body in products:
        assert "parameter" in _dot_operand_kinds(body), body


def test_int8_at_build_makes_the_layout_quantize_makes_without_a_float_kernel():
    config = quantization.BlockConfig(4, values_follow=True)
    with quantization.int8_at_build(
        lambda layer, shape: config if shape == (8, 3) else None
    ):
        built = quantization.Dense(3, use_bias=False)
        built.build((None, 8))
        other = quantization.Dense(5, use_bias=False)
        other.build((None, 8))
    assert other.quantization_mode is None  # not selected: float
    assert [v.dtype for v in other.weights] == ["float32"]
    reference = quantization.Dense(3, use_bias=False)
    reference.build((None, 8))
    reference.quantize("int8", config=config)
    layout = [(v.name, tuple(v.shape), v.dtype) for v in built.weights]
    assert layout == [(v.name, tuple(v.shape), v.dtype) for v in reference.weights]
    assert layout == [("kernel_scale", (3, 2), "float32"), ("kernel", (3, 8), "int8")]
    assert built.int8_block_size == reference.int8_block_size == 4
    rng = np.random.default_rng(0)
    values = rng.integers(-127, 128, size=(8, 3)).astype("int8")  # (in, out)
    scales = rng.uniform(10, 20, size=(3, 2)).astype("float32")
    for layer in (built, reference):
        layer.assign_int8(values, scales)
    x = rng.normal(size=(2, 8)).astype("float32")
    np.testing.assert_array_equal(built(x), reference(x))
    store = {}
    built.save_own_variables(store)  # Keras' layout, as quantize's layer saves
    fresh = quantization.Dense(3, use_bias=False)
    fresh.build((None, 8))
    fresh.quantize("int8", config=quantization.BlockConfig(4))
    fresh.load_own_variables(store)
    np.testing.assert_array_equal(fresh(x), built(x))
