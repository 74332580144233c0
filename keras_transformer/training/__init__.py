"""Schedules, masked losses and metrics, and the optimizer set-up for training."""

from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.optimizers import AdamW
from keras_transformer.training.schedules import (
    TransformerSchedule,
    warmup_cosine_decay,
)

__all__ = [
    "AdamW",
    "MaskedAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "TransformerSchedule",
    "warmup_cosine_decay",
]
