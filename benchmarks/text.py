"""WordPiece tokenization speed: ours next to KerasHub's, same vocabulary, same text.

Learns one WordPiece vocabulary from the text with
`kt.text.build_wordpiece_vocabulary`, then tokenizes every non-empty line of
the text in batches with

- ours: `keras_transformer.text.WordPieceTokenizer` (BERT uncased
  normalisation),
- keras-hub: `keras_hub.tokenizers.WordPieceTokenizer` with the same
  normalisation (`lowercase=True, strip_accents=True`, splitting on
  punctuation and CJK),

each inside a `tf.function`, as `tf.data` runs them. Both are timed in turn in
one process, pass after pass, so machine drift hits them equally; each figure
is the median of `--passes` timed passes over all lines after `--warmup`
untimed ones (the first traces the function). It also reports the share of
lines both tokenize to identical ids.

Run it with `python benchmarks/text.py` (`--smoke` for a tiny check);
`pip install -e ".[bench]"` provides keras-hub.
"""

import argparse
import pathlib

import keras_hub
import tensorflow as tf
from tokenizer_race import race

import keras_transformer as kt

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_TEXT = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=str(DEFAULT_TEXT), help="a UTF-8 text")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a tiny, fast run")
    return parser.parse_args()


def main():
    args = parse_args()
    lines = [line for line in pathlib.Path(args.path).read_text().splitlines()]
    lines = [line for line in lines if line.strip()]
    if args.smoke:
        lines, args.passes, args.warmup = lines[:2000], 2, 1
    vocabulary = kt.text.build_wordpiece_vocabulary(
        lines, args.vocabulary_size, verbose=False, lower_thresh=2
    )
    ours = kt.text.WordPieceTokenizer(vocabulary)
    hub = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary, lowercase=True, strip_accents=True, split_on_cjk=True
    )
    functions = {
        "ours": tf.function(ours.tokenize),
        "keras-hub": tf.function(hub.tokenize),
    }
    same, speed = race(functions, lines, args.batch_size, args.passes, args.warmup)
    print(
        f"{len(lines):,} lines of {pathlib.Path(args.path).name}, vocabulary "
        f"{len(vocabulary):,}, batch {args.batch_size}, median of {args.passes} "
        f"passes; identical ids on {same:.2%} of lines"
    )
    for name, value in speed.items():
        print(f"{name:>10}: {value:>12,.0f} sentences/s")
    print(f"ratio ours / keras-hub: {speed['ours'] / speed['keras-hub']:.2f}x")


if __name__ == "__main__":
    main()
