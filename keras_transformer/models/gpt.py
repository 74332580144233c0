"""GPT-2: a decoder-only Transformer language model.

Shape legend: B batch, T sequence length, E hidden size, V vocabulary size.
"""

import keras

from keras_transformer.layers import PositionalEmbedding, TransformerDecoderBlock
from keras_transformer.models.common import check_sizes, normal_initializer
from keras_transformer.models.presets import preset_arguments


def gpt2(
    vocabulary_size,
    num_layers=None,
    num_heads=None,
    hidden_dim=None,
    intermediate_dim=None,
    max_sequence_length=1024,
    dropout=0.1,
):
    """Builds a GPT-2 causal language model as a functional `keras.Model`.

    Token + learned position embeddings, pre-LN decoder blocks without
    cross-attention (GELU), a final LayerNorm, and logits through the
    transposed token embedding (tied weights). Token id 0 is padding.

    Args:
        vocabulary_size: number of token ids, or a preset name
            (`"gpt2_tiny"`, `"gpt2_small"`, `"gpt2_medium"`); other arguments
            then override the preset.
        num_layers: number of decoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width (4·E in GPT-2).
        max_sequence_length: the context length.
        dropout: dropout rate (embeddings, residuals, attention).

    Returns:
        A `keras.Model` mapping int `token_ids` `(B, T)` to float32 logits
        `(B, T, vocabulary_size)`; position t predicts token t + 1.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.gpt2(50, num_layers=1, num_heads=2, hidden_dim=8,
    ...                        intermediate_dim=32, max_sequence_length=16)
    >>> tuple(model(np.array([[5, 6, 7]])).shape)
    (1, 3, 50)

    References:
        Radford et al., "Language Models are Unsupervised Multitask Learners",
        2019.
    """
    if isinstance(vocabulary_size, str):
        return gpt2(
            **preset_arguments(
                "gpt2",
                vocabulary_size,
                dict(
                    num_layers=num_layers,
                    num_heads=num_heads,
                    hidden_dim=hidden_dim,
                    intermediate_dim=intermediate_dim,
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
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    embeddings = PositionalEmbedding(
        vocabulary_size,
        max_sequence_length,
        hidden_dim,
        position="learned",
        embeddings_initializer=normal_initializer(),
        name="embeddings",
    )
    x = embeddings(token_ids)  # (B, T, E), masked where token_ids == 0
    x = keras.layers.Dropout(dropout, name="embeddings_dropout")(x)
    for i in range(num_layers):
        x = TransformerDecoderBlock(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            activation="gelu",
            normalize_first=True,
            layer_norm_epsilon=1e-5,
            cross_attention=False,
            kernel_initializer=normal_initializer(),
            name=f"transformer_layer_{i}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="final_layer_norm")(x)
    logits = embeddings(x, reverse=True)  # (B, T, V) float32
    return keras.Model(token_ids, logits, name="gpt2")
