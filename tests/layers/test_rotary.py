import json
import os

import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
from tests.helpers import run_layer_test, to_numpy

# transformers' numbers, made by tests/fixtures/hf/make_llama_layers.py.
FIXTURE = os.path.join(
    os.path.dirname(__file__), os.pardir, "fixtures", "hf", "llama_layers.json"
)
with open(FIXTURE) as file:
    REFERENCE = json.load(file)
ROTARY = {case["name"]: case for case in REFERENCE["rotary"]}


def heads_last(x):
    """transformers' `(B, H, T, D)` -> our `(B, T, H, D)`."""
    return np.asarray(x, "float32").transpose(0, 2, 1, 3)


@pytest.mark.parametrize("name", sorted(ROTARY))
def test_rotary_embedding_matches_transformers(name):
    case = ROTARY[name]
    np.testing.assert_allclose(
        kt.layers.rotary_inverse_frequencies(
            case["head_dim"], case["rope_theta"], case["rope_scaling"]
        ),
        case["inverse_frequencies"],
        rtol=1e-7,
    )
    rope = kt.layers.RotaryEmbedding(
        case["head_dim"],
        rope_theta=case["rope_theta"],
        rope_scaling=case["rope_scaling"],
        dtype=case["dtype"],
    )
    for x, expected in [("q", "q_out"), ("k", "k_out")]:
        inputs = ops.cast(heads_last(case[x]), case["dtype"])
        actual = rope(inputs, start_index=case["start"])
        assert actual.dtype == case["dtype"]
        actual = to_numpy(ops.cast(actual, "float32"))
        if case["dtype"] == "float32":
            np.testing.assert_allclose(actual, heads_last(case[expected]), atol=2e-6)
        else:
            # The same bfloat16 products and sum; cosines and sines rounded
            # from float32 may differ in their last bit: at most one unit in
            # the last place (bfloat16 keeps 8 significant bits).
            reference = heads_last(case[expected])
            magnitude = np.maximum(np.abs(reference), np.abs(actual))
            ulp = 2.0 ** (np.floor(np.log2(np.maximum(magnitude, 1e-30))) - 7)
            assert np.all(np.abs(actual - reference) <= ulp)


def test_traced_start_index_equals_the_python_one():
    case = ROTARY["llama3"]
    rope = kt.layers.RotaryEmbedding(16, rope_scaling=case["rope_scaling"])
    x = heads_last(case["q"])
    expected = to_numpy(rope(x, start_index=case["start"]))
    start = ops.convert_to_tensor(case["start"], "int32")
    np.testing.assert_array_equal(to_numpy(rope(x, start_index=start)), expected)
    np.testing.assert_allclose(expected, heads_last(case["q_out"]), atol=2e-6)


def test_scores_depend_only_on_the_distance_between_positions():
    # q at position m and k at n: q_m · k_n is a function of m - n.
    rope = kt.layers.RotaryEmbedding(8, rope_theta=100.0)
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 1, 1, 1, 8)).astype("float32")

    def score(m, n):
        return float(
            np.sum(to_numpy(rope(q, start_index=m)) * to_numpy(rope(k, start_index=n)))
        )

    assert score(3, 1) == pytest.approx(score(12, 10), abs=1e-4)
    assert score(0, 0) == pytest.approx(float(np.sum(q * k)), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_rotation_pairs_the_two_halves_of_each_head():
    # Position 1, inverse frequencies [1, 0.01] for head_dim 4 and theta 1e4:
    # features (0, 2) rotate by 1 radian, (1, 3) by 0.01.
    rope = kt.layers.RotaryEmbedding(4)
    x = np.array([1.0, 0.0, 0.0, 0.0], "float32").reshape(1, 1, 1, 4)
    x = np.concatenate([np.zeros_like(x), x], axis=1)  # positions 0 and 1
    out = to_numpy(rope(x))[0, 1, 0]
    np.testing.assert_allclose(out, [np.cos(1.0), 0.0, np.sin(1.0), 0.0], atol=1e-6)


def test_scaling_dicts_read_the_old_type_key_and_default():
    old_key = {"type": "linear", "factor": 2.0}
    linear = kt.layers.rotary_inverse_frequencies(8, rope_scaling=old_key)
    np.testing.assert_array_equal(
        linear, kt.layers.rotary_inverse_frequencies(8) / np.float32(2.0)
    )
    np.testing.assert_array_equal(
        kt.layers.rotary_inverse_frequencies(8, 500.0, {"rope_type": "default"}),
        kt.layers.rotary_inverse_frequencies(8, 500.0),
    )
    # A dict that repeats rope_theta (transformers' rope_parameters) is read.
    np.testing.assert_array_equal(
        kt.layers.rotary_inverse_frequencies(
            8, 500.0, {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}
        ),
        kt.layers.rotary_inverse_frequencies(8, 500.0) / np.float32(2.0),
    )


def test_config_round_trip_and_mixed_precision():
    layer = kt.layers.RotaryEmbedding(
        8, rope_theta=500.0, rope_scaling={"rope_type": "linear", "factor": 2.0}
    )
    x = np.random.default_rng(0).normal(size=(2, 3, 2, 8)).astype("float32")
    run_layer_test(layer, x, start_index=4, expected_output_shape=(2, 3, 2, 8))
    half = kt.layers.RotaryEmbedding(8, dtype="mixed_bfloat16")
    assert half(x).dtype == "bfloat16"
    model_input = keras.Input((None, 2, 8))
    assert tuple(layer(model_input).shape) == (None, None, 2, 8)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"head_dim": 7}, "head_dim=7"),
        ({"head_dim": 0}, "head_dim=0"),
        ({"head_dim": 8, "rope_theta": 0.0}, "rope_theta=0.0"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
         "'dynamic'"),
        ({"head_dim": 8, "rope_scaling": {"type": "yarn", "factor": 2.0}}, "'yarn'"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "linear"}}, "'factor'"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "linear", "factor": -1.0}},
         r"rope_scaling\['factor'\]=-1.0"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "linear", "factor": 2.0,
                                          "partial_rotary_factor": 0.5}},
         "'partial_rotary_factor'"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "linear", "factor": 2.0,
                                          "rope_theta": 99.0}}, "99.0"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                          "low_freq_factor": 4.0,
                                          "high_freq_factor": 1.0,
                                          "original_max_position_embeddings": 64}},
         "high_freq_factor > low_freq_factor"),
        ({"head_dim": 8, "rope_scaling": "linear"}, "rope_scaling='linear'"),
    ],
)  # fmt: skip
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kt.layers.RotaryEmbedding(**kwargs)


def test_bad_call_arguments():
    rope = kt.layers.RotaryEmbedding(8)
    with pytest.raises(ValueError, match="rank 4"):
        rope(np.zeros((2, 3, 8), "float32"))
    with pytest.raises(ValueError, match="head_dim=8.*\\(1, 2, 2, 6\\)"):
        rope(np.zeros((1, 2, 2, 6), "float32"))
