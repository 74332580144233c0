"""Work-arounds of Keras and TensorFlow behaviour, each naming what it works
around and the version it was checked against.

Every use of a Keras or TensorFlow private name (an `_attribute`, a
`keras.src` module) goes through a function here, checked on Keras 3.15.1
and TensorFlow 2.21.0; `tests/test_compat.py` probes each one and fails,
naming it, when an upgrade moves it, and fails if a private name is used
anywhere else in the package.
"""

import contextlib
import gc


@contextlib.contextmanager
def collect_once():
    """Python's garbage collection run once on leaving, not once per
    variable deleted inside.

    Keras' `Layer.__delattr__` runs `gc.collect()` after each variable it
    removes (keras/src/layers/layer.py, checked on Keras 3.15.1): three per
    projection that `quantize` replaces, two per layer that `merge_lora`
    folds. With a model's TensorFlow objects in memory a collection takes
    0.3 to 0.6 s, so `quantize("int8")` of a 135M-parameter model took six
    minutes, nearly all of it collecting.
    """
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
    gc.collect()


def kernel_variable(layer):
    """The kernel variable of a built `Dense` or `EinsumDense` as stored:
    int8 values once quantized, without a LoRA update.

    Keras' public `kernel` adds the LoRA update (`lora_kernel_a @
    lora_kernel_b`) and, quantized, is the same int8 variable only in
    Keras' layout; the variable itself is the private `_kernel`
    (keras/src/layers/core/dense.py and einsum_dense.py, Keras 3.15.1).
    """
    return layer._kernel


def replace_kernel_variable(layer, **weight):
    """Deletes the kernel variable of a built `Dense` or `EinsumDense` and
    gives it `layer.add_weight(name="kernel", **weight)` instead, which it
    returns. Call it inside `unlocked(layer)`.

    Keras' public `kernel` is a read-only property; its own `quantize`
    replaces the private `_kernel` this way, deleting it first so that
    `Layer.__delattr__` untracks it (keras/src/layers/core/dense.py and
    einsum_dense.py, Keras 3.15.1).
    """
    del layer._kernel
    layer._kernel = layer.add_weight(name="kernel", **weight)
    return layer._kernel


@contextlib.contextmanager
def unlocked(layer):
    """`layer`'s state tracker unlocked inside, locked again on leaving.

    A built Keras layer locks its tracker (`Layer._lock_state`,
    keras/src/layers/layer.py, Keras 3.15.1), and Keras' own `enable_lora`
    unlocks it around adding the LoRA matrices (keras/src/layers/core/
    dense.py); `merge_lora` unlocks it the same way around removing them.
    (On Keras 3.15.1 deleting a variable also unlocks on its own,
    `Layer._untrack_variable`.) There is no public way to unlock.
    """
    layer._tracker.unlock()
    try:
        yield
    finally:
        layer._tracker.lock()


def merged_lora_kernel(layer):
    """`(values, scale, zero)`: the kernel with its LoRA update merged, int8
    values and their scale if the layer is quantized (quantized again after
    merging), else the float kernel and None.

    Keras merges this way only to save a layer
    (`Dense._get_kernel_with_merged_lora`, keras/src/layers/core/dense.py
    and einsum_dense.py, Keras 3.15.1); it has no public merge.
    """
    return layer._get_kernel_with_merged_lora()


def flatten_layers(model):
    """`model` and every layer nested in it, each once, breadth first.

    `model.layers` holds only the direct children; Keras' walk over all of
    them is the private `Layer._flatten_layers` (keras/src/layers/layer.py,
    Keras 3.15.1).
    """
    return model._flatten_layers()


def keras_mask(x):
    """The Keras mask attached to `x` (e.g. by `mask_zero`), or None.

    Keras 3 keeps a propagated mask on the tensor as `_keras_mask`
    (keras/src/backend/common/masking.py, Keras 3.15.1), which
    `keras.layers.MultiHeadAttention` reads with `get_keras_mask`, a
    function Keras does not export.
    """
    return getattr(x, "_keras_mask", None)


def model_strategy(model):
    """The `tf.distribute` strategy `model` was created under, None if none.

    Keras' public `distribute_strategy` falls back to the strategy current
    where it is read; the model's own is the TensorFlow trainer's private
    `_distribute_strategy` (keras/src/backend/tensorflow/trainer.py, Keras
    3.15.1), which Keras' trainer reads to decide whether to distribute.
    """
    return model._distribute_strategy


def maybe_symbolic_build(model, iterator):
    """Keras' TensorFlow trainer's first step of `fit` and `evaluate`:
    builds `model` from the first batch of `iterator`.

    Run on a stand-in model and strategy by
    `kt.training.multi_worker.fit_needs_workaround` to see whether it still
    averages the replicas' batches, which fails with more than one worker
    (keras-team/keras#20585, open at Keras 3.15.1):
    `TensorFlowTrainer._maybe_symbolic_build`,
    keras/src/backend/tensorflow/trainer.py. Raises ImportError under
    another backend.
    """
    from keras.src.backend.tensorflow import trainer

    trainer.TensorFlowTrainer._maybe_symbolic_build(model, iterator=iterator)


def reduce_per_replica(values, strategy, reduction):
    """Keras' TensorFlow trainer's reduction of each step's logs across
    replicas (`reduce_per_replica`, keras/src/backend/tensorflow/trainer.py,
    Keras 3.15.1), which reduces a scalar log along axis 0 under a
    multi-worker strategy (keras-team/keras#20585). Raises ImportError under
    another backend.
    """
    from keras.src.backend.tensorflow import trainer

    return trainer.reduce_per_replica(values, strategy, reduction)


def strategy_in_multi_worker_mode(strategy):
    """Whether a `tf.distribute` strategy runs over more than one worker.

    TensorFlow says so only through the private
    `CollectiveAllReduceExtended._in_multi_worker_mode`
    (tensorflow/python/distribute/collective_all_reduce_strategy.py,
    TensorFlow 2.21.0), which Keras' trainer reads too.
    """
    return strategy.extended._in_multi_worker_mode()
