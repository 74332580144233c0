"""Learning-rate schedules."""

import keras
from keras import ops

from keras_transformer import _validation as validation


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The warm-up schedule of "Attention Is All You Need".

    `lr(step) = hidden_dim^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)`,
    with `step` counted from 1: linear warm-up, then inverse square root decay.

    Args:
        hidden_dim: the model width `d_model`.
        warmup_steps: steps of linear warm-up (4000 in the paper).

    Examples:
        >>> import keras_transformer as kt
        >>> schedule = kt.training.TransformerSchedule(512, warmup_steps=4000)
        >>> round(float(schedule(3999)), 6)  # the peak, at step 4000
        0.000699
    """

    def __init__(self, hidden_dim, warmup_steps=4000):
        validation.check_positive_int("hidden_dim", hidden_dim)
        validation.check_positive_int("warmup_steps", warmup_steps)
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        decay = ops.rsqrt(step)
        warmup = step * (float(self.warmup_steps) ** -1.5)
        return (float(self.hidden_dim) ** -0.5) * ops.minimum(decay, warmup)

    def get_config(self):
        return {"hidden_dim": self.hidden_dim, "warmup_steps": self.warmup_steps}


def warmup_cosine_decay(
    peak_learning_rate, warmup_steps, total_steps, final_learning_rate=0.0
):
    """Linear warm-up to `peak_learning_rate`, then cosine decay to
    `final_learning_rate` at `total_steps` (the nanoGPT schedule).

    Returns a (serializable) `keras.optimizers.schedules.CosineDecay`.

    Examples:
        >>> import keras_transformer as kt
        >>> schedule = kt.training.warmup_cosine_decay(1e-3, 100, 2000, 1e-4)
        >>> round(float(schedule(100)), 6), round(float(schedule(2000)), 6)
        (0.001, 0.0001)
    """
    validation.check_positive_int("total_steps", total_steps)
    if (
        isinstance(warmup_steps, bool)
        or not isinstance(warmup_steps, int)
        or not (0 <= warmup_steps < total_steps)
    ):
        raise ValueError(
            "`warmup_steps` must be an integer in [0, total_steps). "
            f"Received: warmup_steps={warmup_steps!r}, total_steps={total_steps}"
        )
    if peak_learning_rate <= 0:
        raise ValueError(
            "`peak_learning_rate` must be > 0. "
            f"Received: peak_learning_rate={peak_learning_rate!r}"
        )
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup_steps else peak_learning_rate,
        decay_steps=total_steps - warmup_steps,
        alpha=final_learning_rate / peak_learning_rate,
        warmup_target=peak_learning_rate if warmup_steps else None,
        warmup_steps=warmup_steps,
    )
