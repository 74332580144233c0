"""BERT's heads: masked-LM pretraining, classification, sentence embeddings.

Each is built on a `kt.models.BERT` backbone's own graph.

Shape legend: B batch, T sequence length, P masked positions, E hidden size,
C classes.
"""

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.models.bert import BERT
from keras_transformer.models.initializers import (
    global_dtype_policy,
    normal_initializer,
)
from keras_transformer.models.lora import LoRAMixin
from keras_transformer.models.quantize import QuantizeMixin
from keras_transformer.training.fit import FitMixin


class BERTHead(LoRAMixin, QuantizeMixin, FitMixin, keras.Model):
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
        self._built_policy = keras.config.dtype_policy().name

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype_policy": self._built_policy,
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            **self._quantization_config(),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        mode = config.pop("quantization_mode", None)
        block_size = config.pop("quantization_block_size", None)
        float_layers = config.pop("quantization_float_layers", ())
        with global_dtype_policy(config.pop("dtype_policy", None)):
            config["backbone"] = keras.saving.deserialize_keras_object(
                config["backbone"]
            )
            return cls(**config).requantize(mode, block_size, float_layers)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLMBias(keras.layers.Layer):
    """Adds one learned bias per token to the masked-LM logits `(..., V)`, as
    BERT's output layer does (its weight is the tied token embedding)."""

    def build(self, inputs_shape):
        self.bias = self.add_weight(
            shape=(inputs_shape[-1],), initializer="zeros", name="bias"
        )

    def call(self, inputs):
        return inputs + ops.cast(self.bias, inputs.dtype)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


def check_backbone(backbone):
    validation.check_class("backbone", backbone, [BERT])


@keras.saving.register_keras_serializable(package="keras_transformer")
class BERTMaskedLM(BERTHead):
    """The masked-LM pretraining head on a `BERT` backbone.

    The head gathers the hidden states at `mask_positions`, transforms them
    (Dense + GELU + LayerNorm) and predicts tokens through the transposed
    token embedding (tied weights) plus a bias per token, as BERT does.

    Args:
        backbone: a `kt.models.BERT`.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: the backbone's inputs plus `"mask_positions"` `(B, P)` int.

    Returns:
        float32 logits `(B, P, vocabulary_size)`.

    Layers (attributes): `backbone`, `mlm_dense`, `mlm_layer_norm`,
    `mlm_bias`.

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
        mlm_bias = MaskedLMBias(dtype="float32", name="mlm_bias")
        outputs = mlm_bias(backbone.embeddings(x, reverse=True))  # (B, P, V), tied
        super().__init__(
            backbone, inputs, outputs, **{"name": "bert_masked_lm", **kwargs}
        )
        self.mlm_dense = mlm_dense
        self.mlm_layer_norm = mlm_layer_norm
        self.mlm_bias = mlm_bias


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
