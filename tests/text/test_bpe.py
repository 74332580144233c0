"""BytePairTokenizer: GPT-2's ids (plus one) on hard text, against
GPT2Tokenizer's own (tests/fixtures/hf/gpt2_tokens.json, made by
tests/fixtures/make_hf_fixtures.py with OpenAI's files); merges by rank on
hand-made vocabularies; in-graph use and bad input."""

import gzip
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
CHARACTERS = kt.text.bytes_to_unicode()


def read(name):
    with gzip.open(os.path.join(HF, "gpt2_tokenizer", f"{name}.gz"), "rt") as f:
        return f.read()


@pytest.fixture(scope="module")
def gpt2():
    vocabulary = json.loads(read("vocab.json"))
    return kt.text.BytePairTokenizer(vocabulary, read("merges.txt").splitlines())


def small(extra, merges, **kwargs):
    """The 256 byte tokens (ids 0..255 in GPT-2's byte order) plus `extra`."""
    vocabulary = {c: i for i, c in enumerate(CHARACTERS.values())}
    for token in extra:
        vocabulary[token] = len(vocabulary)
    return kt.text.BytePairTokenizer(vocabulary, merges, **kwargs)


def test_ids_are_gpt2_tokenizers_ids_plus_one_on_hard_text(gpt2):
    with open(os.path.join(HF, "gpt2_tokens.json"), encoding="utf-8") as f:
        ref = json.load(f)
    ours = gpt2(ref["texts"]).to_list()
    for text, theirs, mine in zip(ref["texts"], ref["ids"], ours, strict=True):
        assert [i - 1 for i in mine] == theirs, repr(text)
    back = gpt2.detokenize(gpt2(ref["texts"])).numpy()
    assert [b.decode() for b in back] == ref["texts"]  # exactly the text


def test_text_after_a_nul_byte_is_kept(gpt2):
    # tensorflow-text's regex_split ends a text at a NUL byte; the ids are
    # `tokenizers`' on GPT-2's files.
    texts = ["NUL\x00 inside the text", "a\x00\x00b c"]
    theirs = [[45, 6239, 188, 2641, 262, 2420], [64, 188, 188, 65, 269]]
    assert [[i - 1 for i in row] for row in gpt2(texts).to_list()] == theirs
    back = gpt2.detokenize(gpt2(texts)).numpy().tolist()
    assert back == [t.encode() for t in texts]


def test_real_vocabulary_facts(gpt2):
    assert gpt2.vocabulary_size() == 50257 + 1
    assert gpt2.id_to_token(0) == "[PAD]" and gpt2.id_to_token(1) == "!"
    assert gpt2.token_to_id("<|endoftext|>") == 50256 + 1
    # Special tokens in the text are text: input cannot forge them.
    assert 50257 not in to_numpy(gpt2("<|endoftext|>")).tolist()


def test_lowest_rank_first_and_repeated_pairs_left_to_right():
    # "b c" outranks "a b", so "abc" is a + bc, and "a bc" is no merge.
    tokenizer = small(["bc", "ab"], ["b c", "a b"])
    bc, ab, a = 257, 258, CHARACTERS_ID("a")
    assert to_numpy(tokenizer("abc")).tolist() == [a, bc]
    assert to_numpy(tokenizer("abab")).tolist() == [ab, ab]
    # A pair repeated ("a a a a a"): merged left to right, then again.
    tokenizer = small(["aa", "aaaa"], ["a a", "aa aa"])
    assert to_numpy(tokenizer("aaaaa")).tolist() == [258, a]
    assert to_numpy(tokenizer("aaa")).tolist() == [257, a]


def CHARACTERS_ID(character):
    return list(CHARACTERS.values()).index(character) + 1


def test_bytes_the_vocabulary_lacks_are_dropped_before_merging():
    # Real vocabularies lack some bytes (SmolLM2's 21). Hugging Face's BPE
    # drops them before merging: `tokenizers` gives "x abc\x04d" ->
    # ["x", "Ġac", "d"] here, "b" and byte 4 dropped, "a" and "c" merged.
    lacking = (ord("b"), 4)
    characters = [c for b, c in CHARACTERS.items() if b not in lacking]
    vocabulary = {c: i for i, c in enumerate(characters + ["ac", "Ġac"])}
    tokenizer = kt.text.BytePairTokenizer(vocabulary, ["a c", "Ġ ac"])
    x, d = vocabulary["x"] + 1, vocabulary["d"] + 1
    ids = tokenizer(["abc", "x abc\x04d", "b"]).to_list()
    assert ids == [[255], [x, 256, d], []]
    assert tokenizer.detokenize(ids).numpy().tolist() == [b"ac", b"x acd", b""]


def test_words_split_as_gpt2_splits_them():
    # Merges never cross words: "Ġ Ġ" joins spaces only inside a run, and the
    # run's last space goes to the next word.
    tokenizer = small(["ĠĠ", "Ġb", "bĠ"], ["Ġ Ġ", "Ġ b", "b Ġ"])
    space, newline = CHARACTERS_ID("Ġ"), CHARACTERS_ID("Ċ")
    a, b = CHARACTERS_ID("a"), CHARACTERS_ID("b")
    assert to_numpy(tokenizer("a   b")).tolist() == [a, 257, 258]
    assert to_numpy(tokenizer("a  \nb")).tolist() == [a, 257, newline, b]
    assert to_numpy(tokenizer("b  ")).tolist() == [b, 257]  # trailing run whole
    # Contractions are words of their own, without a space: GPT-2's
    # pattern splits "'s 's" as "'s", " '", "s", so the merge "' s" joins
    # the first pair only.
    tokenizer = small(["'s"], ["' s"])
    apostrophe, s = CHARACTERS_ID("'"), CHARACTERS_ID("s")
    assert to_numpy(tokenizer("'s 's")).tolist() == [257, space, apostrophe, s]


