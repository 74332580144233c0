import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

HARD = [
    "Crème brûlée à São Paulo",
    "東京で寿司を食べた",
    "emoji 😀👍🏽 ok",
    "",
    "   ",
    "\ttab\nnew line\r\n",
]


def test_vocabulary_is_reserved_tokens_then_characters_in_order():
    vocab = kt.text.build_char_vocabulary(["bca", "ab😀"])
    assert vocab == [*kt.text.RESERVED_TOKENS, "a", "b", "c", "😀"]
    frequent = kt.text.build_char_vocabulary(["aaabbc"], vocabulary_size=9)
    assert frequent[7:] == ["a", "b"]  # the rarest character did not fit


def test_hard_text_round_trips_exactly():
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(HARD))
    ids = tokenizer.tokenize(HARD)
    assert ids.row_lengths().numpy().tolist() == [len(text) for text in HARD]
    assert [t.decode() for t in tokenizer.detokenize(ids).numpy()] == HARD
    assert 1 not in ids.flat_values.numpy()


def test_known_ids_unknown_characters_and_invalid_utf8():
    vocab = [*kt.text.RESERVED_TOKENS, "a", "b", "\ufffd"]  # a=7, b=8, U+FFFD=9
    tokenizer = kt.text.CharTokenizer(vocab, sequence_length=5)
    np.testing.assert_array_equal(tokenizer("abz"), [7, 8, 1, 0, 0])
    np.testing.assert_array_equal(tokenizer([b"a\xffb"]), [[7, 9, 8, 0, 0]])
    # Reserved tokens are never read from text, only placed by id.
    np.testing.assert_array_equal(tokenizer("[END]"), [1, 1, 1, 1, 1])
    assert tokenizer.detokenize([5, 7, 8, 6, 0]).numpy() == b"[START]ab[END]"


def test_tf_data_and_keras_file(tmp_path):
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(["hello"]), 4)
    dataset = tf.data.Dataset.from_tensor_slices(["hell", "lo"]).map(tokenizer)
    assert [x.tolist() for x in dataset.as_numpy_iterator()] == [
        [8, 7, 9, 9],
        [9, 10, 0, 0],
    ]
    inputs = keras.Input(shape=(), dtype="string")
    model = keras.Model(inputs, tokenizer(inputs))
    model.save(os.path.join(tmp_path, "char.keras"))
    restored = keras.saving.load_model(os.path.join(tmp_path, "char.keras"))
    np.testing.assert_array_equal(restored(tf.constant(["oh"])), [[10, 8, 0, 0]])


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"must start with '\[PAD\]'"):
        kt.text.CharTokenizer(["a", "b"])
    with pytest.raises(ValueError, match="vocabulary_size=7"):
        kt.text.build_char_vocabulary(["abc"], vocabulary_size=7)
    with pytest.raises(ValueError, match="dtype float32"):
        kt.text.CharTokenizer(kt.text.build_char_vocabulary(["a"]))(
            np.zeros(2, "float32")
        )
