import json
import os

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_layer_test, to_numpy

FIXTURE = os.path.join(
    os.path.dirname(__file__), os.pardir, "fixtures", "hf", "llama_layers.json"
)


def test_gated_feedforward_equals_transformers_llama_mlp():
    with open(FIXTURE) as file:
        case = json.load(file)["mlp"]
    weights = {
        name: np.array(value, "float32") for name, value in case["weights"].items()
    }
    ffn = kt.layers.GatedFeedForward(intermediate_dim=24)
    x = np.array(case["x"], "float32")
    ffn(x)
    for name in ("gate", "up", "down"):
        getattr(ffn, name).kernel.assign(weights[f"{name}_proj.weight"].T)
    np.testing.assert_allclose(to_numpy(ffn(x)), case["output"], atol=1e-5)


def test_swiglu_numpy_reference_with_biases_and_round_trip():
    ffn = kt.layers.GatedFeedForward(6, use_bias=True, bias_initializer="normal")
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    out = run_layer_test(ffn, x, expected_output_shape=(2, 3, 4))
    wg, bg, wu, bu, wd, bd = ffn.get_weights()
    gate = x @ wg + bg
    expected = (gate / (1 + np.exp(-gate)) * (x @ wu + bu)) @ wd + bd
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert [w.path for w in ffn.weights][::2] == [
        f"{ffn.name}/{name}/kernel" for name in ("gate", "up", "down")
    ]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"intermediate_dim": 0}, "intermediate_dim=0"),
        ({"intermediate_dim": 4, "use_bias": "yes"}, "use_bias='yes'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kt.layers.GatedFeedForward(**kwargs)
