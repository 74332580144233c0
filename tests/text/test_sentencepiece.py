import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

CORPUS = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "Crème brûlée",
    "東京",
] * 30
HARD = [
    "Crème brûlée à São Paulo",
    "東京で寿司を食べた",
    "emoji 😀👍🏽 ok",
    "",
    "   ",
    "\ttab\nnew line",
    "  two  spaces ",
]
EXACT = dict(
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    add_dummy_prefix=False,
)


@pytest.fixture(scope="module")
def proto():
    return kt.text.train_sentencepiece(CORPUS, 320, **EXACT)


def test_reserved_ids_and_exact_round_trips(proto):
    tokenizer = kt.text.SentencePieceTokenizer(proto)
    assert tokenizer.get_vocabulary()[:7] == list(kt.text.RESERVED_TOKENS)
    assert tokenizer.vocabulary_size() <= 320
    ids = tokenizer.tokenize(HARD)
    assert ids.dtype == tf.int32
    assert [t.decode() for t in tokenizer.detokenize(ids).numpy()] == HARD
    # Control symbols are never produced from text.
    assert not set(ids.flat_values.numpy().tolist()) & {0, 2, 3, 4, 5, 6}
    assert 4 not in tokenizer.tokenize("[MASK]").numpy()


def test_invalid_utf8_becomes_the_replacement_character(proto):
    tokenizer = kt.text.SentencePieceTokenizer(proto)
    text = tokenizer.detokenize(tokenizer.tokenize(b"caf\xc3 ok"))
    assert text.numpy().decode() == "caf\ufffd ok"


def test_padding_tf_data_file_and_keras_round_trip(proto, tmp_path):
    path = os.path.join(tmp_path, "sp.model")
    with open(path, "wb") as f:
        f.write(proto)
    tokenizer = kt.text.SentencePieceTokenizer(path, sequence_length=12)
    ragged = kt.text.SentencePieceTokenizer(proto).tokenize(["the cat", "東京"])
    expected = ragged.to_tensor(shape=[None, 12]).numpy()
    dataset = tf.data.Dataset.from_tensor_slices(["the cat", "東京"]).batch(2)
    np.testing.assert_array_equal(next(iter(dataset.map(tokenizer))), expected)
    inputs = keras.Input(shape=(), dtype="string")
    model = keras.Model(inputs, tokenizer(inputs))
    model.save(os.path.join(tmp_path, "sp.keras"))
    os.remove(path)
    restored = keras.saving.load_model(os.path.join(tmp_path, "sp.keras"))
    np.testing.assert_array_equal(restored(tf.constant(["the cat", "東京"])), expected)


def test_models_of_other_libraries_with_pad_first(proto):
    other = kt.text.train_sentencepiece(
        CORPUS, 60, reserved_tokens=["[PAD]", "[UNK]"], byte_fallback=False,
        pad_piece="<pad>", unk_piece="<unk>",
    )  # fmt: skip
    tokenizer = kt.text.SentencePieceTokenizer(other)
    assert tokenizer.get_vocabulary()[:2] == ["<pad>", "<unk>"]
    assert tokenizer.token_to_id("[UNK]") == 1
    assert tokenizer.detokenize([999]).numpy().decode().strip() == "\u2047"


def test_missing_sentencepiece_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ImportError, match=r"keras-transformer\[sentencepiece\]"):
        kt.text.train_sentencepiece(CORPUS, 320)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="vocabulary_size=200"):
        kt.text.train_sentencepiece(CORPUS, 200)  # < 7 reserved + 256 bytes
    with pytest.raises(ValueError, match="vocabulary_size=5"):
        kt.text.train_sentencepiece(CORPUS, 5, byte_fallback=False)
    with pytest.raises(ValueError, match="model_type='wordpiece'"):
        kt.text.train_sentencepiece(CORPUS, 320, model_type="wordpiece")
    with pytest.raises(ValueError, match="corpus is empty"):
        kt.text.train_sentencepiece(["", " "], 320)
    with pytest.raises(FileNotFoundError, match="missing.model"):
        kt.text.SentencePieceTokenizer(os.path.join(tmp_path, "missing.model"))
    with pytest.raises(ValueError, match="not a valid SentencePiece model"):
        kt.text.SentencePieceTokenizer(b"not a proto")


MARIAN = os.path.join(
    os.path.dirname(__file__), os.pardir, "fixtures", "hf", "marian_tiny"
)


def test_vocabulary_gives_the_ids_and_round_trips(tmp_path):
    with open(os.path.join(MARIAN, "vocab.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    tokenizer = kt.text.SentencePieceTokenizer(
        os.path.join(MARIAN, "source.spm"), vocabulary=vocabulary, eos_token="</s>"
    )
    assert tokenizer.vocabulary_size() == len(vocabulary) + 1  # + our padding
    ids = tokenizer(["the cat sat"]).to_list()
    assert ids[0][-1] == vocabulary["</s>"] + 1
    pieces = [tokenizer.id_to_token(i) for i in ids[0][:-1]]
    assert "".join(pieces).replace("▁", " ").strip() == "the cat sat"
    assert [vocabulary.get(p, vocabulary["<unk>"]) + 1 for p in pieces] == ids[0][:-1]
    assert tokenizer.detokenize(ids).numpy()[0] == b"the cat sat</s>"
    text = tokenizer.detokenize(ids, skip_special_tokens=True).numpy()[0]
    assert text == b"the cat sat"
    again = kt.text.SentencePieceTokenizer.from_config(tokenizer.get_config())
    assert again(["the cat sat"]).to_list() == ids[:1]
    with pytest.raises(ValueError, match="<unk>"):
        kt.text.SentencePieceTokenizer(
            os.path.join(MARIAN, "source.spm"), vocabulary={"a": 0}
        )
    with pytest.raises(ValueError, match="0..N-1"):
        kt.text.SentencePieceTokenizer(
            os.path.join(MARIAN, "source.spm"), vocabulary={"<unk>": 0, "a": 5}
        )
