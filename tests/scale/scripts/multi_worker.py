"""One worker of a two-worker MultiWorkerMirroredStrategy run of a tiny GPT,
for tests/scale/test_distribute.py; the cluster comes from TF_CONFIG.

    python multi_worker.py fit       # model.fit: 2 epochs of 3 steps
    python multi_worker.py custom    # a custom training loop: 6 steps

Prints one JSON line: the losses and a hash of the final weights, or, when
`fit` stops at a known Keras bug (KNOWN_FIT_BUGS, keras-team/keras#20585),
the bug's message under "upstream_bug". Any other error fails the worker.
"""

import hashlib
import json
import sys

import numpy as np
import tensorflow as tf

import keras_transformer as kt
from tests.scale import common

# What Keras 3's TensorFlow trainer raises under this strategy with more than
# one worker: `_maybe_symbolic_build` reduces the nested (x, y) batch, and
# past that `reduce_per_replica` reduces a scalar along axis 0.
KNOWN_FIT_BUGS = (
    "Attempt to convert a value (PerReplica:",
    "Invalid reduction dimension 0 for input with 0 dimensions",
)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x, y = common.data("gpt")
options = tf.data.Options()  # shard batches' rows across workers, as AUTO does
options.experimental_distribute.auto_shard_policy = (
    tf.data.experimental.AutoShardPolicy.DATA
)
dataset = (
    tf.data.Dataset.from_tensor_slices((x, y))
    .batch(common.BATCH)
    .repeat()
    .with_options(options)
)
with strategy.scope():
    model = common.compile_model(common.build("gpt"))
    model.optimizer.build(model.trainable_variables)

if sys.argv[1] == "fit":
    try:
        history = model.fit(dataset, epochs=2, steps_per_epoch=3, verbose=0)
    except (ValueError, tf.errors.InvalidArgumentError) as error:
        if not any(bug in str(error) for bug in KNOWN_FIT_BUGS):
            raise
        print(json.dumps({"upstream_bug": str(error).splitlines()[0]}))
        sys.exit(0)
    losses = history.history["loss"]
else:
    loss_fn = kt.training.MaskedSparseCategoricalCrossentropy()

    @tf.function
    def train_step(batch):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                # Keras losses already divide by the number of replicas under
                # a strategy; the optimizer sums the replicas' gradients.
                loss = loss_fn(y, model(x, training=True))
            variables = model.trainable_variables
            gradients = tape.gradient(loss, variables)
            model.optimizer.apply_gradients(zip(gradients, variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), None)

    batches = iter(strategy.experimental_distribute_dataset(dataset))
    losses = [float(train_step(next(batches))) for _ in range(6)]

weights = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights()))
print(
    json.dumps(
        {
            "replicas": strategy.num_replicas_in_sync,
            "loss": losses,
            "weights": weights.hexdigest(),
        }
    )
)
