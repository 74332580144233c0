"""Tokens per second and MFU of GPT-2 124M training on the present accelerator.

GPT-2 small (12 layers, 12 heads, hidden 768, feed-forward 3072), its 50257
tokens padded to a vocabulary of 50304 (a multiple of 64, so the logits
matmul tiles evenly), context 1024, dropout 0, trained through `model.fit`
under `mixed_bfloat16` with XLA (`jit_compile=True`): AdamW (β2 0.95, weight
decay 0.1, global clipnorm 1.0, warm-up + cosine learning rate) on batches of
random tokens.

    python benchmarks/gpu_train.py                    # GPT-2 124M, batch 16
    python benchmarks/gpu_train.py --batch 32 --peak-flops 989e12
    python benchmarks/gpu_train.py --smoke            # tiny, on CPU, for CI

Model FLOPs utilization, as in PaLM (appendix B) and nanoGPT:

    MFU = (6·N + 12·L·T·d) · tokens/s ÷ peak FLOP/s

N: parameters without the position embeddings (a lookup, not a matmul; the
tied token embedding is counted once, and it does the logits matmul), L
layers, T context, d hidden; 6·N are the forward and backward matmul FLOPs per
token, 12·L·T·d the attention scores and weighted sums. The default peak,
989e12, is the dense bf16 peak of an H100 or H200 SXM.

After `--warmup` untimed steps (the first compiles), the time of `--steps`
steps is measured from the end of one step to the end of the last, reading
the loss at both ends so queued device work is included.
"""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt

SMOKE = dict(num_layers=2, num_heads=2, hidden_dim=64, intermediate_dim=256)


def padded(size, multiple=64):
    return -(-size // multiple) * multiple


class Timer(keras.callbacks.Callback):
    """Seconds between the ends of batch `start` and of the last batch."""

    def __init__(self, start, last):
        super().__init__()
        self.start, self.last = start, last
        self.begin = self.end = None

    def on_train_batch_end(self, batch, logs=None):
        if batch in (self.start, self.last):
            float(keras.ops.convert_to_numpy(logs["loss"]))  # waits for the step
            if batch == self.start:
                self.begin = time.perf_counter()
            else:
                self.end = time.perf_counter()

    @property
    def seconds(self):
        return self.end - self.begin


def device_name():
    """The device `fit` runs on without a strategy: the first GPU, or the CPU."""
    gpus = tf.config.get_visible_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"{gpus[0].name} ({details.get('device_name', 'GPU')})"
    return "CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps")
    parser.add_argument("--peak-flops", type=float, default=989e12)
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU")
    args = parser.parse_args()
    for name in ("batch", "length", "steps", "warmup"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    sizes = {}
    vocabulary = padded(50257)
    if args.smoke:
        tf.config.set_visible_devices([], "GPU")
        sizes, vocabulary = SMOKE, padded(200)
        args.batch, args.length, args.steps, args.warmup = 4, 64, 4, 2

    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    # The preset's sizes, with our vocabulary, context and dropout.
    model = kt.models.GPT2.from_preset(
        "gpt2_small",
        **sizes,
        vocabulary_size=vocabulary,
        max_sequence_length=args.length,
        dropout=0.0,
    )
    total = args.warmup + args.steps
    model.compile(
        optimizer=kt.training.AdamW(
            kt.training.warmup_cosine_decay(6e-4, min(args.warmup, total - 1), total),
            weight_decay=0.1,
            beta_2=0.95,
            global_clipnorm=1.0,
        ),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        jit_compile=True,
    )
    model.optimizer.build(model.trainable_variables)  # else the step traces twice

    rng = np.random.default_rng(0)
    ids = rng.integers(1, vocabulary, (args.batch, args.length + 1), "int32")
    batch = (ids[:, :-1], ids[:, 1:])
    dataset = tf.data.Dataset.from_tensors(batch).repeat().prefetch(2)

    layers, hidden = model.num_layers, model.hidden_dim
    parameters = model.count_params()
    matmul_parameters = parameters - args.length * hidden  # N: no positions
    flops_per_token = 6 * matmul_parameters + 12 * layers * args.length * hidden

    timer = Timer(args.warmup - 1, total - 1)
    started = time.perf_counter()
    model.fit(
        dataset,
        epochs=1,
        steps_per_epoch=total,
        callbacks=[timer],
        shuffle=False,
        verbose=0,
    )
    warmup_seconds = timer.begin - started
    tokens_per_second = args.steps * args.batch * args.length / timer.seconds
    mfu = flops_per_token * tokens_per_second / args.peak_flops

    print(f"device: {device_name()}")
    print(
        f"model: gpt2 {layers} layers, hidden {hidden}, vocabulary {vocabulary}, "
        f"context {args.length}, {parameters / 1e6:.1f}M parameters"
    )
    print(f"batch: {args.batch} x {args.length} tokens, mixed_bfloat16, XLA")
    print(f"FLOPs/token: {flops_per_token} (6·N + 12·L·T·d, N={matmul_parameters})")
    print(f"compile + {args.warmup} warm-up steps: {warmup_seconds:.1f} s")
    print(f"step: {1000 * timer.seconds / args.steps:.1f} ms (mean of {args.steps})")
    print(f"tokens/s: {tokens_per_second:.1f}")
    print(f"MFU: {100 * mfu:.3g}% of {args.peak_flops / 1e12:g} TFLOP/s")


if __name__ == "__main__":
    main()
