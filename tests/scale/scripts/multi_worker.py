"""One worker of a MultiWorkerMirroredStrategy run, for
tests/scale/test_multi_worker.py; the cluster comes from TF_CONFIG (one
worker: the 1-worker run the others are compared with).

    python multi_worker.py fit OUT             # model.fit of a tiny GPT-2 and
                                               # a tiny BERT classifier
    python multi_worker.py resume RUN OUT [--kill-at STEP]
    python multi_worker.py custom OUT          # the custom loop (docs appendix)

`fit` trains each model (and a `kt.tasks.TextGenerator`) 2 epochs of 3
global batches of 8 (arrays, `shuffle=False`; the GPTs' gradient norms
clipped) and prints one JSON line: the replica count and, per model, the
loss and metrics `fit` reported for each epoch; the final weights go to OUT
(an .npz file).

`resume` trains a GPT with dropout 3 epochs of 4 steps with
`kt.training.resumable_callbacks(RUN)`, its data a step-indexed stream that
starts at `resume_epoch(RUN) * 4`. With `--kill-at STEP`, the worker
SIGKILLs itself right after global step STEP. The final weights and step
count go to OUT.
"""

import argparse
import json
import os
import signal

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from tests.scale import common

GLOBAL_BATCH, STEPS = 8, 3
SIZES = dict(num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
             max_sequence_length=common.LENGTH)  # fmt: skip


def bert_classifier():
    backbone = kt.models.bert(common.VOCAB, dropout=0.0, **SIZES)
    return kt.models.bert_classifier(backbone, 2, dropout=0.0)


def text_generator():
    """A task: the tiny GPT with a character tokenizer of its 16 ids."""
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(["abcdefghi"]))
    return kt.tasks.TextGenerator(common.build("gpt"), tokenizer)


def classifier_data(num):
    """Label 1 when the first real token is odd; rows of equal lengths in
    each half batch (so both replicas see the same number of tokens)."""
    rng = np.random.default_rng(1)
    ids = rng.integers(2, common.VOCAB, (num, common.LENGTH))
    lengths = np.resize(rng.integers(3, common.LENGTH + 1, GLOBAL_BATCH // 2), num)
    ids = np.where(np.arange(common.LENGTH) < lengths[:, None], ids, 0)
    features = {
        "token_ids": ids.astype("int32"),
        "segment_ids": np.zeros_like(ids, "int32"),
        "padding_mask": ids != 0,
    }
    return features, (ids[:, 0] % 2).astype("int32")


def fit(strategy, out):
    results, weights = {"replicas": strategy.num_replicas_in_sync}, {}
    runs = {
        "gpt": (lambda: common.build("gpt"), common.data("gpt")),
        "text_generator": (text_generator, common.data("gpt")),
        "bert_classifier": (bert_classifier, classifier_data(GLOBAL_BATCH * STEPS)),
    }
    for name, (build, (x, y)) in runs.items():
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = build()
            if name in (
                "gpt",
                "text_generator",
            ):  # clipped: every step's gradient norm is over 0.1
                model.compile(
                    optimizer=kt.training.AdamW(
                        5e-3, weight_decay=0.01, global_clipnorm=0.1
                    ),
                    loss=kt.training.MaskedSparseCategoricalCrossentropy(),
                )
            else:
                model.compile(
                    optimizer=kt.training.AdamW(5e-3, weight_decay=0.01),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=["sparse_categorical_accuracy"],
                )
        history = model.fit(
            x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0
        )
        results[name] = history.history
        for i, value in enumerate(model.get_weights()):
            weights[f"{name}_{i}"] = value
    np.savez(out, **weights)
    return results


class KillAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def resume(strategy, run, out, kill_at):
    steps, epochs = 4, 3
    ids = np.random.default_rng(0).integers(1, common.VOCAB, (48, common.LENGTH + 1))
    ids[::3, common.LENGTH // 2 :] = 0  # some padding
    start = kt.training.resume_epoch(run) * steps
    data = (
        tf.data.Dataset.from_tensor_slices((ids[:, :-1], ids[:, 1:]))
        .batch(GLOBAL_BATCH)
        .repeat()
        .skip(start)
    )
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = kt.models.gpt2(common.VOCAB, dropout=0.1, **SIZES)
        schedule = kt.training.warmup_cosine_decay(1e-2, 2, steps * epochs)
        model.compile(
            optimizer=kt.training.AdamW(schedule, weight_decay=0.1),
            loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        )
    callbacks = kt.training.resumable_callbacks(run)
    if kill_at is not None:
        callbacks.append(KillAt(kill_at))
    model.fit(
        data, epochs=epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=0
    )
    np.savez(
        out,
        *model.get_weights(),
        steps=int(model.optimizer.iterations.numpy()),
        start=start,
    )
    return {"replicas": strategy.num_replicas_in_sync, "start": start}


def custom(strategy, out):
    """The custom training loop docs/scale.md keeps as an appendix."""
    x, y = common.data("gpt")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = common.build("gpt")
        optimizer = kt.training.AdamW(5e-3, weight_decay=0.01)
        optimizer.build(model.trainable_variables)
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
            optimizer.apply_gradients(zip(gradients, variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), None)

    batches = iter(strategy.experimental_distribute_dataset(dataset))
    losses = [float(train_step(next(batches))) for _ in range(6)]
    np.savez(out, *model.get_weights())
    return {"replicas": strategy.num_replicas_in_sync, "loss": losses}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["fit", "resume", "custom"])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--kill-at", type=int)
    args = parser.parse_args()
    strategy = kt.training.multi_worker_strategy()
    if args.mode == "fit":
        result = fit(strategy, *args.paths)
    elif args.mode == "resume":
        result = resume(strategy, *args.paths, args.kill_at)
    else:
        result = custom(strategy, *args.paths)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
