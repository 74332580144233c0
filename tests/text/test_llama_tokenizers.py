"""Tokenizers of Llama, Mistral and Qwen2 folders: transformers' ids (plus
one) and decode on hard text, against tests/fixtures/hf/tokenizers/
reference.json (made by tests/fixtures/hf/make_llama_tokenizers.py from
the folders transformers reloaded); in-graph use, saving and bad files."""

import json
import os
import shutil

import keras
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.text import hf_llama, pretokenizers

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
FOLDERS = os.path.join(HF, "tokenizers")
NAMES = ["llama_sp", "llama_sp_model_only", "qwen2_bpe", "llama3_bpe", "smollm2_bpe"]
with open(os.path.join(FOLDERS, "reference.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)
TO_BYTE = {c: b for b, c in kt.text.bytes_to_unicode().items()}


@pytest.fixture(scope="module", params=NAMES)
def folder(request):
    name = request.param
    return name, kt.text.tokenizer_from_pretrained(os.path.join(FOLDERS, name))


def test_ids_are_transformers_ids_plus_one_on_hard_text(folder):
    name, tokenizer = folder
    ref = REFERENCE[name]
    ours = tokenizer(ref["texts"]).to_list()
    for text, theirs, mine in zip(ref["texts"], ref["ids"], ours, strict=True):
        assert [i - 1 for i in mine] == theirs, repr(text)


def test_detokenize_is_decode_with_and_without_special_tokens(folder):
    name, tokenizer = folder
    ref = REFERENCE[name]
    ids = tf.ragged.constant([[i + 1 for i in row] for row in ref["ids"]], tf.int32)
    for skip, key in [(False, "decode"), (True, "decode_skip_special")]:
        back = tokenizer.detokenize(ids, skip_special_tokens=skip).numpy()
        for text, mine, theirs in zip(ref["texts"], back, ref[key], strict=True):
            assert mine.decode() == theirs, (repr(text), skip)


def test_vocabulary_and_special_tokens(folder):
    name, tokenizer = folder
    ref = REFERENCE[name]
    assert tokenizer.vocabulary_size() == ref["vocab_size"] + 1
    assert tokenizer.id_to_token(0) == "[PAD]"
    assert tokenizer.special_tokens_map == ref["special_tokens_map"]
    bos = {"llama_sp": "<s>", "llama_sp_model_only": "<s>"}.get(name)
    bos = bos or {"llama3_bpe": "<|begin_of_text|>"}.get(name)
    assert tokenizer.bos_token == bos and tokenizer.eos_token is None
    # Special tokens typed in the text are those tokens, as in transformers.
    end = ref["special_tokens_map"]["eos_token"]
    ids = tokenizer(f"a{end}").numpy().tolist()
    assert tokenizer.token_to_id(end) in ids
    assert tokenizer.emitted_vocabulary_size() == tokenizer.vocabulary_size()


@pytest.mark.parametrize(
    "name, pattern", [("qwen2_bpe", "qwen2"), ("llama3_bpe", "llama3")]
)
def test_words_are_the_pre_tokenizers_words(name, pattern):
    # The regexes' look-ahead `\s+(?!\S)` and Unicode `\s`, computed by RE2.
    ref = REFERENCE[name]
    words = pretokenizers.split_words(tf.constant(ref["pretokenize_texts"]), pattern)
    for text, mine, theirs in zip(
        ref["pretokenize_texts"], words.to_list(), ref["pretokenize"], strict=True
    ):
        theirs = [bytes(TO_BYTE[c] for c in w).decode() for w in theirs]
        assert [w.decode() for w in mine] == theirs, repr(text)


def test_ignore_merges_keeps_whole_words_as_tokenizers_does():
    # Merges alone split "abc" as a + bc; Llama-3's ignore_merges keeps a
    # word of the vocabulary whole.
    case = REFERENCE["ignore_merges"]
    tokenizer = hf_llama.byte_level(case["tokenizer"], "tokenizer.json")
    ours = tokenizer(case["texts"]).to_list()
    assert [[i - 1 for i in row] for row in ours] == case["ids"]
    assert tokenizer.get_config()["ignore_merges"] is True


def test_in_graph_keras_file_and_config_round_trip(folder, tmp_path):
    name, tokenizer = folder
    texts = REFERENCE[name]["texts"][:12]
    expected = tokenizer(texts).to_list()
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(4).map(tokenizer)
    assert [row for batch in dataset for row in batch.to_list()] == expected
    model = keras.Sequential([keras.Input((), dtype="string"), tokenizer])
    model.save(tmp_path / "t.keras")
    loaded = keras.saving.load_model(tmp_path / "t.keras").layers[-1]
    assert type(loaded) is type(tokenizer)
    assert loaded(texts).to_list() == expected
    assert loaded.chat_template == tokenizer.chat_template is not None
    assert loaded.special_tokens_map == tokenizer.special_tokens_map
    again = type(tokenizer).from_config(tokenizer.get_config())
    assert again(texts).to_list() == expected
    module = tf.Module()
    module.tokenizer = tokenizer
    module.f = tf.function(
        tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)]
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    served = tf.saved_model.load(str(tmp_path / "saved"))
    assert served.f(tf.constant(texts)).to_list() == expected


def test_sentencepiece_prefix_schemes():
    tokenizer = kt.text.tokenizer_from_pretrained(os.path.join(FOLDERS, "llama_sp"))
    config = tokenizer.get_config()
    assert config["prepend_scheme"] == "first"
    pieces = {
        scheme: [
            tokenizer.id_to_token(int(i))
            for i in type(tokenizer)
            .from_config({**config, "prepend_scheme": scheme})("a</s>a")
            .numpy()
        ]
        for scheme in ("first", "always", "never")
    }
    assert pieces["first"] == ["<s>", "▁a", "</s>", "a"]
    assert pieces["always"] == ["<s>", "▁a", "</s>", "▁a"]
    assert pieces["never"] == ["<s>", "a", "</s>", "a"]


def copy(name, tmp_path, edit):
    target = tmp_path / name
    shutil.copytree(os.path.join(FOLDERS, name), target)
    with open(target / "tokenizer.json", encoding="utf-8") as f:
        data = json.load(f)
    edit(data)
    with open(target / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(data, f)
    return target


def test_unsupported_files_are_refused(tmp_path):
    def lowercase(data):
        data["normalizer"] = {"type": "Lowercase"}

    with pytest.raises(ValueError, match="normalizer is not supported.*Lowercase"):
        kt.text.tokenizer_from_pretrained(copy("qwen2_bpe", tmp_path, lowercase))

    def other_regex(data):
        data["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\w+|\s+"

    with pytest.raises(ValueError, match=r"pre-tokenizer is not supported.*\\\\w\+"):
        kt.text.tokenizer_from_pretrained(copy("llama3_bpe", tmp_path, other_regex))

    def whitespace(data):
        data["pre_tokenizer"] = {"type": "Whitespace"}

    with pytest.raises(ValueError, match="pre-tokenizer.*'Whitespace'"):
        kt.text.tokenizer_from_pretrained(copy("qwen2_bpe", tmp_path / "w", whitespace))

    def lstrip(data):
        data["added_tokens"][2]["lstrip"] = True

    with pytest.raises(ValueError, match="`lstrip`.*<\\|im_end\\|>"):
        kt.text.tokenizer_from_pretrained(copy("qwen2_bpe", tmp_path / "l", lstrip))
    vocabulary = {c: i for i, c in enumerate(kt.text.bytes_to_unicode().values())}
    with pytest.raises(ValueError, match="split_pattern.*'gpt4'"):
        kt.text.BytePairTokenizer(vocabulary, [], split_pattern="gpt4")
    with pytest.raises(ValueError, match="normalization.*'NFX'"):
        kt.text.BytePairTokenizer(vocabulary, [], normalization="NFX")
    with pytest.raises(ValueError, match="added_tokens.*'<x>'"):
        kt.text.BytePairTokenizer(vocabulary, [], added_tokens=["<x>"])
    spm = os.path.join(FOLDERS, "llama_sp", "tokenizer.model")
    with pytest.raises(ValueError, match="prepend_scheme.*'sometimes'"):
        kt.text.LlamaTokenizer(spm, prepend_scheme="sometimes")
    with pytest.raises(ValueError, match="added_tokens.*'<x>'"):
        kt.text.LlamaTokenizer(spm, added_tokens=["<x>"])


def test_folders_without_tokenizer_or_too_large_are_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "mistral"}')
    with pytest.raises(FileNotFoundError, match="tokenizer.json or a tokenizer.model"):
        kt.text.tokenizer_from_pretrained(tmp_path)
    for name in ("llama_sp", "qwen2_bpe"):
        target = tmp_path / name
        shutil.copytree(os.path.join(FOLDERS, name), target)
        config = {"model_type": "qwen2", "vocab_size": 500}
        (target / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match="512 tokens, more than.*vocab_size=500"):
            kt.text.tokenizer_from_pretrained(target)


def test_normalizing_sentencepiece_models_are_refused():
    proto = kt.text.train_sentencepiece(["a b c", "b c a"] * 10, 270)  # nmt_nfkc
    with pytest.raises(ValueError, match="normalizes text"):
        kt.text.LlamaTokenizer(proto)
