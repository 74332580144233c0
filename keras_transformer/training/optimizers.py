"""AdamW that decays weight matrices and never vectors (biases, LayerNorm),
and clips the gradient of the whole global batch under a distribution
strategy."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class AdamW(keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` that decides weight decay by the tensor's rank.

    Tensors of rank >= 2 (kernels, attention projections, embedding tables)
    are weight-decayed; tensors of rank < 2 (biases, LayerNorm scales and
    offsets) never are, whatever their layers are called. This is the rule
    of GPT-2/nanoGPT and BERT practice: it follows from the data, so a
    user's `LayerNormalization(name="ln")` is excluded as surely as ours.
    Embedding tables are matrices and are decayed, as in nanoGPT and the
    BERT reference (GPT-2 ties its output projection to one).

    Under a `tf.distribute` strategy with several replicas, `clipnorm`,
    `clipvalue` and `global_clipnorm` clip the gradient of the global batch
    (the replicas' sum), as on one device. Keras 3's optimizers clip each
    replica's share before summing them, so a clipped step differs from the
    one-device step.

    Args:
        learning_rate: float or schedule.
        weight_decay: decoupled weight decay.
        exclude_from_decay: further substrings of variable paths (e.g.
            `"gpt2/embeddings"`) or names not to decay; they survive saving.
        **kwargs: any other `keras.optimizers.AdamW` argument (`beta_2`,
            `clipnorm`, `global_clipnorm`, ...).

    Examples:
        >>> import keras
        >>> import keras_transformer as kt
        >>> optimizer = kt.training.AdamW(1e-3, weight_decay=0.1)
        >>> kernel = keras.Variable(keras.ops.ones((2, 2)), name="kernel")
        >>> gamma = keras.Variable(keras.ops.ones((2,)), name="ln_gamma")
        >>> optimizer.decays(kernel), optimizer.decays(gamma)
        (True, False)
    """

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay=0.01,
        exclude_from_decay=(),
        **kwargs,
    ):
        super().__init__(
            learning_rate=learning_rate, weight_decay=weight_decay, **kwargs
        )
        if isinstance(exclude_from_decay, str) or not all(
            isinstance(item, str) for item in exclude_from_decay
        ):
            raise ValueError(
                "`exclude_from_decay` must be a list of strings. "
                f"Received: exclude_from_decay={exclude_from_decay!r}"
            )
        self.exclude_from_decay = list(exclude_from_decay)

    def decays(self, variable):
        """Whether `variable` is weight-decayed (rank >= 2, not excluded)."""
        path = getattr(variable, "path", variable.name)
        return len(variable.shape) >= 2 and not any(
            item in path for item in self.exclude_from_decay
        )

    def build(self, var_list):
        # Before the optimizer's own build: Keras only takes exclusions then.
        self.exclude_from_weight_decay(
            var_list=[v for v in var_list if not self.decays(v)]
        )
        super().build(var_list)

    def get_config(self):
        return {**super().get_config(), "exclude_from_decay": self.exclude_from_decay}

    def _sums_before_clipping(self):
        """Whether this step sums the replicas' gradients before clipping
        them (a clipping setting, in a replica context of several
        replicas). It depends on nothing a replica sets, so every replica's
        thread answers the same."""
        context = tf.distribute.get_replica_context()
        clips = self.clipnorm or self.clipvalue or self.global_clipnorm
        return bool(clips) and context is not None and context.num_replicas_in_sync > 1

    def _clip_gradients(self, grads):
        if self._sums_before_clipping():
            # Sum the replicas' gradients first; the update step then takes
            # them as summed (`_all_reduce_sum_gradients` below).
            context = tf.distribute.get_replica_context()
            summed = iter(
                context.all_reduce(
                    tf.distribute.ReduceOp.SUM, [g for g in grads if g is not None]
                )
            )
            grads = [None if g is None else next(summed) for g in grads]
        return super()._clip_gradients(grads)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Called by every update step, right after `_clip_gradients`.
        if self._sums_before_clipping():
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)
