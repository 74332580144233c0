import math

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_layer_test, run_model_saving_test, to_numpy


@pytest.mark.parametrize("length, depth", [(7, 8), (5, 7), (1, 2)])
def test_sinusoidal_encoding_is_the_interleaved_formula(length, depth):
    encoding = kt.layers.sinusoidal_encoding(length, depth)
    assert encoding.shape == (length, depth) and encoding.dtype == np.float32
    for p in range(length):
        for j in range(depth):
            angle = p / 10000 ** ((j - j % 2) / depth)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert encoding[p, j] == pytest.approx(expected, abs=1e-6)


def test_sinusoidal_encoding_golden_values():
    encoding = kt.layers.sinusoidal_encoding(2, 4)
    # p=1: sin(1), cos(1), sin(1/100), cos(1/100)
    np.testing.assert_allclose(
        encoding, [[0, 1, 0, 1], [0.841471, 0.540302, 0.01, 0.99995]], atol=1e-6
    )


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
@pytest.mark.parametrize("scale", [False, True])
def test_positional_embedding_adds_positions(position, scale):
    layer = kt.layers.PositionalEmbedding(
        20, 6, 4, position=position, scale_embeddings=scale
    )
    ids = np.array([[3, 4, 5, 0], [7, 0, 0, 0]])
    out = run_layer_test(layer, ids, expected_output_shape=(2, 4, 4))
    table = to_numpy(layer.token_embedding.embeddings)[ids] * (2.0 if scale else 1.0)
    positions = to_numpy(layer.position_embeddings)[:4]
    if position == "sinusoidal":
        np.testing.assert_allclose(positions, kt.layers.sinusoidal_encoding(6, 4)[:4])
    np.testing.assert_allclose(out, table + positions[None], atol=1e-6)
    np.testing.assert_array_equal(to_numpy(layer.compute_mask(ids)), ids != 0)


def test_scale_embeddings_multiplies_by_the_square_root_of_hidden_dim():
    # At hidden_dim=16, sqrt(16) = 4 differs from 16 / 2 = 8 and from 16.
    layer = kt.layers.PositionalEmbedding(20, 6, 16, scale_embeddings=True)
    ids = np.array([[3, 4, 5, 0]])
    out = to_numpy(layer(ids))
    table = to_numpy(layer.token_embedding.embeddings)[ids]
    positions = kt.layers.sinusoidal_encoding(6, 16)[:4]
    np.testing.assert_allclose(out, 4.0 * table + positions, atol=1e-6)


def test_start_index_shifts_positions():
    layer = kt.layers.PositionalEmbedding(20, 6, 4, position="learned")
    ids = np.array([[3, 4, 5, 6]])
    full = to_numpy(layer(ids))
    np.testing.assert_allclose(
        to_numpy(layer(ids[:, 2:3], start_index=2)), full[:, 2:3]
    )


def test_mask_zero_false_emits_no_mask_and_learned_round_trip(tmp_path):
    layer = kt.layers.PositionalEmbedding(20, 6, 4, position="learned", mask_zero=False)
    assert layer.compute_mask(np.array([[1, 0]])) is None
    inputs = keras.Input((6,), dtype="int32")
    model = keras.Model(inputs, layer(inputs))
    run_model_saving_test(model, np.array([[1, 2, 3, 0, 0, 0]]), tmp_path)


def test_bad_arguments():
    with pytest.raises(ValueError, match="position='rotary'"):
        kt.layers.PositionalEmbedding(10, 4, 4, position="rotary")
    with pytest.raises(ValueError, match="vocabulary_size=0"):
        kt.layers.PositionalEmbedding(0, 4, 4)
    layer = kt.layers.PositionalEmbedding(10, 4, 4)
    with pytest.raises(ValueError, match="sequence_length=4.*shape \\(1, 5\\)"):
        layer(np.ones((1, 5), "int32"))
    with pytest.raises(ValueError, match="inputs.*rank 2"):
        kt.layers.PositionalEmbedding(10, 4, 4)(np.ones((1, 2, 3), "int32"))
    with pytest.raises(ValueError, match="depth=0"):
        kt.layers.sinusoidal_encoding(3, 0)


def test_concatenated_layout_is_marians():
    # Marian / fairseq: sin(p / 10000^(2i/d)) in the first half, cos after.
    length, depth = 7, 6
    table = kt.layers.sinusoidal_encoding(length, depth, "concatenated")
    for p in range(length):
        for i in range(depth // 2):
            angle = p / 10000 ** (2 * i / depth)
            assert table[p, i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, depth // 2 + i] == pytest.approx(math.cos(angle), abs=1e-6)
    interleaved = kt.layers.sinusoidal_encoding(length, depth)
    np.testing.assert_array_equal(table[:, :3], interleaved[:, 0::2])
    layer = kt.layers.PositionalEmbedding(
        5, length, depth, sinusoidal_layout="concatenated"
    )
    out = to_numpy(layer(np.array([[1, 2]])))
    tokens = to_numpy(layer.token_embedding.embeddings)[[1, 2]]
    np.testing.assert_allclose(out[0] - tokens, table[:2], atol=1e-6)


def test_position_offset_reads_later_rows():
    layer = kt.layers.PositionalEmbedding(
        5, 4, 3, position="learned", position_offset=2
    )
    out = to_numpy(layer(np.array([[1, 2, 3]]), start_index=1))
    table = to_numpy(layer.position_embeddings)
    assert table.shape == (4 + 2, 3)
    tokens = to_numpy(layer.token_embedding.embeddings)[[1, 2, 3]]
    np.testing.assert_allclose(out[0] - tokens, table[3:6], atol=1e-6)


def test_shared_token_embedding():
    first = kt.layers.PositionalEmbedding(5, 4, 3, position="learned")
    first.build((None, None))
    second = kt.layers.PositionalEmbedding(
        5, 4, 3, position="learned", token_embedding=first.token_embedding
    )
    second(np.array([[1]]))
    assert second.token_embedding is first.token_embedding
    with pytest.raises(ValueError, match="token_embedding"):
        kt.layers.PositionalEmbedding(6, 4, 3, token_embedding=first.token_embedding)
