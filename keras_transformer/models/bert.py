"""BERT: a bidirectional Transformer encoder (its heads are in bert_heads.py).

Shape legend: B batch, T sequence length, E hidden size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers import PositionalEmbedding, TransformerEncoderBlock
from keras_transformer.models.base import (
    ModelMixin,
    check_sizes,
    constructor_arguments,
    model_factory,
)
from keras_transformer.models.initializers import normal_initializer


@keras.saving.register_keras_serializable(package="keras_transformer")
class BERT(ModelMixin, keras.Model):
    """A BERT encoder, built functionally.

    Token + segment + learned position embeddings, LayerNorm and dropout, then
    post-LN encoder blocks with GELU, and a pooled output
    `tanh(Dense(h[CLS]))` of the first token.

    Args:
        vocabulary_size: number of token ids (id 0 is `[PAD]`).
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width.
        max_sequence_length: longest input.
        num_segments: number of segment ids (2: sentence A and B).
        dropout: dropout rate.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: a dict `{"token_ids", "segment_ids", "padding_mask"}`, each
            `(B, T)`; `padding_mask` is True at real tokens.

    Returns:
        `{"sequence_output": (B, T, E), "pooled_output": (B, E)}`.

    Layers (attributes): `embeddings` (`kt.layers.PositionalEmbedding`),
    `segment_embedding`, `embeddings_layer_norm`, `embeddings_dropout`,
    `blocks` (a list of `kt.layers.TransformerEncoderBlock`), `pooled_dense`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.BERT(100, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16, max_sequence_length=6)
        >>> ids = np.array([[2, 5, 6, 3, 0, 0]])
        >>> out = model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...              "padding_mask": ids != 0})
        >>> tuple(out["pooled_output"].shape)
        (1, 8)

    References:
        Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers
        for Language Understanding", 2019.
    """

    family = "bert"

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=None,
        num_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        max_sequence_length=512,
        num_segments=2,
        dropout=0.1,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        check_sizes(config)
        validation.check_positive_int("num_segments", num_segments)
        # === Layers ===
        self.embeddings = PositionalEmbedding(
            vocabulary_size,
            max_sequence_length,
            hidden_dim,
            position="learned",
            mask_zero=False,  # BERT takes an explicit padding_mask input
            embeddings_initializer=normal_initializer(),
            name="embeddings",
        )
        self.segment_embedding = keras.layers.Embedding(
            num_segments,
            hidden_dim,
            embeddings_initializer=normal_initializer(),
            name="segment_embedding",
        )
        self.embeddings_add = keras.layers.Add(name="embeddings_add")
        self.embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=1e-12, name="embeddings_layer_norm"
        )
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, name="embeddings_dropout"
        )
        self.blocks = [
            TransformerEncoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation="gelu",
                layer_norm_epsilon=1e-12,
                kernel_initializer=normal_initializer(),
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.pooled_dense = keras.layers.Dense(
            hidden_dim,
            activation="tanh",
            kernel_initializer=normal_initializer(),
            name="pooled_dense",
        )
        # === Functional model ===
        inputs = {
            "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
            "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids"),
            "padding_mask": keras.Input((None,), dtype="bool", name="padding_mask"),
        }
        x = self.embeddings_add(
            [
                self.embeddings(inputs["token_ids"]),
                self.segment_embedding(inputs["segment_ids"]),
            ]
        )
        x = self.embeddings_dropout(self.embeddings_layer_norm(x))
        for block in self.blocks:
            x = block(x, padding_mask=inputs["padding_mask"])
        pooled = self.pooled_dense(x[:, 0, :])  # (B, E): the [CLS] token
        super().__init__(
            inputs,
            {"sequence_output": x, "pooled_output": pooled},
            **{"name": "bert", **kwargs},
        )
        self._set_config(**config)


bert = model_factory(
    BERT,
    "bert",
    "Builds a `kt.models.BERT` encoder.",
    'A `kt.models.BERT` with inputs `{"token_ids", "segment_ids", '
    '"padding_mask"}` (each `(B, T)`) and outputs `{"sequence_output": '
    '(B, T, E), "pooled_output": (B, E)}`.',
    """
    >>> import keras_transformer as kt
    >>> model = kt.models.bert(100, num_layers=1, num_heads=2, hidden_dim=8,
    ...                        intermediate_dim=16, max_sequence_length=6)
    >>> type(model).__name__
    'BERT'
    """,
)
__test__ = {"bert": bert}  # its example runs with the module's
