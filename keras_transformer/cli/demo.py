"""A self-contained demo: compose the layers, learn to reverse sequences.

The data is generated, so the demo runs offline in well under a minute on
two CPU cores. `keras-transformer demo` runs it and prints what was learned.
"""

import keras
import numpy as np

from keras_transformer import layers

VOCABULARY_SIZE = 12  # id 0 is padding; tokens are 1..11
SEQUENCE_LENGTH = 8


def make_data(num_examples, seed=0):
    """Random token sequences and their reversals (padding-free)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(1, VOCABULARY_SIZE, size=(num_examples, SEQUENCE_LENGTH))
    return x.astype("int32"), x[:, ::-1].astype("int32")


def build_model(hidden_dim=64, num_layers=2, num_heads=4):
    """Token ids -> per-position logits, from `PositionalEmbedding` and encoder
    blocks. Reversal needs every position to read another one: attention."""
    token_ids = keras.Input((SEQUENCE_LENGTH,), dtype="int32", name="token_ids")
    x = layers.PositionalEmbedding(
        VOCABULARY_SIZE, SEQUENCE_LENGTH, hidden_dim, position="learned"
    )(token_ids)
    for _ in range(num_layers):
        x = layers.TransformerEncoderBlock(
            num_heads,
            intermediate_dim=2 * hidden_dim,
            dropout=0.0,
            normalize_first=True,
        )(x)
    logits = keras.layers.Dense(VOCABULARY_SIZE, name="logits")(x)
    return keras.Model(token_ids, logits, name="reverser")


def run(steps=300, batch_size=64, seed=0, verbose=0):
    """Trains the reverser for `steps` steps; returns a dict of results."""
    if steps < 1:
        raise ValueError(f"`steps` must be >= 1. Received: steps={steps}")
    keras.utils.set_random_seed(seed)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    x, y = make_data(steps * batch_size, seed=seed)
    history = model.fit(x, y, batch_size=batch_size, epochs=1, verbose=verbose)
    test_x, test_y = make_data(512, seed=seed + 1)
    predictions = np.argmax(model.predict(test_x, verbose=0), axis=-1)
    return {
        "first_loss": history.history["loss"][0],
        "final_loss": model.evaluate(test_x, test_y, verbose=0)[0],
        "token_accuracy": float(np.mean(predictions == test_y)),
        "sequence_accuracy": float(np.mean(np.all(predictions == test_y, axis=-1))),
        "examples": [(test_x[i].tolist(), predictions[i].tolist()) for i in range(3)],
    }
