"""The original encoder-decoder Transformer, for translation and summarization.

Shape legend: B batch, S source length, T target length, E hidden size.
"""

import keras

from keras_transformer.layers import (
    PositionalEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_transformer.models.common import check_sizes
from keras_transformer.models.presets import preset_arguments


def seq2seq(
    vocabulary_size,
    num_layers=None,
    num_heads=None,
    hidden_dim=None,
    intermediate_dim=None,
    max_sequence_length=256,
    dropout=0.1,
    target_vocabulary_size=None,
    tie_embeddings=True,
):
    """Builds the encoder-decoder of "Attention Is All You Need".

    Sinusoidal positions added to √E-scaled token embeddings, post-LN blocks
    with ReLU; the last encoder block's output feeds the cross-attention of
    every decoder block.

    Args:
        vocabulary_size: source vocabulary size (id 0 is padding), or a preset
            name (`"transformer_tiny"`, `"transformer_base"`).
        num_layers: number of encoder blocks and of decoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width.
        max_sequence_length: longest source and target.
        dropout: dropout rate.
        target_vocabulary_size: target vocabulary size; `None` shares the
            source vocabulary and one embedding between encoder and decoder.
        tie_embeddings: project decoder outputs to logits through the
            transposed target embedding instead of a separate Dense layer.

    Returns:
        A `keras.Model` with inputs `{"encoder_token_ids": (B, S),
        "decoder_token_ids": (B, T)}` returning float32 logits
        `(B, T, target vocabulary size)`.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.seq2seq(30, num_layers=1, num_heads=2, hidden_dim=8,
    ...                           intermediate_dim=16, max_sequence_length=10)
    >>> logits = model({"encoder_token_ids": np.array([[4, 5, 6, 0]]),
    ...                 "decoder_token_ids": np.array([[1, 7, 8]])})
    >>> tuple(logits.shape)
    (1, 3, 30)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
    """
    if isinstance(vocabulary_size, str):
        return seq2seq(
            **preset_arguments(
                "seq2seq",
                vocabulary_size,
                dict(
                    num_layers=num_layers,
                    num_heads=num_heads,
                    hidden_dim=hidden_dim,
                    intermediate_dim=intermediate_dim,
                    target_vocabulary_size=target_vocabulary_size,
                ),
            )
        )
    check_sizes(
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length,
        dropout,
    )
    if target_vocabulary_size is not None:
        check_sizes(
            target_vocabulary_size,
            num_layers,
            num_heads,
            hidden_dim,
            intermediate_dim,
            max_sequence_length,
            dropout,
        )
    encoder_token_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
    decoder_token_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")

    def embedding(size, name):
        return PositionalEmbedding(
            size,
            max_sequence_length,
            hidden_dim,
            position="sinusoidal",
            scale_embeddings=True,
            name=name,
        )

    if target_vocabulary_size is None:
        encoder_embeddings = decoder_embeddings = embedding(
            vocabulary_size, "embeddings"
        )
        target_vocabulary_size = vocabulary_size
    else:
        encoder_embeddings = embedding(vocabulary_size, "encoder_embeddings")
        decoder_embeddings = embedding(target_vocabulary_size, "decoder_embeddings")

    x = encoder_embeddings(encoder_token_ids)  # (B, S, E), masked at padding
    x = keras.layers.Dropout(dropout, name="encoder_embeddings_dropout")(x)
    for i in range(num_layers):
        x = TransformerEncoderBlock(
            num_heads, intermediate_dim, dropout=dropout, name=f"encoder_layer_{i}"
        )(x)
    y = decoder_embeddings(decoder_token_ids)  # (B, T, E)
    y = keras.layers.Dropout(dropout, name="decoder_embeddings_dropout")(y)
    for i in range(num_layers):
        y = TransformerDecoderBlock(
            num_heads, intermediate_dim, dropout=dropout, name=f"decoder_layer_{i}"
        )(y, x)
    if tie_embeddings:
        logits = decoder_embeddings(y, reverse=True)
    else:
        logits = keras.layers.Dense(
            target_vocabulary_size, dtype="float32", name="logits"
        )(y)
    return keras.Model(
        {
            "encoder_token_ids": encoder_token_ids,
            "decoder_token_ids": decoder_token_ids,
        },
        logits,
        name="seq2seq",
    )
