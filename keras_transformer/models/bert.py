"""BERT: a bidirectional Transformer encoder, and its pretraining and task heads.

Shape legend: B batch, T sequence length, P masked positions, E hidden size,
C classes.
"""

import keras
from keras import ops

from keras_transformer.layers import PositionalEmbedding, TransformerEncoderBlock
from keras_transformer.models.common import (
    ModelMixin,
    check_sizes,
    normal_initializer,
    preset_factory,
)


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
        config = dict(
            vocabulary_size=vocabulary_size,
            num_layers=num_layers,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            intermediate_dim=intermediate_dim,
            max_sequence_length=max_sequence_length,
            num_segments=num_segments,
            dropout=dropout,
        )
        check_sizes(config)
        if (
            isinstance(num_segments, bool)
            or not isinstance(num_segments, int)
            or num_segments < 1
        ):
            raise ValueError(
                "`num_segments` must be a positive integer. "
                f"Received: num_segments={num_segments!r}"
            )
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


class BERTHead(keras.Model):
    """Base of the heads: a model built on a `BERT` backbone's own graph.

    The head's graph starts from the backbone's inputs and outputs (the
    backbone is not nested as one layer), so its layers, such as the
    embedding the masked-LM head ties to, are the backbone's own. The head's
    own layers become attributes after the graph is built, so the weights
    keep the graph's order (that of 0.1's functional heads). Subclasses add
    their arguments to `get_config`.
    """

    def __init__(self, backbone, inputs, outputs, **kwargs):
        super().__init__(inputs, outputs, **kwargs)
        self.backbone = backbone

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.saving.serialize_keras_object(self.backbone),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


