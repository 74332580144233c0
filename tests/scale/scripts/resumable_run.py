"""A small resumable GPT run, for tests/scale/test_resume.py.

    python resumable_run.py DIRECTORY OUT.npz [--crash-at STEP]

Trains 3 epochs of 4 steps (a step-indexed stream of 6 distinct batches,
dropout 0.1, warm-up + cosine learning rate) with
`kt.training.resumable_callbacks(DIRECTORY)`. With `--crash-at`, the process
dies with exit code 3 right after global step STEP, as a kill would leave it;
otherwise it saves the final weights and step count to OUT.npz.
"""

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt

STEPS, EPOCHS, BATCH, VOCAB, LENGTH = 4, 3, 8, 16, 12


class CrashAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            os._exit(3)  # no clean-up, no callbacks: like SIGKILL


def stream(start_step):
    """Batch i of the run is rows [8i, 8i + 8) of 48 rows, cyclically."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1, VOCAB, (6 * BATCH, LENGTH + 1)).astype("int32")
    ids[::3, LENGTH // 2 :] = 0  # some padding
    dataset = tf.data.Dataset.from_tensor_slices((ids[:, :-1], ids[:, 1:]))
    return dataset.batch(BATCH).repeat().skip(start_step)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("out")
    parser.add_argument("--crash-at", type=int)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    model = kt.models.gpt2(VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
                           intermediate_dim=32, max_sequence_length=LENGTH,
                           dropout=0.1)  # fmt: skip
    schedule = kt.training.warmup_cosine_decay(1e-2, 2, STEPS * EPOCHS)
    model.compile(
        optimizer=kt.training.AdamW(schedule, weight_decay=0.1),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    callbacks = kt.training.resumable_callbacks(args.directory)
    if args.crash_at is not None:
        callbacks.append(CrashAt(args.crash_at))
    start = kt.training.resume_epoch(args.directory) * STEPS
    model.fit(
        stream(start),
        epochs=EPOCHS,
        steps_per_epoch=STEPS,
        callbacks=callbacks,
        shuffle=False,
        verbose=0,
    )
    np.savez(
        args.out,
        *model.get_weights(),
        steps=int(model.optimizer.iterations.numpy()),
        start=start,
    )


if __name__ == "__main__":
    main()
