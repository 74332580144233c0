"""Half precision rounds where torch rounds: a convolution with its bias,
and an activation, each round once from float32
(`kt.layers.products`)."""

import math

import keras
import ml_dtypes
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.layers import products
from tests.helpers import to_numpy

HALF = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def rounded(x, dtype):
    """float64 `x` rounded once to `dtype`, back in float64."""
    return np.asarray(x).astype(HALF[dtype]).astype("float64")


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_precision_conv1d_adds_its_bias_before_its_one_rounding(dtype):
    # Multiples of 1/4 and 1/8 up to 16: every product and sum is exact in
    # float32 (16 bits), so one rounding of the exact value is the only
    # correct answer. A bias added after rounding the convolution rounds
    # twice (Keras' Conv1D).
    rng = np.random.default_rng(0)
    x = rng.integers(-64, 65, (2, 9, 4)) / 4
    kernel = rng.integers(-64, 65, (3, 4, 6)) / 8
    bias = rng.integers(-64, 65, 6) / 8 + 1 / 64
    for strides, padding in [(1, "same"), (2, "valid"), (1, "causal")]:
        layer = products.Conv1D(6, 3, strides=strides, padding=padding, dtype=dtype)
        layer.build((None, 9, 4))
        layer.set_weights([kernel, bias])
        ours = to_numpy(keras.ops.cast(layer(x), "float32")).astype("float64")
        assert layer.compute_dtype == dtype
        inputs = rounded(x, dtype)
        if padding == "same":
            inputs = np.pad(inputs, [(0, 0), (1, 1), (0, 0)])
        elif padding == "causal":
            inputs = np.pad(inputs, [(0, 0), (2, 0), (0, 0)])
        windows = np.stack(
            [inputs[:, i : i + 3] for i in range(0, inputs.shape[1] - 2, strides)], 1
        )  # (B, S, 3, 4)
        exact = np.einsum("bskc,kco->bso", windows, rounded(kernel, dtype))
        exact = exact + rounded(bias, dtype)
        np.testing.assert_array_equal(ours, rounded(exact, dtype), err_msg=padding)


def test_conv1d_in_float32_is_keras_conv1d():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7, 3)).astype("float32")
    ours = products.Conv1D(4, 3, padding="same", activation="gelu")
    theirs = keras.layers.Conv1D(4, 3, padding="same", activation="gelu")
    for layer in (ours, theirs):
        layer.build((None, 7, 3))
    theirs.set_weights(ours.get_weights())
    np.testing.assert_array_equal(to_numpy(ours(x)), to_numpy(theirs(x)))


def exact_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def exact_silu(x):
    return x / (1 + np.exp(-x))


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_precision_activations_are_rounded_once(dtype):
    """A feed-forward's activation of a half-precision tensor is the exact
    value rounded once, as torch computes it. TensorFlow's GELU and SiLU
    ops in bfloat16 round after each step (a sigmoid, then a product)."""
    x = np.linspace(-6, 6, 2001)
    cases = [
        (lambda v: keras.activations.gelu(v, approximate=False), exact_gelu),
        (keras.activations.silu, exact_silu),
    ]
    for activation, exact in cases:
        ours = products.activate(activation, keras.ops.cast(x, dtype))
        assert keras.backend.standardize_dtype(ours.dtype) == dtype
        ours = to_numpy(keras.ops.cast(ours, "float32")).astype("float64")
        expected = rounded(exact(rounded(x, dtype)), dtype)
        # Correctly rounded but where float32 itself ties: at most a few.
        assert (ours == expected).mean() > 0.995, (ours == expected).mean()


def test_gated_feed_forward_rounds_its_activation_once():
    """The SiLU of `GatedFeedForward`'s gate in bfloat16: one rounding of
    the float32 value (torch's `LlamaMLP`), checked by a numpy model that
    rounds where the layer should."""
    rng = np.random.default_rng(2)
    layer = kt.layers.GatedFeedForward(64, dtype="bfloat16")
    layer.build((None, None, 16))
    weights = [rng.normal(size=w.shape) / 4 for w in layer.get_weights()]
    layer.set_weights(weights)
    gate, up, down = [rounded(w, "bfloat16") for w in weights]
    x = rounded(rng.normal(size=(2, 8, 16)), "bfloat16")
    g = rounded(exact_silu(rounded(x @ gate, "bfloat16")), "bfloat16")
    h = rounded(g * rounded(x @ up, "bfloat16"), "bfloat16")
    expected = rounded(h @ down, "bfloat16")
    ours = to_numpy(keras.ops.cast(layer(x.astype("float32")), "float32"))
    # float32 sums in another order move a rounding now and then; a SiLU
    # rounded after its sigmoid and again after its product moves many.
    assert (ours == expected).mean() > 0.97, (ours == expected).mean()
