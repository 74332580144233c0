import pytest
import tensorflow as tf

import keras_transformer as kt

CORPUS = [
    "The cat sat on the mat.",
    "The dog sat on the log!",
    "Cats and dogs: the cat chased the dog.",
    "Crème brûlée for the cat",
] * 25


def test_vocabulary_starts_with_reserved_tokens_and_covers_the_corpus():
    vocab = kt.text.build_wordpiece_vocabulary(CORPUS, 120)
    assert vocab[:7] == list(kt.text.RESERVED_TOKENS)
    assert len(vocab) <= 120 and len(set(vocab)) == len(vocab)
    assert {"the", "cat", "sat", "##s"} <= set(vocab)
    assert "creme" in vocab or "##e" in vocab  # accents stripped, lower-cased
    assert "C" not in vocab and "è" not in vocab
    tokenizer = kt.text.WordPieceTokenizer(vocab)
    ids = tokenizer.tokenize(CORPUS[:4]).flat_values.numpy()
    assert 1 not in ids  # every word of the corpus can be spelled
    assert tokenizer.detokenize(tokenizer.tokenize("The cats sat.")).numpy() == (
        b"the cats sat ."
    )


@pytest.mark.parametrize(
    "make_data",
    [
        lambda: tf.data.Dataset.from_tensor_slices(CORPUS),
        lambda: tf.data.Dataset.from_tensor_slices(CORPUS).batch(7),
        lambda: (text for text in CORPUS),
        lambda: [text.encode() for text in CORPUS],
    ],
    ids=["dataset", "batched-dataset", "generator", "bytes"],
)
def test_every_kind_of_corpus_gives_the_same_vocabulary(make_data):
    expected = kt.text.build_wordpiece_vocabulary(CORPUS, 80)
    assert kt.text.build_wordpiece_vocabulary(make_data(), 80) == expected


def test_size_is_a_ceiling_and_custom_reserved_tokens():
    vocab = kt.text.build_wordpiece_vocabulary(
        CORPUS, 20, reserved_tokens=["[PAD]", "[UNK]", "<s>"]
    )
    assert len(vocab) == 20  # characters alone need more: cut to the size
    assert vocab[:3] == ["[PAD]", "[UNK]", "<s>"]


def test_progress_bar(capsys):
    kt.text.build_wordpiece_vocabulary(CORPUS, 80, verbose=True)
    assert "100/100" in capsys.readouterr().out
    kt.text.build_wordpiece_vocabulary(CORPUS, 80)  # "auto": short corpus
    assert capsys.readouterr().out == ""


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocabulary_size=7"):
        kt.text.build_wordpiece_vocabulary(CORPUS, 7)
    with pytest.raises(ValueError, match=r"must start with '\[PAD\]', '\[UNK\]'"):
        kt.text.build_wordpiece_vocabulary(CORPUS, 50, reserved_tokens=["[UNK]"])
    with pytest.raises(ValueError, match="not a single string"):
        kt.text.build_wordpiece_vocabulary("the cat sat", 50)
    with pytest.raises(ValueError, match="only strings"):
        kt.text.build_wordpiece_vocabulary([1, 2], 50)
    with pytest.raises(ValueError, match="corpus is empty"):
        kt.text.build_wordpiece_vocabulary(["", "  "], 50)
    with pytest.raises(ValueError, match="element_spec"):
        kt.text.build_wordpiece_vocabulary(tf.data.Dataset.range(3), 50)
    with pytest.raises(ValueError, match="verbose=2"):
        kt.text.build_wordpiece_vocabulary(CORPUS, 50, verbose=2)
