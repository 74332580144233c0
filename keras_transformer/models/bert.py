"""BERT: a bidirectional Transformer encoder, and its pretraining and task heads.

Shape legend: B batch, T sequence length, P masked positions, E hidden size.
"""

import keras
from keras import ops

from keras_transformer.layers import PositionalEmbedding, TransformerEncoderBlock
from keras_transformer.models.common import check_sizes, normal_initializer
from keras_transformer.models.presets import preset_arguments


def bert(
    vocabulary_size,
    num_layers=None,
    num_heads=None,
    hidden_dim=None,
    intermediate_dim=None,
    max_sequence_length=512,
    num_segments=2,
    dropout=0.1,
):
    """Builds a BERT encoder as a functional `keras.Model`.

    Token + segment + learned position embeddings, LayerNorm and dropout, then
    post-LN encoder blocks with GELU, and a pooled output
    `tanh(Dense(h[CLS]))` of the first token.

    Args:
        vocabulary_size: number of token ids (id 0 is `[PAD]`), or a preset
            name (`"bert_tiny"`, `"bert_base"`); other arguments then
            override the preset.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width.
        max_sequence_length: longest input.
        num_segments: number of segment ids (2: sentence A and B).
        dropout: dropout rate.

    Returns:
        A `keras.Model` with inputs `{"token_ids", "segment_ids",
        "padding_mask"}` (each `(B, T)`) and outputs
        `{"sequence_output": (B, T, E), "pooled_output": (B, E)}`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.bert(100, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16, max_sequence_length=6)
        >>> ids = np.array([[2, 5, 6, 3, 0, 0]])
        >>> out = model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...              "padding_mask": ids != 0})
        >>> tuple(out["pooled_output"].shape)
        (1, 8)
    """
    if isinstance(vocabulary_size, str):
        return bert(
            **preset_arguments(
                "bert",
                vocabulary_size,
                dict(
                    num_layers=num_layers,
                    num_heads=num_heads,
                    hidden_dim=hidden_dim,
                    intermediate_dim=intermediate_dim,
                    max_sequence_length=max_sequence_length,
                    dropout=dropout,
                    num_segments=num_segments,
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
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    padding_mask = keras.Input((None,), dtype="bool", name="padding_mask")

    embeddings = PositionalEmbedding(
        vocabulary_size,
        max_sequence_length,
        hidden_dim,
        position="learned",
        mask_zero=False,  # BERT takes an explicit padding_mask input
        embeddings_initializer=normal_initializer(),
        name="embeddings",
    )
    segment_embedding = keras.layers.Embedding(
        num_segments,
        hidden_dim,
        embeddings_initializer=normal_initializer(),
        name="segment_embedding",
    )
    x = keras.layers.Add()([embeddings(token_ids), segment_embedding(segment_ids)])
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embeddings_layer_norm")(x)
    x = keras.layers.Dropout(dropout, name="embeddings_dropout")(x)
    for i in range(num_layers):
        x = TransformerEncoderBlock(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            activation="gelu",
            layer_norm_epsilon=1e-12,
            kernel_initializer=normal_initializer(),
            name=f"transformer_layer_{i}",
        )(x, padding_mask=padding_mask)
    cls = x[:, 0, :]  # (B, E): the [CLS] token
    pooled = keras.layers.Dense(
        hidden_dim,
        activation="tanh",
        kernel_initializer=normal_initializer(),
        name="pooled_dense",
    )(cls)
    return keras.Model(
        {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": padding_mask,
        },
        {"sequence_output": x, "pooled_output": pooled},
        name="bert",
    )


def bert_masked_lm(backbone):
    """Adds the masked-LM pretraining head to a `bert` backbone.

    The head gathers the hidden states at `mask_positions`, transforms them
    (Dense + GELU + LayerNorm) and predicts tokens through the transposed
    token embedding (tied weights).

    Args:
        backbone: a model from `kt.models.bert`.

    Returns:
        A `keras.Model` taking the backbone's inputs plus `"mask_positions"`
        `(B, P)` int and returning float32 logits `(B, P, vocabulary_size)`.
    """
    # Built on the backbone's own graph (not by nesting it), so the tied
    # embedding layer is one layer in the saved model.
    inputs = dict(backbone.input)
    mask_positions = keras.Input((None,), dtype="int32", name="mask_positions")
    sequence = backbone.output["sequence_output"]
    hidden_dim = sequence.shape[-1]
    x = ops.take_along_axis(sequence, mask_positions[:, :, None], axis=1)  # (B, P, E)
    x = keras.layers.Dense(
        hidden_dim,
        activation="gelu",
        kernel_initializer=normal_initializer(),
        name="mlm_dense",
    )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="mlm_layer_norm")(x)
    logits = backbone.get_layer("embeddings")(x, reverse=True)
    return keras.Model(
        {**inputs, "mask_positions": mask_positions}, logits, name="bert_masked_lm"
    )


def bert_classifier(backbone, num_classes, dropout=0.1):
    """Adds a classification head on the pooled `[CLS]` output.

    Works for single sentences and for sentence pairs packed as
    `[CLS] A [SEP] B [SEP]` with `segment_ids` 0 for A and 1 for B.

    Returns:
        A `keras.Model` on the backbone's inputs returning float32 logits
        `(B, num_classes)`.
    """
    if (
        isinstance(num_classes, bool)
        or not isinstance(num_classes, int)
        or num_classes < 2
    ):
        raise ValueError(
            "`num_classes` must be an integer >= 2. "
            f"Received: num_classes={num_classes!r}"
        )
    inputs = dict(backbone.input)
    pooled = backbone.output["pooled_output"]
    x = keras.layers.Dropout(dropout, name="classifier_dropout")(pooled)
    logits = keras.layers.Dense(
        num_classes,
        kernel_initializer=normal_initializer(),
        dtype="float32",
        name="classifier_logits",
    )(x)
    return keras.Model(inputs, logits, name="bert_classifier")


def bert_feature_extractor(backbone):
    """Sentence embeddings from a `bert` backbone.

    Returns:
        A `keras.Model` on the backbone's inputs returning
        `{"pooled_output": (B, E), "mean_pooled_output": (B, E)}`; the mean
        is over real (non-padding) tokens only.
    """
    inputs = dict(backbone.input)
    outputs = backbone.output
    weights = ops.cast(inputs["padding_mask"], outputs["sequence_output"].dtype)[
        :, :, None
    ]
    total = ops.sum(outputs["sequence_output"] * weights, axis=1)
    mean = total / ops.maximum(ops.sum(weights, axis=1), 1.0)
    return keras.Model(
        inputs,
        {"pooled_output": outputs["pooled_output"], "mean_pooled_output": mean},
        name="bert_feature_extractor",
    )
