"""Tokens per second of a GPT training step: ours next to KerasHub.

Both models are 4 layers, 256 hidden, 4 heads, 1024 feed-forward, learned
positions, pre-LN, GELU, dropout 0.1, with the LM head tied to the token
embedding, trained through `model.fit` with the same AdamW, the same loss and
XLA on (`jit_compile=True`), on batches of 16 sequences of 128 tokens in
float32. The vocabulary (8192 by default, `--vocabulary`) is not fixed by the
comparison; a GPT-2-sized one makes the output matmul dominate on a CPU.

    python benchmarks/train.py            # needs `pip install -e ".[bench]"`

The two models alternate in rounds of `--steps` steps in one process, so
machine drift hits both; a step's time is the median interval between
consecutive batch ends after `--warmup` untimed steps (the first compiles).
"""

import argparse
import statistics
import time

import keras
import keras_hub
import numpy as np

import keras_transformer as kt

LAYERS, HIDDEN, HEADS, INTERMEDIATE = 4, 256, 4, 1024


def ours(vocabulary, length):
    return kt.models.gpt2(
        vocabulary,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=INTERMEDIATE,
        max_sequence_length=length,
        dropout=0.1,
    )


def keras_hub_gpt(vocabulary, length):
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=vocabulary,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=INTERMEDIATE,
        dropout=0.1,
        max_sequence_length=length,
    )
    token_ids = keras.Input((None,), dtype="int32")
    hidden = backbone({"token_ids": token_ids, "padding_mask": token_ids != 0})
    logits = backbone.token_embedding(hidden, reverse=True)  # the same tied head
    return keras.Model(token_ids, logits)


class StepTimer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def compile_model(model):
    model.compile(
        optimizer=kt.training.AdamW(1e-3, weight_decay=0.1, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocabulary", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.vocabulary, args.length, args.steps, args.rounds, args.warmup = (
            64,
            16,
            3,
            1,
            1,
        )

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    count = args.batch * (args.steps + args.warmup)
    x = rng.integers(1, args.vocabulary, (count, args.length + 1)).astype("int32")
    inputs, labels = x[:, :-1], x[:, 1:]
    models = {
        "ours": compile_model(ours(args.vocabulary, args.length)),
        "keras-hub": compile_model(keras_hub_gpt(args.vocabulary, args.length)),
    }
    params = {name: model.count_params() for name, model in models.items()}
    steps = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            timer = StepTimer()
            model.fit(inputs, labels, batch_size=args.batch, epochs=1, verbose=0,
                      shuffle=False, callbacks=[timer])  # fmt: skip
            steps[name] += np.diff(timer.ends[args.warmup :]).tolist()
    tokens = args.batch * args.length
    rate = {name: tokens / statistics.median(times) for name, times in steps.items()}
    print(
        f"GPT train step: {LAYERS} layers, {HIDDEN} hidden, batch {args.batch} x "
        f"{args.length} tokens, vocabulary {args.vocabulary}, float32, XLA on; "
        f"median of {len(steps['ours'])} steps\n"
    )
    print("| model | parameters | tokens/s |")
    print("|---|---|---|")
    for name in models:
        print(f"| {name} | {params[name]:,} | {rate[name]:,.0f} |")
    print(f"\nours / keras-hub tokens/s: {rate['ours'] / rate['keras-hub']:.2f}x")


if __name__ == "__main__":
    main()
