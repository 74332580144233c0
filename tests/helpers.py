"""Shared plain-pytest helpers that keep each test file short."""

import os

import keras
import numpy as np


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def run_layer_test(layer, *args, expected_output_shape=None, **kwargs):
    """Calls `layer`, then checks `from_config(get_config())` with copied
    weights gives identical outputs. Returns the layer's output as numpy."""
    output = to_numpy(layer(*args, **kwargs))
    if expected_output_shape is not None:
        assert output.shape == tuple(expected_output_shape)
    clone = layer.__class__.from_config(layer.get_config())
    clone(*args, **kwargs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(*args, **kwargs)), output)
    assert clone.get_config() == layer.get_config()
    return output


def run_model_saving_test(model, inputs, tmp_path):
    """Saves `model` as `.keras`, loads it and expects identical outputs."""
    path = os.path.join(tmp_path, "model.keras")
    expected = keras.tree.map_structure(to_numpy, model(inputs))
    model.save(path)
    restored = keras.saving.load_model(path)
    actual = keras.tree.map_structure(to_numpy, restored(inputs))
    keras.tree.map_structure(np.testing.assert_array_equal, actual, expected)
    return restored


# ---- numpy references of the equations the layers implement ---------------


def np_softmax(x, mask=None):
    if mask is not None:
        x = np.where(mask, x, -1e9)
    e = np.exp(x - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return p if mask is None else np.where(mask, p, 0.0)


def np_layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def np_attention(query, value, weights, mask=None):
    """Multi-head attention from `keras.layers.MultiHeadAttention` weights."""
    wq, bq, wk, bk, wv, bv, wo, bo = weights
    q = np.einsum("bte,ehd->bthd", query, wq) + bq
    k = np.einsum("bse,ehd->bshd", value, wk) + bk
    v = np.einsum("bse,ehd->bshd", value, wv) + bv
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    probs = np_softmax(scores, None if mask is None else mask[:, None])
    heads = np.einsum("bhts,bshd->bthd", probs, v)
    return np.einsum("bthd,hde->bte", heads, wo) + bo


def np_feedforward(x, weights, activation):
    w1, b1, w2, b2 = weights
    return activation(x @ w1 + b1) @ w2 + b2


def np_relu(x):
    return np.maximum(x, 0.0)
