"""One worker of a MultiWorkerMirroredStrategy run, for
tests/scale/test_multi_worker.py; the cluster comes from TF_CONFIG. The
functions run in the test's own process too (default strategy: the 1-worker
run the others are compared with).

    python multi_worker.py uninterrupted FOLDER   # fit, resume and custom,
                                                  # in FOLDER/<worker index>
    python multi_worker.py resume RUN OUT

`fit` trains each model (a tiny GPT-2, a `kt.tasks.TextGenerator` of it and
a tiny BERT classifier) 2 epochs of 3 global batches of 8 (arrays,
`shuffle=False`; the GPTs' gradient norms clipped) and returns, per model,
the loss and metrics `fit` reported for each epoch; the final weights go to
OUT (an .npz file).

`resume` trains a GPT with dropout 4 epochs of 10 steps with
`kt.training.resumable_callbacks(RUN)`, its data a step-indexed stream that
starts at `resume_epoch(RUN) * 10`; the final weights and step count go to
OUT. The tests kill a worker through the test-only variables of
`keras_transformer.training.resume` (`KT_TEST_KILL_AT_STEP`, ...).

`custom` is the custom training loop of docs/scale.md's appendix.

Each mode prints its result as a JSON line, the last (`resume` prints
`{"start": step}` first).
"""

import argparse
import json
import os

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.training import multi_worker
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


RESUME_STEPS, RESUME_EPOCHS = 10, 4


def resume(strategy, run, out):
    steps, epochs = RESUME_STEPS, RESUME_EPOCHS
    ids = np.random.default_rng(0).integers(1, common.VOCAB, (48, common.LENGTH + 1))
    ids[::3, common.LENGTH // 2 :] = 0  # some padding
    start = kt.training.resume_epoch(run) * steps
    print(json.dumps({"start": start}), flush=True)  # before a test kills it
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


def uninterrupted(strategy, folder):
    """`fit`, `resume` and `custom` in one process: outputs in
    FOLDER/<worker index>, the resumable run's directory FOLDER/run (worker
    0's, which every worker restores from)."""
    mine = os.path.join(folder, str(multi_worker.worker_index(strategy)))
    os.makedirs(mine, exist_ok=True)
    return {
        "fit": fit(strategy, os.path.join(mine, "fit.npz")),
        "resume": resume(
            strategy, os.path.join(folder, "run"), os.path.join(mine, "resume.npz")
        ),
        "custom": custom(strategy, os.path.join(mine, "custom.npz")),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["uninterrupted", "resume"])
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    strategy = kt.training.multi_worker_strategy()
    run = uninterrupted if args.mode == "uninterrupted" else resume
    print(json.dumps(run(strategy, *args.paths)))


if __name__ == "__main__":
    main()
