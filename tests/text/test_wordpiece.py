import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

# ids:      0        1        2        3        4         5          6
VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[START]",
    "[END]",
    "the",
    "quick",
    "brown",
    "fox",
    "jump",
    "##s",
    "##ed",
    "over",  # 7-14
    "lazy",
    "dog",
    ".",
    ",",
    "!",
    "creme",
    "brulee",
    "cafe",  # 15-22
    "東",
    "京",
    "😀",
    "ok",
    "\ufffd",
]  # 23-27  fmt: skip


def write_vocab(tmp_path, tokens=VOCAB):
    path = os.path.join(tmp_path, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(token + "\n" for token in tokens))
    return path


def test_vocab_file_tokenizes_a_known_sentence(tmp_path):
    tokenizer = kt.text.WordPieceTokenizer(write_vocab(tmp_path))
    ids = tokenizer.tokenize("The quick brown fox jumped over the lazy dogs.")
    assert ids.dtype == tf.int32
    assert ids.numpy().tolist() == [7, 8, 9, 10, 11, 13, 14, 7, 15, 16, 12, 17]
    assert tokenizer.vocabulary_size() == len(VOCAB)
    assert tokenizer.id_to_token(13) == "##ed"
    assert tokenizer.token_to_id("[MASK]") == 4
    assert tokenizer.reserved_token_ids() == [0, 1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Crème BRÛLÉE, café!", "creme brulee , cafe !"),  # accents, case
        ("東京", "東 京"),  # each CJK character is a word
        ("ok 😀 ok", "ok 😀 ok"),
        ("", ""),
        (" \t\n  ", ""),
        ("jumps\u00a0over", "jumps over"),  # no-break space is a space
        ("the zebra", "the [UNK]"),
    ],
)
def test_hard_text_round_trips_to_the_normalised_text(text, expected):
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    assert tokenizer.detokenize(tokenizer.tokenize(text)).numpy().decode() == expected


def test_cased_vocabulary_keeps_case_and_accents():
    tokenizer = kt.text.WordPieceTokenizer(
        ["[PAD]", "[UNK]", "Café", "café"], lowercase=False
    )
    assert tokenizer.tokenize("Café café CAFÉ").numpy().tolist() == [2, 3, 1]


def test_invalid_utf8_is_replaced_not_a_crash():
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    ids = tokenizer.tokenize([b"the \xff dog", b"caf\xc3"])
    # An invalid byte becomes U+FFFD, a token of this vocabulary; "caf\ufffd"
    # is one word, not in the vocabulary.
    assert ids.to_list() == [[7, 27, 16], [1]]
    assert tokenizer.detokenize(ids[0]).numpy().decode() == "the \ufffd dog"


