"""`FitMixin`: the `fit` our models and tasks share."""

from keras_transformer._compat import model_strategy
from keras_transformer.training import distribute, multi_worker


class FitMixin:
    """`fit` that builds the optimizer's variables before the first step,
    checks the global batch, and works under MultiWorkerMirroredStrategy.

    Without a distribution strategy, Keras builds the optimizer inside the
    first traced training step; TensorFlow then traces that step twice,
    because the first trace creates variables. Building it first, as Keras
    itself does under a strategy, makes it one trace: about 6 of the 20
    seconds before the first step of the 4-layer character GPT on a 2-core
    CPU (`docs/benchmarks.md`). The variables and updates are the same.

    Under a `tf.distribute.MultiWorkerMirroredStrategy` with two or more
    workers, Keras 3's own `fit` fails (keras-team/keras#20585); the
    workaround lives here, in `_maybe_symbolic_build`, `train_step` and
    `test_step`, and is on only while `multi_worker.fit_needs_workaround()`
    finds the bug in the installed Keras (see `kt.training.multi_worker`).
    """

    def fit(self, *args, **kwargs):
        batch_size = kwargs.get("batch_size", args[2] if len(args) > 2 else None)
        if batch_size is not None:
            distribute.check_global_batch(batch_size, self.distribute_strategy)
        optimizer = getattr(self, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)
        return super().fit(*args, **kwargs)

    def _multi_worker_workaround(self):
        strategy = model_strategy(self)
        return (
            strategy is not None
            and multi_worker.in_multi_worker_mode(strategy)
            and multi_worker.fit_needs_workaround()
        )

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None and self._multi_worker_workaround():
            for _, _, batches in iterator:
                data_batch = multi_worker.first_replica_batch(
                    next(batches), model_strategy(self)
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def train_step(self, data):
        logs = super().train_step(data)
        if self._multi_worker_workaround():
            return multi_worker.logs_as_vectors(logs)
        return logs

    def test_step(self, data):
        logs = super().test_step(data)
        if self._multi_worker_workaround():
            return multi_worker.logs_as_vectors(logs)
        return logs
