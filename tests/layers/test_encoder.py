import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import (
    np_attention,
    np_feedforward,
    np_layer_norm,
    np_relu,
    run_layer_test,
    run_model_saving_test,
    to_numpy,
)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def np_encoder_block(block, x, padding_mask):
    """The block's equations in numpy, on the block's own weights."""
    eps = block.layer_norm_epsilon
    ln1 = block.self_attention_layer_norm.get_weights()
    ln2 = block.feedforward_layer_norm.get_weights()
    mha = block.self_attention_layer.get_weights()
    ffn = (
        block.feedforward_intermediate_dense.get_weights()
        + block.feedforward_output_dense.get_weights()
    )
    mask = padding_mask[:, :, None] & padding_mask[:, None, :]
    if block.normalize_first:
        h = np_layer_norm(x, *ln1, eps)
        x = x + np_attention(h, h, mha, mask)
        return x + np_feedforward(np_layer_norm(x, *ln2, eps), ffn, np_relu)
    x = np_layer_norm(x + np_attention(x, x, mha, mask), *ln1, eps)
    return np_layer_norm(x + np_feedforward(x, ffn, np_relu), *ln2, eps)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_block_matches_numpy_reference(normalize_first):
    block = kt.layers.TransformerEncoderBlock(
        num_heads=2, intermediate_dim=12, normalize_first=normalize_first
    )
    x = rand(2, 5, 8)
    padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    out = run_layer_test(block, x, padding_mask=padding, expected_output_shape=x.shape)
    np.testing.assert_allclose(out, np_encoder_block(block, x, padding), atol=1e-5)


class Example2EncoderLayer(keras.layers.Layer):
    """The TensorFlow tutorial's encoder layer (the documents' Example 2):
    Dense Q/K/V of width d_model split into heads, tutorial masking
    (1 = padding, added as -1e9), post-LN with epsilon 1e-6."""

    def __init__(self, d_model, num_heads, dff, rate=0.1):
        super().__init__()
        self.num_heads, self.depth = num_heads, d_model // num_heads
        self.wq, self.wk, self.wv = (keras.layers.Dense(d_model) for _ in range(3))
        self.dense = keras.layers.Dense(d_model)
        self.ffn = keras.Sequential(
            [keras.layers.Dense(dff, activation="relu"), keras.layers.Dense(d_model)]
        )
        self.layernorm1 = keras.layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = keras.layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = keras.layers.Dropout(rate)
        self.dropout2 = keras.layers.Dropout(rate)

    def split_heads(self, x):
        x = tf.reshape(x, (tf.shape(x)[0], -1, self.num_heads, self.depth))
        return tf.transpose(x, [0, 2, 1, 3])

    def call(self, x, mask, training=False):
        q, k, v = (self.split_heads(w(x)) for w in (self.wq, self.wk, self.wv))
        logits = tf.matmul(q, k, transpose_b=True) / tf.sqrt(float(self.depth))
        weights = tf.nn.softmax(logits + mask * -1e9, axis=-1)
        heads = tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3])
        attn = self.dense(
            tf.reshape(heads, (tf.shape(x)[0], -1, self.depth * self.num_heads))
        )
        out1 = self.layernorm1(x + self.dropout1(attn, training=training))
        ffn = self.ffn(out1)
        return self.layernorm2(out1 + self.dropout2(ffn, training=training))


def copy_dense_to_heads(block, example, num_heads):
    """Maps Example 2's (E, E) Dense weights onto per-head EinsumDense weights."""
    attention = block.self_attention_layer
    for ours, theirs in [
        (attention.query_dense, example.wq),
        (attention.key_dense, example.wk),
        (attention.value_dense, example.wv),
    ]:
        kernel, bias = theirs.get_weights()
        ours.set_weights(
            [
                kernel.reshape(kernel.shape[0], num_heads, -1),
                bias.reshape(num_heads, -1),
            ]
        )
    kernel, bias = example.dense.get_weights()
    attention.output_dense.set_weights(
        [kernel.reshape(num_heads, -1, kernel.shape[1]), bias]
    )
    block.self_attention_layer_norm.set_weights(example.layernorm1.get_weights())
    block.feedforward_layer_norm.set_weights(example.layernorm2.get_weights())
    block.feedforward_intermediate_dense.set_weights(
        example.ffn.layers[0].get_weights()
    )
    block.feedforward_output_dense.set_weights(example.ffn.layers[1].get_weights())


def test_encoder_block_computes_example_2_block():
    d_model, num_heads, dff = 8, 2, 16
    example = Example2EncoderLayer(d_model, num_heads, dff)
    block = kt.layers.TransformerEncoderBlock(num_heads=num_heads, intermediate_dim=dff)
    ids = np.array([[5, 6, 7, 8], [5, 6, 0, 0]])
    x = rand(2, 4, d_model)
    tutorial_mask = (ids == 0).astype("float32")[:, None, None, :]  # 1 = padding
    expected = to_numpy(example(x, tutorial_mask))
    block(x)
    copy_dense_to_heads(block, example, num_heads)
    actual = to_numpy(block(x, padding_mask=ids != 0))
    # The tutorial masks keys only; ours also gives padded queries zero
    # attention, so compare real positions.
    np.testing.assert_allclose(actual[ids != 0], expected[ids != 0], atol=1e-5)


