"""A model loaded from a GGUF file with int8 projections saves as `.keras`
and loads back the same: its float layers (the embedding table, any
dequantized tensor) stay float, the Q8_0 / Q4_0 projections int8."""

import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import to_numpy

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf", "gguf")
IDS = np.array([[5, 17, 3, 42, 9, 11]], "int32")


@pytest.mark.parametrize("name", ["llama_tiny.Q8_0", "qwen2_tiny.Q4_0"])
def test_a_gguf_int8_model_keras_round_trip(name, tmp_path):
    model = kt.models.from_pretrained(os.path.join(FIXTURES, f"{name}.gguf"))
    assert model.get_config()["quantization_float_layers"] == ["token_embedding"]
    expected = to_numpy(model(IDS))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(to_numpy(loaded(IDS)), expected)
    assert loaded.token_embedding.quantization_mode is None
    query = loaded.blocks[0].attention.query_dense
    assert query.quantization_mode == "int8" and query.int8_block_size == 32
