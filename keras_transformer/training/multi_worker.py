"""`model.fit` under `tf.distribute.MultiWorkerMirroredStrategy`.

Keras 3's TensorFlow trainer fails under this strategy as soon as there is
more than one worker (keras-team/keras#20585, open at Keras 3.15):

1. `fit` builds the model's metrics from its first batch by averaging the
   replicas' batches: `strategy.reduce("MEAN", batch, axis=None)`, which a
   multi-worker strategy cannot do on a nested batch ("Attempt to convert a
   value (PerReplica: ...)").
2. Each step's logs are reduced with `strategy.reduce("MEAN", value,
   axis=0)`; a loss is a scalar, which has no axis 0 ("Invalid reduction
   dimension 0 for input with 0 dimensions").

Our models and tasks (`FitMixin`) work around both in their own methods,
never by patching Keras: they build from one replica's shard of the first
batch, and under a multi-worker strategy their `train_step`/`test_step`
return each log as a vector of one value, whose mean along axis 0 over all
replicas is the mean Keras means to take.

The workaround switches itself on by behaviour, not by version:
`fit_needs_workaround()` runs Keras' own two functions once, on a stand-in
strategy that records what it is asked to reduce (no cluster, no collective
op). A Keras that no longer reduces the batch, or no longer reduces a scalar
along axis 0, gets no workaround.
"""

import contextlib
import functools
import json
import logging
import os

import tensorflow as tf
from keras import tree

from keras_transformer._compat import (
    maybe_symbolic_build,
    reduce_per_replica,
    strategy_in_multi_worker_mode,
)


class _ProbeExtended:
    def _in_multi_worker_mode(self):
        return True


class _ProbeStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """Looks like a multi-worker strategy to Keras and records its reduce
    calls; it has no cluster and never runs a collective op."""

    def __init__(self):  # deliberately not the strategy's: no cluster
        self.reductions = []

    @property
    def extended(self):
        return _ProbeExtended()

    def scope(self):
        return contextlib.nullcontext()

    def reduce(self, reduce_op, value, axis=None):
        self.reductions.append((value, axis))
        return value


class _ProbeShard(tf.distribute.DistributedValues):
    """A stand-in for a per-replica tensor of a distributed batch."""


class _ProbeModel:
    def __init__(self, strategy):
        self._distribute_strategy = strategy
        self.distribute_strategy = strategy

    def _symbolic_build(self, data_batch=None):
        pass


@functools.cache
def fit_needs_workaround():
    """Whether this Keras still has the two multi-worker `fit` bugs.

    Runs Keras' `_maybe_symbolic_build` and `reduce_per_replica` against a
    stand-in strategy: the first bug is present if building reduces the
    batch, the second if a scalar log is reduced along axis 0. If Keras'
    trainer no longer has these functions, it has changed: no workaround
    (and a warning).

    Examples:
        >>> from keras_transformer.training import multi_worker
        >>> multi_worker.fit_needs_workaround()  # Keras 3.15
        True
    """
    try:
        builds = _ProbeStrategy()
        batch = (_ProbeShard(), _ProbeShard())
        maybe_symbolic_build(_ProbeModel(builds), iterator=[(0, 0, iter([batch]))])
        logs = _ProbeStrategy()
        reduce_per_replica({"loss": tf.constant(0.0)}, logs, "auto")
    except ImportError:  # not the TensorFlow backend
        return False
    except (AttributeError, TypeError, ValueError) as error:
        logging.warning(
            "Keras' TensorFlow trainer changed (%s); the multi-worker `fit` "
            "workaround of keras_transformer is off.",
            error,
        )
        return False
    reduces_batch = bool(builds.reductions)
    reduces_scalar_on_axis_0 = any(
        axis == 0 and len(value.shape) == 0 for value, axis in logs.reductions
    )
    return reduces_batch or reduces_scalar_on_axis_0


def in_multi_worker_mode(strategy):
    """Whether `strategy` is a MultiWorkerMirroredStrategy over 2+ workers."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and bool(
        strategy_in_multi_worker_mode(strategy)
    )


def first_replica_batch(batch, strategy):
    """One replica's shard of a distributed batch (what the model is built
    from: only its shapes and dtypes matter)."""

    def local(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    return tree.map_structure(local, batch)


def logs_as_vectors(logs):
    """Each scalar log as a vector of one value: the replicas' mean along
    axis 0 is then the mean over replicas."""
    return tree.map_structure(
        lambda value: tf.reshape(value, [1]) if len(value.shape) == 0 else value,
        logs,
    )


def check_tf_config(value=None):
    """Reads and checks a `TF_CONFIG` (the cluster description every worker
    of a MultiWorkerMirroredStrategy gets in its environment).

    Args:
        value: the JSON text; None reads the `TF_CONFIG` environment
            variable.

    Returns:
        `(workers, index)`: the `host:port` of every worker, and this
        worker's index among them (0 is the chief: it writes the
        checkpoints).

    Raises:
        ValueError: `TF_CONFIG` is unset, not JSON, has no
            `cluster.worker` list of `host:port` strings, or its `task` is
            not `{"type": "worker", "index": i}` with `i` in range.

    Examples:
        >>> import json
        >>> import keras_transformer as kt
        >>> kt.training.check_tf_config(json.dumps({
        ...     "cluster": {"worker": ["host1:2222", "host2:2222"]},
        ...     "task": {"type": "worker", "index": 1},
        ... }))
        (['host1:2222', 'host2:2222'], 1)
    """
    if value is None:
        value = os.environ.get("TF_CONFIG")
        if not value:
            raise ValueError(
                "Multi-worker training needs the `TF_CONFIG` environment "
                "variable: the cluster's workers and this worker's index. "
                "Received: TF_CONFIG unset"
            )
    try:
        config = json.loads(value)
    except (TypeError, json.JSONDecodeError):
        config = None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    workers = cluster.get("worker") if isinstance(cluster, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    index = task.get("index") if isinstance(task, dict) else None
    if (
        not isinstance(workers, list)
        or not workers
        or not all(_is_address(worker) for worker in workers)
        or not isinstance(task, dict)
        or task.get("type") != "worker"
        or isinstance(index, bool)
        or not isinstance(index, int)
        or not 0 <= index < len(workers)
    ):
        raise ValueError(
            '`TF_CONFIG` must be JSON like {"cluster": {"worker": '
            '["host1:port", "host2:port"]}, "task": {"type": "worker", '
            f'"index": 0}}}} with index < the number of workers. Received: '
            f"TF_CONFIG={value!r}"
        )
    return workers, index


def _is_address(worker):
    if not isinstance(worker, str):
        return False
    host, _, port = worker.rpartition(":")
    return bool(host) and port.isdigit()


def multi_worker_strategy():
    """A `tf.distribute.MultiWorkerMirroredStrategy` over the cluster that
    `TF_CONFIG` describes, after checking it (`check_tf_config`).

    Every worker runs the same program; each builds and compiles its model
    under the returned strategy's `scope()` and calls `fit` with the same
    global batch. The call blocks until all workers have started.

    Raises:
        ValueError: `TF_CONFIG` is unset or malformed.
    """
    check_tf_config()
    return tf.distribute.MultiWorkerMirroredStrategy()


def worker_index(strategy=None):
    """This process's index among its strategy's workers (0 without a
    multi-worker strategy)."""
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not in_multi_worker_mode(strategy):
        return 0
    return int(resolver.task_id or 0)


def is_chief(strategy=None):
    """Whether this process is worker 0 of its strategy's cluster (or the
    only process): the one that writes checkpoints and exports."""
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not in_multi_worker_mode(strategy):
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0
    )
