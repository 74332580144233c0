"""Schedules, masked losses and metrics, the optimizer set-up, and helpers for
distributed and resumable training."""

from keras_transformer.training.distribute import check_global_batch
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.multi_worker import (
    check_tf_config,
    is_chief,
    multi_worker_strategy,
)
from keras_transformer.training.optimizers import AdamW
from keras_transformer.training.resume import resumable_callbacks, resume_epoch
from keras_transformer.training.schedules import (
    TransformerSchedule,
    warmup_cosine_decay,
)

__all__ = [
    "AdamW",
    "MaskedAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "TransformerSchedule",
    "check_global_batch",
    "check_tf_config",
    "is_chief",
    "multi_worker_strategy",
    "resumable_callbacks",
    "resume_epoch",
    "warmup_cosine_decay",
]
