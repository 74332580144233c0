"""Train a character-level GPT on a text file: the nanoGPT Shakespeare-char
comparison, in this library.

    python examples/train_char_gpt.py ../shared/data/tinyshakespeare.txt

Configuration (nanoGPT's reference run): 4 layers, 4 heads, 128 hidden,
context 64, batch 12, 2000 steps, AdamW (lr 1e-3, beta2 0.99, weight decay
0.1; biases, LayerNorm and embeddings not decayed), 100 warm-up steps then
cosine decay to 1e-4, gradient clipping at global norm 1.0, no dropout, 90/10
train/validation split. Prints validation loss (mean of `--eval-batches`
random batches), wall time from start-up to the end of evaluation, and peak
memory.
"""

import time

START = time.perf_counter()

import argparse  # noqa: E402
import resource  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_transformer as kt  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="any UTF-8 text file")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--eval-batches", type=int, default=200)
    parser.add_argument("--sample", type=int, default=200, help="characters to sample")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--no-xla", action="store_true", help="train without XLA")
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=25,
        help="training steps per compiled call (fewer Python round trips; "
        "the updates are the same as with 1)",
    )
    return parser.parse_args()


def windows(ids, count, context, rng):
    """`count` random (input, next-character) windows of `context` ids."""
    starts = rng.integers(0, len(ids) - context - 1, count)
    tokens = ids[starts[:, None] + np.arange(context + 1)]
    return tokens[:, :-1], tokens[:, 1:]


def sample(model, prompt_ids, length, context, rng, temperature=0.8):
    """Plain temperature sampling over a sliding window (no KV cache)."""
    ids = list(prompt_ids)
    for _ in range(length):
        window = np.array([ids[-context:]], "int32")
        logits = np.asarray(model(window, training=False))[0, -1] / temperature
        probs = np.exp(logits - logits.max())
        probs[0] = 0.0  # never emit padding
        ids.append(int(rng.choice(len(probs), p=probs / probs.sum())))
    return ids


def main():
    args = parse_args()
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    with open(args.path, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    lookup = {c: i + 1 for i, c in enumerate(chars)}  # id 0 is padding
    ids = np.array([lookup[c] for c in text], dtype="int32")
    split = int(0.9 * len(ids))
    train_ids, val_ids = ids[:split], ids[split:]
    print(f"{len(text):,} characters, vocabulary {len(chars)} (+ padding)")

    model = kt.models.gpt2(
        len(chars) + 1,
        num_layers=4,
        num_heads=4,
        hidden_dim=128,
        intermediate_dim=512,
        max_sequence_length=args.context,
        dropout=0.0,
    )
    schedule = kt.training.warmup_cosine_decay(1e-3, 100, args.steps, 1e-4)
    model.compile(
        optimizer=kt.training.AdamW(
            schedule, weight_decay=0.1, beta_1=0.9, beta_2=0.99, global_clipnorm=1.0
        ),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        jit_compile=not args.no_xla,
        steps_per_execution=args.steps_per_execution,
    )
    print(f"{model.count_params():,} parameters")
    x, y = windows(train_ids, args.steps * args.batch_size, args.context, rng)
    model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=2)
    train_time = time.perf_counter() - START

    eval_count = args.eval_batches * args.batch_size
    losses = {}
    for name, split_ids in [("train", train_ids), ("val", val_ids)]:
        ex, ey = windows(split_ids, eval_count, args.context, rng)
        losses[name] = model.evaluate(ex, ey, batch_size=args.batch_size, verbose=0)
    wall = time.perf_counter() - START
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"step {args.steps}: train loss {losses['train']:.4f}, "
        f"val loss {losses['val']:.4f}"
    )
    print(
        f"wall time: {wall:.1f} s end to end "
        f"({train_time:.1f} s to the end of training)"
    )
    print(f"peak memory (max RSS): {peak_mb:.0f} MB")

    if args.sample:
        chars_by_id = {i: c for c, i in lookup.items()}
        out = sample(model, [lookup["\n"]], args.sample, args.context, rng)
        print("sample:\n" + "".join(chars_by_id.get(i, "") for i in out[1:]))


if __name__ == "__main__":
    main()
