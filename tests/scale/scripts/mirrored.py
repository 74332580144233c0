"""Trains every family on one CPU and on two logical CPUs with MirroredStrategy.

Run by tests/scale/test_distribute.py in a subprocess: logical devices must be
configured before TensorFlow initializes its devices. Prints one JSON line.

BERT's boolean `padding_mask` is fed as int32 (the model casts it back):
under a strategy, Keras 3.15's `fit` averages the first batch over replicas
to build the model, and TensorFlow cannot add booleans.
"""

import json

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


# Clipped (every step's gradient norm is over 0.1): kt.training.AdamW clips
# the summed gradient on both replicas, as on one device.
def clipped(model):
    model.compile(
        optimizer=kt.training.AdamW(5e-3, weight_decay=0.01, global_clipnorm=0.1),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    return model


single = clipped(common.build("gpt"))
with strategy.scope():
    mirrored = clipped(common.build("gpt"))
result["clipped"] = {
    "single": common.train(single, "gpt"),
    "mirrored": common.train(mirrored, "gpt"),
    "weight_difference": max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(single.get_weights(), mirrored.get_weights(), strict=True)
    ),
}
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