@pytest.mark.parametrize(
    "text, words",
    [  # GPT-2's own pattern (the `regex` module) on these texts
        ("'s 's", ["'s", " '", "s"]),
        (
            "it's you'll  I'd 'S",
            ["it", "'s", " you", "'ll", " ", " I", "'d", " '", "S"],
        ),
        ("don't'", ["don", "'t", "'"]),
    ],
)
def test_pretokenize_splits_contractions_as_gpt2(text, words):
    pieces = kt.text.bpe.pretokenize(tf.constant([text]))
    assert [w.decode() for w in pieces.flat_values.numpy()] == words


def test_in_graph_padding_saving_and_detokenize(tmp_path):
    tokenizer = small(["Ġc", "at", "Ġcat"], ["Ġ c", "a t", "Ġc at"], sequence_length=4)
    expected = [[CHARACTERS_ID("a"), 259, 0, 0], [259, 259, 0, 0]]
    dataset = tf.data.Dataset.from_tensor_slices(["a cat", " cat cat"]).batch(2)
    assert next(iter(dataset.map(tokenizer))).numpy().tolist() == expected
    model = keras.Sequential([keras.Input((), dtype="string"), tokenizer])
    model.save(tmp_path / "t.keras")
    loaded = keras.saving.load_model(tmp_path / "t.keras")
    assert to_numpy(loaded(tf.constant(["a cat", " cat cat"]))).tolist() == expected
    module = tf.Module()
    module.tokenizer = tokenizer
    module.f = tf.function(
        tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)]
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    served = tf.saved_model.load(str(tmp_path / "saved"))
    assert served.f(tf.constant(["a cat", " cat cat"])).numpy().tolist() == expected
    # Padding and ids outside the vocabulary are dropped.
    text = tokenizer.detokenize([[259, 0, 999, -3, 259]]).numpy().tolist()
    assert text == [b" cat cat"]


def test_bad_input(tmp_path):
    vocabulary = {c: i for i, c in enumerate(CHARACTERS.values())}
    with pytest.raises(ValueError, match="line 2 must be two tokens.*'a b c'"):
        kt.text.BytePairTokenizer(vocabulary, ["a b", "a b c"])
    with pytest.raises(ValueError, match="lacks the token 'ab'"):
        kt.text.BytePairTokenizer(vocabulary, ["a b"])
    with pytest.raises(ValueError, match="ids 0..N-1"):
        kt.text.BytePairTokenizer({**vocabulary, "ab": 7}, [])
    with pytest.raises(FileNotFoundError, match="vocab.json"):
        kt.text.BytePairTokenizer(tmp_path / "vocab.json", [])
    (tmp_path / "vocab.json").write_text("{not json")
    with pytest.raises(ValueError, match="vocab.json.*malformed"):
        kt.text.BytePairTokenizer(tmp_path / "vocab.json", [])
    with pytest.raises(FileNotFoundError, match="`merges` file not found: 'a b'"):
        kt.text.BytePairTokenizer(vocabulary, "a b")  # a string is a path
    with pytest.raises(ValueError, match="`merges` must be.*merges=5"):
        kt.text.BytePairTokenizer(vocabulary, 5)
    np.testing.assert_array_equal(
        to_numpy(kt.text.BytePairTokenizer(vocabulary, [])("")), []
    )


def test_bos_eos_and_special_tokens(tmp_path):
    tokenizer = small(
        ["<s>", "</s>", "<pad>", "Ġc", "at", "Ġcat"],
        ["Ġ c", "a t", "Ġc at"],
        bos_token="<s>",
        eos_token="</s>",
        special_tokens=["<pad>"],
    )
    bos, eos, pad = (tokenizer.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))
    cat = tokenizer.token_to_id("Ġcat")
    a = tokenizer.token_to_id("a")
    assert tokenizer(["a cat", ""]).to_list() == [[bos, a, cat, eos], [bos, eos]]
    # Truncation keeps both ends, in tokenize and in truncate.
    long = "a" + " cat" * 5
    assert tokenizer.truncate(tokenizer([long]), 4).to_list() == [[bos, a, cat, eos]]
    dense = kt.text.BytePairTokenizer.from_config(
        {**tokenizer.get_config(), "sequence_length": 4}
    )
    assert to_numpy(dense([long, "a"])).tolist() == [
        [bos, a, cat, eos],
        [bos, a, eos, 0],
    ]
    # detokenize keeps them, as transformers' decode; skip_special_tokens
    # drops them, and the other special tokens.
    ids = [[bos, a, pad, cat, eos]]
    assert tokenizer.detokenize(ids).numpy()[0] == b"<s>a<pad> cat</s>"
    text = tokenizer.detokenize(ids, skip_special_tokens=True).numpy()[0]
    assert text == b"a cat"
    with pytest.raises(ValueError, match="eos_token"):
        small([], [], eos_token="</s>")
    with pytest.raises(ValueError, match="sequence_length"):
        small(["<s>", "</s>"], [], bos_token="<s>", eos_token="</s>", sequence_length=2)
