"""Greedy decoding with T5: ours and transformers' side by side, on the CPU.

For a T5 size (`--size`, a preset of `kt.models.PRESETS`: `t5_small` by
default; random weights, float32), in one run:

- transformers: a `T5ForConditionalGeneration` of the preset's shape with
  its own random initialization (dropout 0), saved by `save_pretrained` to
  a temporary folder and decoded by `generate(do_sample=False, num_beams=1)`
  with `min_new_tokens` = `max_new_tokens`, so that it decodes every token;
  PyTorch under `torch.inference_mode()`, one thread per core;
- ours: `kt.models.from_pretrained` of that folder (the same weights),
  decoded by `kt.generation.generate(sampler="greedy")` without an end
  token (the XLA-compiled KV-cache loop).

Each decodes a `--prompt`-token source (random ids, `</s>` last) to `--new`
new tokens at each `--batch`; the first call (ours: tracing and XLA
compiles) is timed apart, then the two run in turn `--repeats` times and
the medians are reported, with ours / transformers' speed (the goal: >=
1.5x at batch 1). The tokens are compared: ours - 1 == transformers'.

    pip install -e ".[bench]" && pip install torch==2.13.0 transformers
    python benchmarks/t5_decode.py [--size t5_small] [--prompt 64] [--new 64]
        [--batch 1 8] [--repeats 5]
"""

import argparse
import os
import statistics
import tempfile
import time

import keras
import numpy as np

import keras_transformer as kt


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def their_config(size):
    """transformers' `T5Config` of our preset `size`'s shape, dropout 0."""
    import transformers

    config = kt.models.PRESETS[size]["config"]
    return transformers.T5Config(
        vocab_size=config["vocabulary_size"] - 1,
        d_model=config["hidden_dim"],
        d_kv=config.get("key_dim") or config["hidden_dim"] // config["num_heads"],
        d_ff=config["intermediate_dim"],
        num_layers=config["num_layers"],
        num_decoder_layers=config.get("num_decoder_layers"),
        num_heads=config["num_heads"],
        feed_forward_proj=config.get("feedforward", "relu"),
        tie_word_embeddings=config.get("tie_embeddings", True),
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="t5_small")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    keras.utils.set_random_seed(0)
    theirs = transformers.T5ForConditionalGeneration(their_config(args.size)).eval()
    theirs.generation_config.eos_token_id = None  # every token decoded
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = kt.models.from_pretrained(folder)
    print(
        f"{args.size}: {ours.count_params():,} parameters (transformers "
        f"{theirs.num_parameters():,}), float32, greedy, {args.prompt}-token "
        f"source + {args.new} new tokens, median of {args.repeats} runs after "
        f"a first (compiling) one, {os.cpu_count()} CPU cores, transformers "
        f"{transformers.__version__}, torch {torch.__version__}"
    )
    print(
        "\n| batch | contender | first call s | ms / step | new tokens/s | ours / it |"
    )
    print("|---|---|---|---|---|---|")
    vocabulary = theirs.config.vocab_size
    for batch in args.batch:
        rng = np.random.default_rng(batch)
        source = rng.integers(3, min(32000, vocabulary), (batch, args.prompt))
        source[:, -1] = 1  # T5's </s>
        outputs = {}

        def run_ours(source=source, outputs=outputs):
            outputs["ours"] = kt.generation.generate(
                ours,
                {"encoder_token_ids": source + 1},
                max_new_tokens=args.new,
                sampler="greedy",
                end_token_id=None,
            )

        def run_theirs(source=source, outputs=outputs):
            with torch.inference_mode():
                outputs["transformers"] = theirs.generate(
                    input_ids=torch.tensor(source),
                    attention_mask=torch.ones(source.shape, dtype=torch.long),
                    max_new_tokens=args.new,
                    min_new_tokens=args.new,
                    do_sample=False,
                    num_beams=1,
                ).numpy()

        contenders = {"ours": run_ours, "transformers": run_theirs}
        first = {k: timed(fn) for k, fn in contenders.items()}
        times = {k: [] for k in contenders}
        for _ in range(args.repeats):
            for k, fn in contenders.items():
                times[k].append(timed(fn))
        median = {k: statistics.median(t) for k, t in times.items()}
        rate = {k: batch * args.new / m for k, m in median.items()}
        for k in contenders:
            print(
                f"| {batch} | {k} | {first[k]:.2f} | "
                f"{median[k] / args.new * 1e3:.2f} | {rate[k]:,.1f} | "
                f"{rate['ours'] / rate[k]:.2f}x |"
            )
        a, b = outputs["ours"], outputs["transformers"]
        same = a.shape == b.shape and np.array_equal(a - 1, b)
        print(f"| {batch} | ours' tokens - 1 == transformers' | {same} | | | |")
        if not same:
            print(f"  ours - 1 {(a - 1)[0, :16]}\n  theirs   {b[0, :16]}")


if __name__ == "__main__":
    main()
