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

    Examples:
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
                    max_sequence_length=max_sequence_length,
                    dropout=dropout,
                    target_vocabulary_size=target_vocabulary_size,
                    tie_embeddings=tie_embeddings,
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

    layers = {
        "encoder_embeddings": encoder_embeddings,
        "encoder_embeddings_dropout": keras.layers.Dropout(
            dropout, name="encoder_embeddings_dropout"
        ),
        "encoder_blocks": [
            TransformerEncoderBlock(
                num_heads, intermediate_dim, dropout=dropout, name=f"encoder_layer_{i}"
            )
            for i in range(num_layers)
        ],
        "decoder_embeddings": decoder_embeddings,
        "decoder_embeddings_dropout": keras.layers.Dropout(
            dropout, name="decoder_embeddings_dropout"
        ),
        "decoder_blocks": [
            TransformerDecoderBlock(
                num_heads, intermediate_dim, dropout=dropout, name=f"decoder_layer_{i}"
            )
            for i in range(num_layers)
        ],
        "logits": None
        if tie_embeddings
        else keras.layers.Dense(target_vocabulary_size, dtype="float32", name="logits"),
    }
    context = seq2seq_encode(layers, encoder_token_ids)
    logits, _ = seq2seq_decode(layers, decoder_token_ids, context)
    return keras.Model(
        {
            "encoder_token_ids": encoder_token_ids,
            "decoder_token_ids": decoder_token_ids,
        },
        logits,
        name="seq2seq",
    )


def seq2seq_layers(model):
    """The named layers of a `seq2seq` model (also one loaded from a file)."""
    names = [layer.name for layer in model.layers]
    shared = "embeddings" in names
    num_layers = sum(name.startswith("encoder_layer_") for name in names)
    return {
        "encoder_embeddings": model.get_layer(
            "embeddings" if shared else "encoder_embeddings"
        ),
        "encoder_embeddings_dropout": model.get_layer("encoder_embeddings_dropout"),
        "encoder_blocks": [
            model.get_layer(f"encoder_layer_{i}") for i in range(num_layers)
        ],
        "decoder_embeddings": model.get_layer(
            "embeddings" if shared else "decoder_embeddings"
        ),
        "decoder_embeddings_dropout": model.get_layer("decoder_embeddings_dropout"),
        "decoder_blocks": [
            model.get_layer(f"decoder_layer_{i}") for i in range(num_layers)
        ],
        "logits": model.get_layer("logits") if "logits" in names else None,
    }


def seq2seq_encode(layers, encoder_token_ids):
    """Encoder half of the forward pass: `(B, S)` ids -> `(B, S, E)` context."""
    x = layers["encoder_embeddings"](encoder_token_ids)  # masked at padding
    x = layers["encoder_embeddings_dropout"](x)
    for block in layers["encoder_blocks"]:
        x = block(x)
    return x


def seq2seq_decode(
    layers,
    decoder_token_ids,
    context=None,
    caches=None,
    index=None,
    cross_caches=None,
    context_padding_mask=None,
):
    """Decoder half, written once for the model and for cached decoding.

    The last encoder output `context` feeds every decoder block. With
    `caches` (one self-attention cache per block), `index` and
    `cross_caches` (from `compute_cross_attention_cache`), it runs one cached
    step. Returns `(logits, caches)`.
    """
    start = 0 if index is None else index
    y = layers["decoder_embeddings"](decoder_token_ids, start_index=start)  # (B, T, E)
    y = layers["decoder_embeddings_dropout"](y)
    updated = []
    for i, block in enumerate(layers["decoder_blocks"]):
        if caches is None:
            y = block(y, context, context_padding_mask=context_padding_mask)
        else:
            y, cache, _ = block(
                y,
                context_padding_mask=context_padding_mask,
                self_attention_cache=caches[i],
                self_attention_cache_update_index=start,
                cross_attention_cache=cross_caches[i],
            )
            updated.append(cache)
    if layers["logits"] is None:
        logits = layers["decoder_embeddings"](y, reverse=True)  # tied weights
    else:
        logits = layers["logits"](y)
    return logits, (updated if caches is not None else None)
