"""New tokens per second of greedy generation: ours next to KerasHub.

A GPT with random weights (4 layers, 256 hidden, 4 heads, 1024 feed-forward,
vocabulary 1000, context `--context`, 1024 as GPT-2's) generates 240 tokens
after a 16-token prompt, greedily, at batch 1 and batch 8:

- ours: `kt.generation.generate` (XLA-compiled KV-cache loop, in the
  smallest power-of-two buffer from 32 that holds the request: 256 here),
- ours in a 512 bucket: `generate(..., min_buffer_length=512)`, the buffer
  every one-shot request got before #55 (and `chat`'s now),
- ours without the cache: `generate(..., use_cache=False)`,
- keras-hub: `keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)`
  compiled with `sampler="greedy"` (its XLA-compiled cached loop).

    python benchmarks/generate.py          # needs `pip install -e ".[bench]"`

The first call of each compiles; its time is reported separately. Then each
contender runs `--repeats` times in turn (interleaved, so drift hits all) and
the median is reported as new tokens per second.
"""

import argparse
import statistics
import time

import keras
import keras_hub
import numpy as np

import keras_transformer as kt

LAYERS, HIDDEN, HEADS, INTERMEDIATE, VOCABULARY = 4, 256, 4, 1024, 1000


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=240)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument(
        "--no-uncached", action="store_true", help="skip the no-cache contender"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.new, args.batch, args.repeats = 8, [1], 1

    keras.utils.set_random_seed(0)
    ours = kt.models.gpt2(
        VOCABULARY,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=INTERMEDIATE,
        max_sequence_length=args.context,
        dropout=0.0,
    )
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCABULARY,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=INTERMEDIATE,
        dropout=0.0,
        max_sequence_length=args.context,
    )
    theirs = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    theirs.compile(sampler="greedy")
    total = args.prompt + args.new
    print(
        f"greedy, {LAYERS} layers, {HIDDEN} hidden, vocabulary {VOCABULARY}, "
        f"context {args.context}, "
        f"{args.prompt}-token prompt + {args.new} new tokens, median of "
        f"{args.repeats} runs after a compiling one\n"
    )
    print("| batch | contender | compile + first run s | new tokens/s | ours / it |")
    print("|---|---|---|---|---|")
    for batch in args.batch:
        prompt = np.random.default_rng(batch).integers(
            1, VOCABULARY, (batch, args.prompt)
        )
        hub_inputs = {
            "token_ids": np.pad(prompt, ((0, 0), (0, args.new))).astype("int32"),
            "padding_mask": np.arange(total)[None].repeat(batch, 0) < args.prompt,
        }
        contenders = {
            "ours": lambda p=prompt: kt.generation.generate(ours, p, args.new),
            "ours in a 512 bucket": lambda p=prompt: kt.generation.generate(
                ours, p, args.new, min_buffer_length=512
            ),
            "ours, no cache": lambda p=prompt: kt.generation.generate(
                ours, p, args.new, use_cache=False
            ),
            "keras-hub": lambda x=hub_inputs: theirs.generate(
                x, max_length=total, stop_token_ids=None
            ),
        }
        if args.no_uncached:
            del contenders["ours, no cache"]
        first = {name: timed(fn)[0] for name, fn in contenders.items()}
        times = {name: [] for name in contenders}
        for _ in range(args.repeats):
            for name, fn in contenders.items():
                times[name].append(timed(fn)[0])
        rate = {
            name: batch * args.new / statistics.median(t) for name, t in times.items()
        }
        for name in contenders:
            ratio = rate["ours"] / rate[name]
            print(
                f"| {batch} | {name} | {first[name]:.1f} | {rate[name]:,.0f} | "
                f"{ratio:.2f}x |"
            )


if __name__ == "__main__":
    main()
