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

import keras_hub
import tensorflow as tf
from tokenizer_race import race

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
    same, speed = race(functions, lines, args.batch_size, args.passes, args.warmup)
    print(
        f"{len(lines):,} lines of {pathlib.Path(args.path).name}, vocabulary "
        f"{len(vocabulary):,}, {len(merges):,} merges, batch {args.batch_size}, "
        f"median of {args.passes} passes; identical ids on {same:.2%} of lines"
    )
    for name, value in speed.items():
        print(f"{name:>10}: {value:>12,.0f} lines/s")
    print(f"ratio ours / keras-hub: {speed['ours'] / speed['keras-hub']:.2f}x")


if __name__ == "__main__":
    main()