def test_batches_padding_truncation_and_unbatched():
    tokenizer = kt.text.WordPieceTokenizer(VOCAB, sequence_length=4)
    batch = tokenizer(["the fox jumps over the dog", "fox", ""])
    np.testing.assert_array_equal(batch, [[7, 10, 11, 12], [10, 0, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(tokenizer("fox"), [10, 0, 0, 0])
    ragged = kt.text.WordPieceTokenizer(VOCAB)(np.array(["fox", "the dog"]))
    assert isinstance(ragged, tf.RaggedTensor)
    assert ragged.to_list() == [[10], [7, 16]]


def test_detokenize_drops_padding_and_maps_unknown_ids():
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    text = tokenizer.detokenize(np.array([[7, 10, 0, 0], [11, 12, 999, -3]]))
    assert text.numpy().tolist() == [b"the fox", b"jumps [UNK] [UNK]"]
    ragged = tf.ragged.constant([[15, 16], []])
    assert tokenizer.detokenize(ragged).numpy().tolist() == [b"lazy dog", b""]


def test_works_in_tf_data_and_tf_function():
    tokenizer = kt.text.WordPieceTokenizer(VOCAB, sequence_length=3)
    dataset = tf.data.Dataset.from_tensor_slices(["the fox", "lazy dog jumps"])
    assert [x.tolist() for x in dataset.map(tokenizer).as_numpy_iterator()] == [
        [7, 10, 0],
        [15, 16, 11],
    ]
    batched = dataset.batch(2).map(tokenizer.tokenize)
    np.testing.assert_array_equal(next(iter(batched)), [[7, 10, 0], [15, 16, 11]])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(texts):
        return tokenizer.detokenize(tokenizer.tokenize(texts))

    assert round_trip(tf.constant(["The Fox!"])).numpy().tolist() == [b"the fox !"]


def test_keras_file_carries_the_vocabulary(tmp_path):
    tokenizer = kt.text.WordPieceTokenizer(write_vocab(tmp_path), sequence_length=5)
    inputs = keras.Input(shape=(), dtype="string")
    model = keras.Model(inputs, tokenizer(inputs))
    path = os.path.join(tmp_path, "tokenizer.keras")
    model.save(path)
    os.remove(os.path.join(tmp_path, "vocab.txt"))  # the file must not be needed
    restored = keras.saving.load_model(path)
    texts = tf.constant(["the quick fox", "dogs!"])
    np.testing.assert_array_equal(restored(texts), model(texts))
    assert restored.layers[-1].get_vocabulary() == VOCAB
    clone = kt.text.WordPieceTokenizer.from_config(tokenizer.get_config())
    assert clone.get_config() == tokenizer.get_config()


def test_saved_model_tracks_the_vocabulary(tmp_path):
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    module = tf.Module()
    module.tokenizer = tokenizer
    module.tokenize = tf.function(
        lambda texts: tokenizer.tokenize(texts).to_tensor(),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    module.detokenize = tf.function(
        tokenizer.detokenize, input_signature=[tf.TensorSpec([None, None], tf.int32)]
    )
    tf.saved_model.save(module, os.path.join(tmp_path, "saved"))
    loaded = tf.saved_model.load(os.path.join(tmp_path, "saved"))
    ids = loaded.tokenize(tf.constant(["the lazy dog", "fox"]))
    np.testing.assert_array_equal(ids, [[7, 15, 16], [10, 0, 0]])
    assert loaded.detokenize(ids).numpy().tolist() == [b"the lazy dog", b"fox"]


def test_bad_vocabularies(tmp_path):
    missing = os.path.join(tmp_path, "nope.txt")
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        kt.text.WordPieceTokenizer(missing)
    with pytest.raises(ValueError, match=r"must start with '\[PAD\]'"):
        kt.text.WordPieceTokenizer(["[UNK]", "[PAD]", "a"])
    with pytest.raises(ValueError, match=r"must contain '\[UNK\]'"):
        kt.text.WordPieceTokenizer(write_vocab(tmp_path, ["[PAD]", "a", "b"]))
    with pytest.raises(ValueError, match="token 'a' twice"):
        kt.text.WordPieceTokenizer(["[PAD]", "[UNK]", "a", "a"])
    with pytest.raises(ValueError, match="no usable WordPiece token"):
        kt.text.WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]"])
    with pytest.raises(ValueError, match="sequence_length=0"):
        kt.text.WordPieceTokenizer(VOCAB, sequence_length=0)


def test_bad_inputs():
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    with pytest.raises(
        ValueError, match="must be strings. Received: inputs with dtype int32"
    ):
        tokenizer.tokenize(np.array([1, 2], "int32"))
    with pytest.raises(ValueError, match=r"shape \(1, 2\)"):
        tokenizer.tokenize([["a", "b"]])
    with pytest.raises(ValueError, match="rank 1 or 2"):
        tokenizer.detokenize(np.zeros((1, 1, 1), "int32"))
    with pytest.raises(ValueError, match="id=28"):
        tokenizer.id_to_token(28)
    with pytest.raises(ValueError, match="token='zebra'"):
        tokenizer.token_to_id("zebra")
