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

    Examples:
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
                    max_sequence_length=max_sequence_length,
                    dropout=dropout,
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
    blocks = [
        TransformerDecoderBlock(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            activation="gelu",
            normalize_first=True,
            layer_norm_epsilon=1e-5,
            cross_attention=False,
            kernel_initializer=normal_initializer(),
            name=f"transformer_layer_{i}",
        )
        for i in range(num_layers)
    ]
    layers = {
        "embeddings": embeddings,
        "embeddings_dropout": keras.layers.Dropout(dropout, name="embeddings_dropout"),
        "blocks": blocks,
        "final_layer_norm": keras.layers.LayerNormalization(
            epsilon=1e-5, name="final_layer_norm"
        ),
    }
    logits, _ = gpt2_forward(layers, token_ids)
    return keras.Model(token_ids, logits, name="gpt2")


def gpt2_layers(model):
    """The named layers of a `gpt2` model (also one loaded from a file)."""
    num_layers = sum(
        layer.name.startswith("transformer_layer_") for layer in model.layers
    )
    return {
        "embeddings": model.get_layer("embeddings"),
        "embeddings_dropout": model.get_layer("embeddings_dropout"),
        "blocks": [
            model.get_layer(f"transformer_layer_{i}") for i in range(num_layers)
        ],
        "final_layer_norm": model.get_layer("final_layer_norm"),
    }


def gpt2_forward(layers, token_ids, caches=None, index=None):
    """The GPT-2 forward pass, written once: it builds the functional model
    and, with `caches`, runs one cached decoding step on the same layers.

    Args:
        layers: the dict of `gpt2_layers(model)`.
        token_ids: `(B, T)`.
        caches: None, or one `(B, 2, S_max, H, D)` cache per block.
        index: with `caches`, the position of `token_ids[:, 0]`.

    Returns:
        `(logits, caches)`: float32 logits `(B, T, V)` and the updated caches
        (None without `caches`).
    """
    start = 0 if index is None else index
    x = layers["embeddings"](token_ids, start_index=start)  # (B, T, E)
    x = layers["embeddings_dropout"](x)
    updated = []
    for i, block in enumerate(layers["blocks"]):
        if caches is None:
            x = block(x)
        else:
            x, cache = block(
                x,
                self_attention_cache=caches[i],
                self_attention_cache_update_index=start,
            )
            updated.append(cache)
    x = layers["final_layer_norm"](x)
    logits = layers["embeddings"](x, reverse=True)  # (B, T, V), tied weights
    return logits, (updated if caches is not None else None)
