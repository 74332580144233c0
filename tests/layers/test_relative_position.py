"""T5's relative position bias: every relative position falls into
transformers' bucket (tests/fixtures/hf/t5_buckets.json, made by
make_t5_fixtures.py from `T5Attention._relative_position_bucket`), and a
cached step's bias is the full matrix's row."""

import json
import os

import numpy as np
import pytest

import keras_transformer as kt

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")


def bucket_numbers(layer, query, keys):
    """The bucket of each key position for one query: the bias of a table
    whose entry is its own bucket number."""
    layer.build()
    table = np.repeat(np.arange(layer.num_buckets)[:, None], layer.num_heads, 1)
    layer.embeddings.assign(table.astype("float32"))
    bias = layer(np.zeros((1, 1, 4), "float32"), key_length=keys, query_start=query)
    return np.asarray(bias)[0, 0, 0].astype(int)


@pytest.mark.parametrize(
    "layout", ["32_128_True", "32_128_False", "8_20_True", "8_20_False"]
)
def test_every_relative_position_falls_into_transformers_bucket(layout):
    with open(os.path.join(HF, "t5_buckets.json"), encoding="utf-8") as f:
        expected = json.load(f)[layout]  # positions -300 .. 300
    buckets, distance, bidirectional = layout.split("_")
    layer = kt.layers.RelativePositionBias(
        2, int(buckets), int(distance), bidirectional == "True"
    )
    # One query at position 300 and keys 0 .. 600: key - query = -300 .. 300.
    np.testing.assert_array_equal(bucket_numbers(layer, 300, 601), expected)


def test_a_cached_step_reads_its_row_of_the_full_bias():
    layer = kt.layers.RelativePositionBias(3, bidirectional=False)
    full = np.asarray(layer(np.zeros((1, 40, 4), "float32")))  # (1, H, 40, 40)
    assert full.shape == (1, 3, 40, 40)
    for step in (0, 17, 39):
        row = layer(np.zeros((1, 1, 4), "float32"), key_length=40, query_start=step)
        np.testing.assert_array_equal(np.asarray(row), full[:, :, step : step + 1])
    # Causal: every later key shares bucket 0 with the query itself.
    np.testing.assert_array_equal(full[0, :, 5, 6:], full[0, :, 5, 5:6].repeat(34, 1))


@pytest.mark.parametrize(
    "arguments, name",
    [
        (dict(num_heads=0), "num_heads"),
        (dict(num_heads=2, num_buckets=2), "num_buckets"),
        (dict(num_heads=2, num_buckets=32, max_distance=8), "max_distance"),
        (dict(num_heads=2, bidirectional="yes"), "bidirectional"),
    ],
)
def test_bad_arguments_are_refused(arguments, name):
    with pytest.raises(ValueError, match=name):
        kt.layers.RelativePositionBias(**arguments)
