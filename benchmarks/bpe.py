"""Byte-level BPE tokenization speed: ours next to KerasHub's, same files, same text.

Tokenizes every non-empty line of the text in batches with

- ours: `keras_transformer.text.BytePairTokenizer`,
- keras-hub: `keras_hub.tokenizers.BytePairTokenizer`,

both built from the same GPT-2 `vocab.json` and `merges.txt` (by default the
real GPT-2 files that `tests/fixtures/hf/gpt2_tokenizer` holds, gzipped),
each inside a `tf.function`, as `tf.data` runs them. Both are timed in turn in
one process, pass after pass, so machine drift hits them equally; each figure
is the median of `--passes` timed passes over all lines after `--warmup`
untimed ones (the first traces the function). KerasHub keeps a cache of the
words it has seen across calls, so its later passes are its fastest; ours
keeps none (each batch merges its own unique words). It also reports the
share of lines on which both give the same ids (ours are theirs plus one: id
0 is padding here).

Run it with `python benchmarks/bpe.py` (`--smoke` for a tiny check);
`pip install -e ".[bench]"` provides keras-hub.
"""

import argparse
import gzip
import json
import pathlib
import statistics
import time

import keras_hub
import numpy as np
import tensorflow as tf

import keras_transformer as kt

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_TEXT = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
DEFAULT_FILES = ROOT / "tests" / "fixtures" / "hf" / "gpt2_tokenizer"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=str(DEFAULT_TEXT), help="a UTF-8 text")
    parser.add_argument(
        "--files",
        default=str(DEFAULT_FILES),
        help="a folder with vocab.json(.gz) and merges.txt(.gz)",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a tiny, fast run")
    return parser.parse_args()


def read(folder, name):
    path = pathlib.Path(folder) / name
    if path.exists():
        return path.read_text(encoding="utf-8")
    with gzip.open(f"{path}.gz", "rt", encoding="utf-8") as f:
        return f.read()


def timed_pass(function, batches):
    start = time.perf_counter()
    for batch in batches:
        function(batch)
    return time.perf_counter() - start


def main():
    args = parse_args()
    lines = [line for line in pathlib.Path(args.path).read_text().splitlines()]
    lines = [line for line in lines if line.strip()]
    if args.smoke:
        lines, args.passes, args.warmup = lines[:1000], 2, 1
    vocabulary = json.loads(read(args.files, "vocab.json"))
    merges = read(args.files, "merges.txt").splitlines()[1:]
    ours = kt.text.BytePairTokenizer(vocabulary, merges)
    hub = keras_hub.tokenizers.BytePairTokenizer(vocabulary=vocabulary, merges=merges)
    functions = {
        "ours": tf.function(lambda x: ours.tokenize(x) - 1),
        "keras-hub": tf.function(hub.tokenize),
    }
    batches = [
        tf.constant(lines[i : i + args.batch_size])
        for i in range(0, len(lines), args.batch_size)
    ]
    same = np.mean(
        [
            a == b
            for batch in batches
            for a, b in zip(
                functions["ours"](batch).to_list(),
                functions["keras-hub"](batch).to_list(),
                strict=True,
            )
        ]
    )
    times = {name: [] for name in functions}
    for step in range(args.warmup + args.passes):
        for name, function in functions.items():
            seconds = timed_pass(function, batches)
            if step >= args.warmup:
                times[name].append(seconds)
    print(
        f"{len(lines):,} lines of {pathlib.Path(args.path).name}, vocabulary "
        f"{len(vocabulary):,}, {len(merges):,} merges, batch {args.batch_size}, "
        f"median of {args.passes} passes; identical ids on {same:.2%} of lines"
    )
    speed = {}
    for name, seconds in times.items():
        speed[name] = len(lines) / statistics.median(seconds)
        print(f"{name:>10}: {speed[name]:>12,.0f} lines/s")
    print(f"ratio ours / keras-hub: {speed['ours'] / speed['keras-hub']:.2f}x")


if __name__ == "__main__":
    main()
