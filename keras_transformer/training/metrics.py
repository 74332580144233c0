"""Accuracy over real (non-padding) tokens."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of real tokens whose arg-max prediction equals the label.

    `sample_weight` may be per token `(B, T)` or per sequence `(B,)`.

    Args:
        ignore_id: label id that is not counted (0, padding).
        name: metric name.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> metric = kt.training.MaskedAccuracy()
        >>> metric.update_state(np.array([[2, 1, 0]]), np.eye(3)[[[2, 2, 1]]])
        >>> float(metric.result())
        0.5
    """

    def __init__(self, ignore_id=0, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.ignore_id = ignore_id
        self.correct = self.add_variable((), initializer="zeros", name="correct")
        self.total = self.add_variable((), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        weights = ops.cast(ops.not_equal(y_true, self.ignore_id), "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            # One weight per sequence `(B,)` weighs all of its tokens, as in
            # Keras metrics: expand on the right, never broadcast over time.
            while len(sample_weight.shape) < len(weights.shape):
                sample_weight = ops.expand_dims(sample_weight, -1)
            weights = weights * sample_weight
        hits = ops.cast(ops.equal(predicted, y_true), "float32") * weights
        self.correct.assign_add(ops.sum(hits))
        self.total.assign_add(ops.sum(weights))

    def result(self):
        return self.correct / ops.maximum(self.total, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "ignore_id": self.ignore_id}