def test_encoder_block_computes_example_1_block():
    """Example 1 (the Keras text-classification block) uses key_dim=embed_dim."""
    embed_dim, num_heads, ff_dim = 8, 2, 16
    att = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
    ffn = keras.Sequential(
        [keras.layers.Dense(ff_dim, activation="relu"), keras.layers.Dense(embed_dim)]
    )
    ln1, ln2 = (keras.layers.LayerNormalization(epsilon=1e-6) for _ in range(2))
    x = rand(2, 5, embed_dim)
    out1 = ln1(x + att(x, x))
    expected = to_numpy(ln2(out1 + ffn(out1)))
    block = kt.layers.TransformerEncoderBlock(num_heads, ff_dim, key_dim=embed_dim)
    block(x)
    block.self_attention_layer.set_weights(att.get_weights())
    block.self_attention_layer_norm.set_weights(ln1.get_weights())
    block.feedforward_layer_norm.set_weights(ln2.get_weights())
    block.feedforward_intermediate_dense.set_weights(ffn.layers[0].get_weights())
    block.feedforward_output_dense.set_weights(ffn.layers[1].get_weights())
    np.testing.assert_allclose(to_numpy(block(x)), expected, atol=1e-5)


def test_padding_invariance_and_keras_mask_equals_padding_mask():
    embed = kt.layers.PositionalEmbedding(30, 6, 8, position="learned")
    block = kt.layers.TransformerEncoderBlock(2, 16)
    ids = np.array([[3, 4, 5, 0, 0, 0], [6, 7, 8, 9, 10, 11]])
    other = ids.copy()
    other[0, 3:] = [21, 22, 23]  # change only the padded tokens
    via_keras_mask = to_numpy(block(embed(ids)))
    via_padding_mask = to_numpy(block(embed(ids), padding_mask=ids != 0))
    np.testing.assert_array_equal(via_keras_mask, via_padding_mask)
    changed = to_numpy(block(embed(other), padding_mask=ids != 0))
    np.testing.assert_allclose(changed[0, :3], via_padding_mask[0, :3], atol=1e-6)
    np.testing.assert_allclose(changed[1], via_padding_mask[1], atol=1e-6)
    assert not np.allclose(changed[0, 3:], via_padding_mask[0, 3:])


def test_attention_mask_is_combined_with_padding():
    block = kt.layers.TransformerEncoderBlock(2, 16)
    x = rand(1, 4, 8)
    mask = np.tril(np.ones((1, 4, 4), bool))
    causal = to_numpy(block(x, attention_mask=mask))
    changed = x.copy()
    changed[0, 3] += 1.0
    np.testing.assert_allclose(
        to_numpy(block(changed, attention_mask=mask))[0, :3], causal[0, :3], atol=1e-6
    )


# Largest difference from float32 on the same weights, measured over 10
# seeds: 0.0023 (float16, 11-bit mantissa) and 0.018 (bfloat16, 8-bit), on
# outputs of size ~2. About twice that is allowed.
MIXED_ATOL = {"mixed_float16": 5e-3, "mixed_bfloat16": 4e-2}


@pytest.mark.parametrize("dtype", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_padding_heavy_matches_float32(dtype):
    x = rand(2, 6, 8) * 30
    padding = np.zeros((2, 6), bool)
    padding[0, :1] = True  # one real token; the second row is all padding
    keras.utils.set_random_seed(0)
    reference = kt.layers.TransformerEncoderBlock(2, 16)
    expected = to_numpy(reference(x, padding_mask=padding))
    block = kt.layers.TransformerEncoderBlock(2, 16, dtype=dtype)
    block(x, padding_mask=padding)
    block.set_weights(reference.get_weights())
    out = to_numpy(block(x, padding_mask=padding)).astype("float32")
    assert np.all(np.isfinite(out))
    # Measured at this seed: 0.0012 (float16), 0.016 (bfloat16).
    np.testing.assert_allclose(out, expected, atol=MIXED_ATOL[dtype], rtol=0)


def test_fit_step_lowers_loss_and_keras_round_trip(tmp_path):
    keras.utils.set_random_seed(1)
    inputs = keras.Input((6,), dtype="int32")
    h = kt.layers.PositionalEmbedding(12, 6, 16)(inputs)
    h = kt.layers.TransformerEncoderBlock(2, 32, dropout=0.0)(h)
    h = kt.layers.TransformerEncoderBlock(2, 32, dropout=0.0, normalize_first=True)(h)
    model = keras.Model(inputs, keras.layers.Dense(12)(h))
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x = np.random.default_rng(0).integers(1, 12, (32, 6))
    y = (x + 1) % 12  # learnable per-token map
    history = model.fit(x, y, epochs=20, batch_size=32, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0]
    run_model_saving_test(model, x[:4], tmp_path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 0, "intermediate_dim": 4}, "num_heads=0"),
        ({"num_heads": 2, "intermediate_dim": 0}, "intermediate_dim=0"),
        ({"num_heads": 2, "intermediate_dim": 4, "dropout": 1.5}, "dropout=1.5"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kt.layers.TransformerEncoderBlock(**kwargs)


def test_bad_call_arguments():
    with pytest.raises(ValueError, match="hidden size 10, num_heads=3"):
        kt.layers.TransformerEncoderBlock(3, 8)(rand(1, 4, 10))
    block = kt.layers.TransformerEncoderBlock(2, 8)
    with pytest.raises(ValueError, match="inputs.*rank 3"):
        block(rand(4, 8))
    block(rand(1, 4, 8))
    with pytest.raises(ValueError, match="padding_mask.*\\(1, 3\\)"):
        block(rand(1, 4, 8), padding_mask=np.ones((1, 3), bool))
    with pytest.raises(ValueError, match="attention_mask.*\\(1, 4, 5\\)"):
        block(rand(1, 4, 8), attention_mask=np.ones((1, 4, 5), bool))
