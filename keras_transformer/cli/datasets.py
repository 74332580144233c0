"""The corpora `keras-transformer train` uses without `--data`, and the
readers of the files it is given.

- `tiny_shakespeare`: Tiny Shakespeare (Karpathy's char-rnn corpus, public
  domain, 1.1 MB), shipped gzipped as package data: the default of `gpt2`.
- `number_pairs`: English number words and their digits, a translation task
  (the default of `seq2seq`).
- `sentiment_sentences`: short reviews with a label; negation flips it, so a
  bag of words is not enough (the default of `bert`).
- `story_lines`: sentences from a small grammar, for language models.

The generated ones are made by code, deterministic for a seed, and learnable
in a few minutes on a CPU.

File rules (`read_text`, `read_tsv`): bytes that are not UTF-8 become U+FFFD;
in TSV files, empty lines are skipped, and so are lines over
`MAX_LINE_CHARACTERS` characters (counted and reported, never truncated, so a
label is never cut off); a line without a tab is an error naming the line.
"""

import gzip
import importlib.resources

import numpy as np

from keras_transformer.text import files

MAX_LINE_CHARACTERS = 100_000


def tiny_shakespeare():
    """The text of Tiny Shakespeare (1,115,394 characters), from package data.

    Its SHA-256 is `kt.text.files.TINY_SHAKESPEARE_SHA256`, the digest of the
    file `kt.text.download_tiny_shakespeare` downloads.
    """
    data = importlib.resources.files(__package__).joinpath(
        "data/tinyshakespeare.txt.gz"
    )
    return gzip.decompress(data.read_bytes()).decode("utf-8")


def read_text(path):
    """A whole plain-text file as one string (invalid UTF-8 -> U+FFFD)."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return f.read().replace("\r\n", "\n")


def read_tsv(path, columns=2):
    """The rows of a TSV file and the number of over-long lines skipped:
    `kt.text.read_tsv` with lines over `MAX_LINE_CHARACTERS` left out.

    Returns `(rows, skipped)`: `rows` a list of `(line number, fields)`, with
    at least `columns` fields each, and `skipped` the count of lines over
    `MAX_LINE_CHARACTERS` characters left out. Empty (or whitespace-only)
    lines are skipped silently.

    Raises:
        FileNotFoundError: `path` is not a file.
        ValueError: a line has fewer than `columns` tab-separated fields.
    """
    return files.read_tsv(path, columns, max_line_characters=MAX_LINE_CHARACTERS)


_ONES = "zero one two three four five six seven eight nine".split()
_TEENS = (
    "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_to_words(n):
    """0 <= n < 1,000,000 in English words: 312 -> 'three hundred twelve'."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"`n` must be in [0, 1000000). Received: n={n}")
    if n < 10:
        return _ONES[n]
    if n < 20:
        return _TEENS[n - 10]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return (
            _ONES[n // 100]
            + " hundred"
            + ("" if rest == 0 else " " + number_to_words(rest))
        )
    rest = n % 1000
    return (
        number_to_words(n // 1000)
        + " thousand"
        + ("" if rest == 0 else " " + number_to_words(rest))
    )


def number_pairs(count, seed=0, maximum=100_000):
    """`count` (words, digits) pairs, e.g. ('four hundred two', '402').

    The numbers are drawn from `[0, maximum)`, all different while
    `count <= maximum`, so a held-out slice holds numbers never trained on.

    Examples:
        >>> from keras_transformer.cli import datasets
        >>> datasets.number_pairs(2, seed=1, maximum=1000)
        [('four hundred seventy two', '472'), ('five hundred eleven', '511')]
    """
    if count < 1:
        raise ValueError(f"`count` must be >= 1. Received: count={count}")
    rng = np.random.default_rng(seed)
    numbers = rng.choice(maximum, count, replace=count > maximum)
    return [(number_to_words(int(n)), str(int(n))) for n in numbers]


_SUBJECTS = [
    "the movie",
    "the film",
    "this book",
    "the story",
    "the acting",
    "the food",
    "the service",
    "this album",
    "the ending",
    "the show",
]
_POSITIVE = ["great", "wonderful", "good", "excellent", "lovely", "fun", "brilliant"]
_NEGATIVE = ["bad", "awful", "boring", "terrible", "poor", "dull", "weak"]
_ADVERBS = ["", "really ", "very ", "quite ", "truly "]


def sentiment_sentences(count, seed=0):
    """`count` (sentence, label) pairs with labels 'positive' / 'negative'.

    About a third of the sentences negate the adjective ("was not great"),
    which flips the label.
    """
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        positive = bool(rng.integers(2))
        negated = rng.random() < 0.35
        adjective = rng.choice(_POSITIVE if positive else _NEGATIVE)
        verb = "was not" if negated else "was"
        sentence = f"{rng.choice(_SUBJECTS)} {verb} {rng.choice(_ADVERBS)}{adjective}"
        pairs.append((sentence, "positive" if positive != negated else "negative"))
    return pairs


_NAMES = ["anna", "ben", "the cat", "the dog", "my friend", "the old man", "a child"]
_VERBS = ["saw", "liked", "found", "followed", "painted", "called"]
_OBJECTS = [
    "a red ball",
    "the river",
    "a small house",
    "the moon",
    "an apple",
    "the green door",
    "a blue bird",
]
_PLACES = ["in the park", "at home", "by the sea", "in the morning", "at night"]


def story_lines(count, seed=0):
    """`count` sentences like 'anna saw the moon by the sea.'"""
    rng = np.random.default_rng(seed)
    return [
        f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
        f"{rng.choice(_PLACES)}."
        for _ in range(count)
    ]
