"""Data-parallel training with `tf.distribute` strategies.

A strategy is only read through `num_replicas_in_sync`, so this module does
not import TensorFlow.
"""

from keras_transformer import _validation as validation


def check_global_batch(global_batch_size, strategy):
    """Checks that a global batch splits evenly over a strategy's replicas.

    Under a `tf.distribute` strategy, the batch size given to `model.fit` (or
    used to batch its dataset) is the *global* batch: each step, every one of
    the N replicas runs `global_batch_size / N` examples and their gradients
    are summed. A global batch that N does not divide fails inside Keras 3
    (`MirroredStrategy`: "Inputs to operation AddN ... must have the same size
    and shape") or trains replicas on unequal shares; this check refuses it
    first, with both numbers.

    Args:
        global_batch_size: the batch size of one training step, over all
            replicas.
        strategy: a `tf.distribute.Strategy` (anything with
            `num_replicas_in_sync`), or the number of replicas.

    Returns:
        The per-replica batch size, `global_batch_size // replicas`.

    Examples:
        >>> import tensorflow as tf
        >>> import keras_transformer as kt
        >>> kt.training.check_global_batch(64, tf.distribute.get_strategy())
        64
        >>> kt.training.check_global_batch(64, 8)
        8
        >>> kt.training.check_global_batch(7, 2)
        Traceback (most recent call last):
        ...
        ValueError: `global_batch_size` must be divisible by the number of replicas. Received: global_batch_size=7, num_replicas_in_sync=2
    """  # noqa: E501
    replicas = getattr(strategy, "num_replicas_in_sync", strategy)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(
            "`strategy` must be a tf.distribute.Strategy or a positive number "
            f"of replicas. Received: strategy={strategy!r}"
        )
    validation.check_positive_int("global_batch_size", global_batch_size)
    if global_batch_size % replicas:
        raise ValueError(
            "`global_batch_size` must be divisible by the number of replicas. "
            f"Received: global_batch_size={global_batch_size}, "
            f"num_replicas_in_sync={replicas}"
        )
    return global_batch_size // replicas
