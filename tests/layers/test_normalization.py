import json
import os

import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
from tests.helpers import run_layer_test, to_numpy

FIXTURE = os.path.join(
    os.path.dirname(__file__), os.pardir, "fixtures", "hf", "llama_layers.json"
)
with open(FIXTURE) as file:
    CASES = {case["dtype"]: case for case in json.load(file)["rms_norm"]}


def outputs(layer, case):
    x = ops.cast(np.array(case["x"], "float32"), case["dtype"])
    layer(x)
    layer.set_weights([np.array(case["weight"], "float32")])
    out = layer(x)
    assert out.dtype == case["dtype"]
    return to_numpy(ops.cast(out, "float32")), np.array(case["output"], "float32")


@pytest.mark.parametrize("policy", ["float32", "bfloat16", "mixed_bfloat16"])
def test_rms_normalization_equals_transformers_llama_rms_norm(policy):
    # transformers' LlamaRMSNorm (tests/fixtures/hf/make_llama_layers.py):
    # float32 statistics, cast back, then the weight. bfloat16: bit for bit.
    case = CASES["float32" if policy == "float32" else "bfloat16"]
    norm = kt.layers.RMSNormalization(epsilon=case["epsilon"], dtype=policy)
    actual, expected = outputs(norm, case)
    if policy == "float32":
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(actual, expected)


def test_keras_rms_normalization_rounds_differently_in_bfloat16():
    # Why the layer is our own: Keras multiplies by the scale before casting
    # back, so bfloat16 results differ from transformers' by a rounding step.
    case = CASES["bfloat16"]
    theirs = keras.layers.RMSNormalization(epsilon=case["epsilon"], dtype="bfloat16")
    actual, expected = outputs(theirs, case)
    assert np.any(actual != expected)
    np.testing.assert_allclose(actual, expected, rtol=1e-2)


def test_golden_numbers_and_config_round_trip():
    norm = kt.layers.RMSNormalization(epsilon=1e-6)
    x = np.array([[[3.0, 4.0], [0.0, 0.0]]], "float32")
    out = run_layer_test(norm, x, expected_output_shape=(1, 2, 2))
    # sqrt(mean([9, 16])) = sqrt(12.5); zeros stay zeros (epsilon).
    np.testing.assert_allclose(out[0, 0], [3 / 12.5**0.5, 4 / 12.5**0.5], rtol=1e-6)
    np.testing.assert_array_equal(out[0, 1], [0.0, 0.0])
    assert [w.path.split("/")[-1] for w in norm.weights] == ["scale"]


def test_bad_epsilon():
    with pytest.raises(ValueError, match="epsilon=0"):
        kt.layers.RMSNormalization(epsilon=0)
