"""Training-step speed of our encoder block next to KerasHub and plain Keras.

Times one forward + backward pass (gradients w.r.t. all trainable variables,
dropout active) of three equivalent post-LN encoder blocks:

- ours: `keras_transformer.layers.TransformerEncoderBlock`
- keras-hub: `keras_hub.layers.TransformerEncoder`
- keras MHA: a plain block on `keras.layers.MultiHeadAttention` (below)

Run it with `python benchmarks/layers.py` (`--smoke` for a tiny check, `--help`
for the flags); `pip install -e ".[bench]"` provides keras-hub. The three
blocks are timed in turn, step by step, in one process, so machine drift hits
them equally; each cell is the median of `--steps` steps after `--warmup`
untimed ones (the first of which compiles).
"""

import argparse
import statistics
import time

import keras
import keras_hub
import tensorflow as tf

import keras_transformer as kt

BATCH = 8
DROPOUT = 0.1
EPSILON = 1e-6


class KerasMHABlock(keras.layers.Layer):
    """Post-LN encoder block written directly on `keras.layers.MultiHeadAttention`."""

    def __init__(self, num_heads, intermediate_dim, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        self.attention = keras.layers.MultiHeadAttention(
            self.num_heads, hidden_dim // self.num_heads, dropout=DROPOUT
        )
        self.attention.build(inputs_shape, inputs_shape)
        self.attention_dropout = keras.layers.Dropout(DROPOUT)
        self.attention_norm = keras.layers.LayerNormalization(epsilon=EPSILON)
        self.attention_norm.build(inputs_shape)
        self.intermediate = keras.layers.Dense(self.intermediate_dim, activation="relu")
        self.intermediate.build(inputs_shape)
        self.output_dense = keras.layers.Dense(hidden_dim)
        self.output_dense.build((*inputs_shape[:-1], self.intermediate_dim))
        self.feedforward_dropout = keras.layers.Dropout(DROPOUT)
        self.feedforward_norm = keras.layers.LayerNormalization(epsilon=EPSILON)
        self.feedforward_norm.build(inputs_shape)
        self.built = True

    def call(self, x, training=None):
        h = self.attention(x, x, training=training)
        x = self.attention_norm(x + self.attention_dropout(h, training=training))
        h = self.output_dense(self.intermediate(x))
        return self.feedforward_norm(x + self.feedforward_dropout(h, training=training))


def make_blocks(hidden_dim):
    """The three blocks under test, by column name, with identical sizes."""
    num_heads, intermediate_dim = hidden_dim // 64 or 1, 4 * hidden_dim
    return {
        "ours": kt.layers.TransformerEncoderBlock(
            num_heads, intermediate_dim, dropout=DROPOUT, layer_norm_epsilon=EPSILON
        ),
        "keras-hub": keras_hub.layers.TransformerEncoder(
            intermediate_dim,
            num_heads,
            dropout=DROPOUT,
            activation="relu",
            layer_norm_epsilon=EPSILON,
            normalize_first=False,
        ),
        "keras MHA": KerasMHABlock(num_heads, intermediate_dim),
    }


def make_train_step(block, jit_compile):
    @tf.function(jit_compile=jit_compile)
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(block(x, training=True)))
        grads = tape.gradient(loss, block.trainable_variables)
        # Returning a function of the gradients keeps graph pruning and XLA
        # from dropping the backward pass.
        return loss, tf.linalg.global_norm(grads)

    return train_step


def benchmark_shape(seq, hidden_dim, jit_compile, steps, warmup):
    """Median milliseconds per training step of each block, by column name."""
    x = keras.random.normal((BATCH, seq, hidden_dim), seed=0)
    train_steps, sizes = {}, set()
    for name, block in make_blocks(hidden_dim).items():
        block(x)  # builds the weights outside the traced step
        sizes.add(sum(int(tf.size(v)) for v in block.trainable_variables))
        train_steps[name] = make_train_step(block, jit_compile)
    if len(sizes) != 1:
        raise ValueError(f"The blocks differ in parameter count: {sorted(sizes)}")
    for train_step in train_steps.values():
        for _ in range(warmup):
            [t.numpy() for t in train_step(x)]
    times = {name: [] for name in train_steps}
    for _ in range(steps):  # interleaved: one step of each block in turn
        for name, train_step in train_steps.items():
            start = time.perf_counter()
            [t.numpy() for t in train_step(x)]
            times[name].append(1000 * (time.perf_counter() - start))
    return {name: statistics.median(t) for name, t in times.items()}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps")
    parser.add_argument("--seq", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--xla", choices=["on", "off", "both"], default="both")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny run: seq 16, hidden 32, 3 steps"
    )
    args = parser.parse_args()
    if args.smoke:
        args.seq, args.hidden, args.steps, args.warmup = [16], [32], 3, 1
    return args


def main():
    args = parse_args()
    keras.utils.set_random_seed(0)
    xla_modes = {"on": [True], "off": [False], "both": [True, False]}[args.xla]
    print(f"batch {BATCH}, float32, dropout {DROPOUT}, median of {args.steps} steps")
    print()
    print(
        "| seq | hidden | xla | ours ms | keras-hub ms | keras MHA ms "
        "| ours/keras-hub | ours/keras-MHA |"
    )
    print("|---|---|---|---|---|---|---|---|")
    hub_ratios = []
    for seq in args.seq:
        for hidden_dim in args.hidden:
            for jit_compile in xla_modes:
                ms = benchmark_shape(
                    seq, hidden_dim, jit_compile, args.steps, args.warmup
                )
                hub_ratios.append(ms["ours"] / ms["keras-hub"])
                print(
                    f"| {seq} | {hidden_dim} | {'on' if jit_compile else 'off'} "
                    f"| {ms['ours']:.2f} | {ms['keras-hub']:.2f} "
                    f"| {ms['keras MHA']:.2f} | {hub_ratios[-1]:.2f} "
                    f"| {ms['ours'] / ms['keras MHA']:.2f} |",
                    flush=True,
                )
    print()
    print(f"max ours/keras-hub: {max(hub_ratios):.2f}")


if __name__ == "__main__":
    main()
