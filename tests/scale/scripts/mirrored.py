"""Trains every family on one CPU and on two logical CPUs with MirroredStrategy.

Run by tests/scale/test_distribute.py in a subprocess: logical devices must be
configured before TensorFlow initializes its devices. Prints one JSON line.

BERT's boolean `padding_mask` is fed as int32 (the model casts it back):
under a strategy, Keras 3.15's `fit` averages the first batch over replicas
to build the model, and TensorFlow cannot add booleans.
"""

import json

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from tests.scale import common

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

result = {"replicas": strategy.num_replicas_in_sync}
for family in common.FAMILIES:
    single = common.compile_model(common.build(family))
    initial = single.get_weights()
    single_losses = common.train(single, family, int_masks=True)
    with strategy.scope():
        mirrored = common.compile_model(common.build(family))
    mirrored.set_weights(initial)
    mirrored_losses = common.train(mirrored, family, int_masks=True)
    result[family] = {
        "single": single_losses,
        "mirrored": mirrored_losses,
        "weight_difference": max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(single.get_weights(), mirrored.get_weights(), strict=True)
        ),
    }


# Clipped: kt.training.AdamW clips the summed gradient on both replicas, as
# on one device; Keras' own clipping (each replica's share) is the negative
# control. The global batch's unclipped gradient norm of every step of the
# one-device run is recorded before the step.
CLIP = 0.1
loss_fn = kt.training.MaskedSparseCategoricalCrossentropy()


class PerReplicaClipping(kt.training.AdamW):
    """Keras' own clipping: each replica clips its share, then they sum."""

    def _sums_before_clipping(self):
        return False


def gradients(model, x, y, replicas=1):
    """The replicas' gradients of `(x, y)` split in `replicas` equal parts,
    each of its part's loss divided by `replicas` (as under a strategy)."""
    parts = []
    for xs, ys in zip(np.split(x, replicas), np.split(y, replicas), strict=True):
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True)) / replicas
        grads = tape.gradient(loss, model.trainable_variables)
        parts.append([tf.convert_to_tensor(g).numpy() for g in grads])
    return parts


def norm(grads):
    return float(np.sqrt(sum(np.sum(np.square(g)) for g in grads)))


class NormBeforeStep(keras.callbacks.Callback):
    """Records the unclipped gradient norm of each batch before its step."""

    def __init__(self, x, y):
        super().__init__()
        self.x, self.y, self.norms = x, y, []

    def on_train_batch_begin(self, batch, logs=None):
        rows = slice(batch * common.BATCH, (batch + 1) * common.BATCH)
        self.norms.append(norm(gradients(self.model, self.x[rows], self.y[rows])[0]))


def clipped(model, optimizer=kt.training.AdamW, learning_rate=5e-3, weight_decay=0.01):
    model.compile(
        optimizer=optimizer(
            learning_rate, weight_decay=weight_decay, global_clipnorm=CLIP
        ),
        loss=loss_fn,
    )
    return model


def largest_difference(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b, strict=True))


x, y = common.data("gpt")
single = clipped(common.build("gpt"))
recorder = NormBeforeStep(x, y)
history = single.fit(x, y, batch_size=common.BATCH, epochs=common.EPOCHS,
                     shuffle=False, verbose=0, callbacks=[recorder])  # fmt: skip
with strategy.scope():
    mirrored = clipped(common.build("gpt"))
    per_replica = clipped(common.build("gpt"), PerReplicaClipping)
result["clipped"] = {
    "single": history.history["loss"],
    "mirrored": common.train(mirrored, "gpt"),
    "weight_difference": largest_difference(
        single.get_weights(), mirrored.get_weights()
    ),
    "unclipped_norms": recorder.norms,
}
common.train(per_replica, "gpt")
result["clipped_per_replica"] = {
    "weight_difference": largest_difference(
        single.get_weights(), per_replica.get_weights()
    )
}


# SGD through kt.training.AdamW's clipping (its update step replaced by
# SGD's): each step's update must be -lr * clip(g0 + g1), g0 and g1 the
# replicas' gradients computed here on one device, clipped in numpy; each
# replica clipping its share (the control) must not be.
class ClippedSGD(kt.training.AdamW):
    def update_step(self, gradient, variable, learning_rate):
        step = keras.ops.cast(gradient, variable.dtype) * keras.ops.cast(
            learning_rate, variable.dtype
        )
        self.assign_sub(variable, step)


class PerReplicaSGD(ClippedSGD, PerReplicaClipping):
    pass


def clip(grads):
    return [g * CLIP / max(norm(grads), CLIP) for g in grads]


sgd = {"replica_norms": [], "sum_norms": [], "differences": [], "controls": []}
oracle = common.build("gpt")
with strategy.scope():
    models = [
        clipped(common.build("gpt"), optimizer, learning_rate=0.05, weight_decay=0.0)
        for optimizer in (ClippedSGD, PerReplicaSGD)
    ]
for step in range(common.STEPS):
    rows = slice(step * common.BATCH, (step + 1) * common.BATCH)
    before = [v.numpy() for v in models[0].trainable_variables]
    oracle.set_weights(models[0].get_weights())
    parts = gradients(oracle, x[rows], y[rows], replicas=2)
    summed = [a + b for a, b in zip(*parts, strict=True)]
    expected = [w - 0.05 * g for w, g in zip(before, clip(summed), strict=True)]
    for model in models:
        model.set_weights(oracle.get_weights())
        model.train_on_batch(x[rows], y[rows])
    after = [[v.numpy() for v in m.trainable_variables] for m in models]
    sgd["replica_norms"].append([norm(part) for part in parts])
    sgd["sum_norms"].append(norm(summed))
    sgd["differences"].append(largest_difference(after[0], expected))
    sgd["controls"].append(largest_difference(after[1], expected))
result["sgd"] = sgd
try:
    kt.training.check_global_batch(7, strategy)
except ValueError as error:
    result["uneven_batch_error"] = str(error)
with strategy.scope():
    model = common.compile_model(common.build("gpt"))
x, y = common.data("gpt")
try:  # fit itself refuses it before any step
    model.fit(x[:7], y[:7], batch_size=7, verbose=0)
except ValueError as error:
    result["uneven_fit_error"] = str(error)
print(json.dumps(result))
