"""Validation and initialization the three model factories share."""

import keras

from keras_transformer.layers import validation


def check_sizes(
    vocabulary_size,
    num_layers,
    num_heads,
    hidden_dim,
    intermediate_dim,
    max_sequence_length,
    dropout,
):
    """Raises a ValueError naming the first impossible size."""
    if (
        isinstance(vocabulary_size, bool)
        or not isinstance(vocabulary_size, int)
        or (vocabulary_size < 2)
    ):
        raise ValueError(
            "`vocabulary_size` must be an integer >= 2 (id 0 is padding). "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    for name, value in [
        ("num_layers", num_layers),
        ("num_heads", num_heads),
        ("hidden_dim", hidden_dim),
        ("intermediate_dim", intermediate_dim),
        ("max_sequence_length", max_sequence_length),
    ]:
        validation.check_positive_int(name, value)
    validation.check_rate("dropout", dropout)
    if hidden_dim % num_heads:
        raise ValueError(
            "`hidden_dim` must be divisible by `num_heads`. "
            f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}"
        )


def normal_initializer(stddev=0.02):
    """BERT/GPT-2 initialize weights from N(0, 0.02²)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)