def check_backbone(backbone):
    if not isinstance(backbone, BERT):
        raise ValueError(
            f"`backbone` must be a kt.models.BERT. Received: backbone={backbone!r}"
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
class BERTMaskedLM(BERTHead):
    """The masked-LM pretraining head on a `BERT` backbone.

    The head gathers the hidden states at `mask_positions`, transforms them
    (Dense + GELU + LayerNorm) and predicts tokens through the transposed
    token embedding (tied weights).

    Args:
        backbone: a `kt.models.BERT`.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: the backbone's inputs plus `"mask_positions"` `(B, P)` int.

    Returns:
        float32 logits `(B, P, vocabulary_size)`.

    Layers (attributes): `backbone`, `mlm_dense`, `mlm_layer_norm`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> backbone = kt.models.BERT(30, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, max_sequence_length=6)
        >>> model = kt.models.BERTMaskedLM(backbone)
        >>> ids = np.array([[2, 5, 4, 3, 0, 0]])
        >>> logits = model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...                 "padding_mask": ids != 0,
        ...                 "mask_positions": np.array([[2]])})
        >>> tuple(logits.shape)
        (1, 1, 30)
    """

    def __init__(self, backbone, **kwargs):
        check_backbone(backbone)
        mlm_dense = keras.layers.Dense(
            backbone.hidden_dim,
            activation="gelu",
            kernel_initializer=normal_initializer(),
            name="mlm_dense",
        )
        mlm_layer_norm = keras.layers.LayerNormalization(
            epsilon=1e-12, name="mlm_layer_norm"
        )
        inputs = {
            **backbone.input,
            "mask_positions": keras.Input(
                (None,), dtype="int32", name="mask_positions"
            ),
        }
        sequence = backbone.output["sequence_output"]
        positions = inputs["mask_positions"][:, :, None]
        x = ops.take_along_axis(sequence, positions, axis=1)  # (B, P, E)
        x = mlm_layer_norm(mlm_dense(x))
        outputs = backbone.embeddings(x, reverse=True)  # (B, P, V), tied
        super().__init__(
            backbone, inputs, outputs, **{"name": "bert_masked_lm", **kwargs}
        )
        self.mlm_dense = mlm_dense
        self.mlm_layer_norm = mlm_layer_norm


@keras.saving.register_keras_serializable(package="keras_transformer")
class BERTClassifier(BERTHead):
    """A classification head on the pooled `[CLS]` output of a `BERT`.

    Works for single sentences and for sentence pairs packed as
    `[CLS] A [SEP] B [SEP]` with `segment_ids` 0 for A and 1 for B.

    Args:
        backbone: a `kt.models.BERT`.
        num_classes: number of classes C (>= 2).
        dropout: dropout rate before the output layer.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: the backbone's inputs.

    Returns:
        float32 logits `(B, C)`.

    Layers (attributes): `backbone`, `classifier_dropout`,
    `classifier_logits`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> backbone = kt.models.BERT(30, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, max_sequence_length=6)
        >>> model = kt.models.BERTClassifier(backbone, num_classes=3)
        >>> ids = np.array([[2, 5, 4, 3, 0, 0]])
        >>> logits = model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...                 "padding_mask": ids != 0})
        >>> tuple(logits.shape)
        (1, 3)
    """

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        if (
            isinstance(num_classes, bool)
            or not isinstance(num_classes, int)
            or num_classes < 2
        ):
            raise ValueError(
                "`num_classes` must be an integer >= 2. "
                f"Received: num_classes={num_classes!r}"
            )
        check_backbone(backbone)
        classifier_dropout = keras.layers.Dropout(dropout, name="classifier_dropout")
        classifier_logits = keras.layers.Dense(
            num_classes,
            kernel_initializer=normal_initializer(),
            dtype="float32",
            name="classifier_logits",
        )
        pooled = backbone.output["pooled_output"]
        outputs = classifier_logits(classifier_dropout(pooled))
        super().__init__(
            backbone,
            dict(backbone.input),
            outputs,
            **{"name": "bert_classifier", **kwargs},
        )
        self.classifier_dropout = classifier_dropout
        self.classifier_logits = classifier_logits
        self.num_classes = num_classes
        self.dropout = dropout

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "dropout": self.dropout,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class BERTFeatureExtractor(BERTHead):
    """Sentence embeddings from a `BERT` backbone.

    Args:
        backbone: a `kt.models.BERT`.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: the backbone's inputs.

    Returns:
        `{"pooled_output": (B, E), "mean_pooled_output": (B, E)}`; the mean
        is over real (non-padding) tokens only.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> backbone = kt.models.BERT(30, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, max_sequence_length=6)
        >>> model = kt.models.BERTFeatureExtractor(backbone)
        >>> ids = np.array([[2, 5, 4, 3, 0, 0]])
        >>> out = model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...              "padding_mask": ids != 0})
        >>> tuple(out["mean_pooled_output"].shape)
        (1, 8)
    """

    def __init__(self, backbone, **kwargs):
        check_backbone(backbone)
        inputs = dict(backbone.input)
        sequence = backbone.output["sequence_output"]
        weights = ops.cast(inputs["padding_mask"], sequence.dtype)[:, :, None]
        total = ops.sum(sequence * weights, axis=1)
        outputs = {
            "pooled_output": backbone.output["pooled_output"],
            "mean_pooled_output": total / ops.maximum(ops.sum(weights, axis=1), 1.0),
        }
        super().__init__(
            backbone, inputs, outputs, **{"name": "bert_feature_extractor", **kwargs}
        )


@preset_factory(BERT)
def bert(
    vocabulary_size,
    *,
    num_layers=None,
    num_heads=None,
    hidden_dim=None,
    intermediate_dim=None,
    max_sequence_length=512,
    num_segments=2,
    dropout=0.1,
):
    """Builds a `kt.models.BERT` encoder.

    Args:
        vocabulary_size: number of token ids (id 0 is `[PAD]`), or a preset
            name (`"bert_tiny"`, `"bert_base"`); the keyword arguments given
            then override exactly those preset values.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width.
        max_sequence_length: longest input.
        num_segments: number of segment ids (2: sentence A and B).
        dropout: dropout rate.

    Returns:
        A `kt.models.BERT` with inputs `{"token_ids", "segment_ids",
        "padding_mask"}` (each `(B, T)`) and outputs
        `{"sequence_output": (B, T, E), "pooled_output": (B, E)}`.

    Examples:
        >>> import keras_transformer as kt
        >>> model = kt.models.bert(100, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16, max_sequence_length=6)
        >>> isinstance(model, kt.models.BERT)
        True
    """
    return BERT(**locals())  # exactly the arguments of this signature


def bert_masked_lm(backbone):
    """Adds the masked-LM pretraining head: `kt.models.BERTMaskedLM(backbone)`."""
    return BERTMaskedLM(backbone)


def bert_classifier(backbone, num_classes, dropout=0.1):
    """Adds a classification head:
    `kt.models.BERTClassifier(backbone, num_classes, dropout)`."""
    return BERTClassifier(backbone, num_classes, dropout=dropout)


def bert_feature_extractor(backbone):
    """Sentence embeddings: `kt.models.BERTFeatureExtractor(backbone)`."""
    return BERTFeatureExtractor(backbone)
