"""kt.training.AdamW decays by tensor rank, never by layer names."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import to_numpy

LR, DECAY = 0.1, 0.5


def step_with_zero_gradients(model, optimizer):
    """One update whose only effect is weight decay: w <- w (1 - lr * decay)."""
    before = {v.path: to_numpy(v).copy() for v in model.trainable_variables}
    zeros = [keras.ops.zeros_like(v) for v in model.trainable_variables]
    optimizer.apply_gradients(zip(zeros, model.trainable_variables, strict=True))
    return before


def check_decayed(model, before, decayed):
    for variable in model.trainable_variables:
        factor = (1 - LR * DECAY) if decayed(variable) else 1.0
        np.testing.assert_allclose(
            to_numpy(variable), before[variable.path] * factor, rtol=1e-6
        )


def make_model():
    # Names that no substring rule would recognise as a norm or a bias.
    inputs = keras.Input((3,), dtype="int32")
    x = kt.layers.PositionalEmbedding(5, 3, 4, position="learned", name="emb")(inputs)
    x = keras.layers.LayerNormalization(
        name="ln", gamma_initializer="ones", beta_initializer="ones"
    )(x)
    outputs = keras.layers.Dense(2, bias_initializer="ones", name="proj")(x)
    return keras.Model(inputs, outputs)


def test_matrices_decay_and_vectors_never_whatever_their_names():
    model = make_model()
    optimizer = kt.training.AdamW(learning_rate=LR, weight_decay=DECAY)
    before = step_with_zero_gradients(model, optimizer)
    # LayerNorm "ln" gamma/beta and the bias stay; kernel and embedding
    # tables (rank 2) shrink by exactly lr * weight_decay.
    check_decayed(model, before, lambda v: len(v.shape) >= 2)
    ln = model.get_layer("ln")
    np.testing.assert_array_equal(to_numpy(ln.gamma), np.ones(4))
    np.testing.assert_array_equal(to_numpy(ln.beta), np.ones(4))


def test_custom_exclusions_and_decay_after_load_model(tmp_path):
    model = make_model()
    model.compile(
        optimizer=kt.training.AdamW(
            learning_rate=LR, weight_decay=DECAY, exclude_from_decay=["emb/"]
        ),
        loss="mse",
    )
    model.optimizer.build(model.trainable_variables)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    optimizer = restored.optimizer
    assert isinstance(optimizer, kt.training.AdamW)
    assert optimizer.exclude_from_decay == ["emb/"]
    before = step_with_zero_gradients(restored, optimizer)
    check_decayed(
        restored,
        before,
        lambda v: len(v.shape) >= 2 and "emb/" not in v.path,
    )
    kernel = restored.get_layer("proj").kernel
    assert not np.array_equal(to_numpy(kernel), before[kernel.path])


def test_bad_exclusions():
    with pytest.raises(ValueError, match="exclude_from_decay='bias'"):
        kt.training.AdamW(exclude_from_decay="bias")
