"""The generated corpora behind `keras-transformer train` (no TensorFlow work)."""

import pytest

from keras_transformer.cli import datasets


def test_number_words():
    assert datasets.number_to_words(0) == "zero"
    assert datasets.number_to_words(312) == "three hundred twelve"
    assert datasets.number_to_words(40_017) == "forty thousand seventeen"
    assert datasets.number_to_words(999_999) == (
        "nine hundred ninety nine thousand nine hundred ninety nine"
    )
    with pytest.raises(ValueError, match="n=1000000"):
        datasets.number_to_words(1_000_000)


def test_number_pairs_are_distinct_so_held_out_numbers_are_unseen():
    pairs = datasets.number_pairs(900, seed=3, maximum=1000)
    digits = [target for _, target in pairs]
    assert len(set(digits)) == 900
    held_out, train = set(digits[:90]), set(digits[90:])
    assert not held_out & train
    for words, target in pairs[:20]:
        assert datasets.number_to_words(int(target)) == words
    assert pairs == datasets.number_pairs(900, seed=3, maximum=1000)
    # More pairs than numbers: drawn with replacement.
    assert len(datasets.number_pairs(50, maximum=10)) == 50
    with pytest.raises(ValueError, match="count=0"):
        datasets.number_pairs(0)


def test_sentiment_negation_flips_the_label():
    for sentence, label in datasets.sentiment_sentences(200, seed=1):
        adjective = sentence.split()[-1]
        positive = adjective in datasets._POSITIVE
        assert label == ("negative" if positive == ("not" in sentence) else "positive")


def test_story_lines_are_deterministic_sentences():
    lines = datasets.story_lines(5, seed=2)
    assert lines == datasets.story_lines(5, seed=2)
    assert all(line.endswith(".") for line in lines)
