"""Tokenizer folders as hub repositories carry them (issue #42): tiny
vocabularies under the real sections of Llama-2, Mistral, Llama-3.2,
Qwen2.5 and SmolLM2 files, and GPT-2-style folders whose end token is an
added token (also one only tokenizer.json adds, beside a vocab.json and
merges.txt without it), against tests/fixtures/hf/hub_tokenizers/reference.json
(made by make_hub_tokenizers.py there with tokenizers and transformers)."""

import json
import os
import re
import shutil

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.text import hf_sentencepiece

FOLDERS = os.path.join(
    os.path.dirname(__file__), os.pardir, "fixtures", "hf", "hub_tokenizers"
)
with open(os.path.join(FOLDERS, "reference.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)
HUB = ["llama2", "mistral", "llama3", "qwen25", "smollm2"]
NAMES = HUB + ["gpt2_added", "gpt2_added_json", "gpt2_added_files"]


class Folders(dict):
    """Each folder's tokenizer, loaded on first use (a folder that fails
    fails its own tests only)."""

    def __missing__(self, name):
        self[name] = kt.text.tokenizer_from_pretrained(os.path.join(FOLDERS, name))
        return self[name]


@pytest.fixture(scope="module")
def loaded():
    return Folders()


def decoded(tokenizer, ids, **kwargs):
    ids = tf.ragged.constant([[i + 1 for i in row] for row in ids], tf.int32)
    return [t.decode() for t in tokenizer.detokenize(ids, **kwargs).numpy()]


@pytest.mark.parametrize("name", NAMES)
def test_ids_are_the_reference_ids_plus_one(loaded, name):
    # llama2 / mistral: only tokenizer.json (Item 3); llama3: the
    # Sequence[ByteLevel, TemplateProcessing] post-processor (Item 2);
    # gpt2_added*: <|endoftext|> is an added token (Item 1).
    ref = REFERENCE[name]
    ours = loaded[name](ref["texts"]).to_list()
    for text, theirs, mine in zip(ref["texts"], ref["ids"], ours, strict=True):
        assert [i - 1 for i in mine] == theirs, repr(text)


@pytest.mark.parametrize("name", NAMES)
def test_detokenize_keeps_special_tokens_unless_asked(loaded, name):
    ref = REFERENCE[name]
    ours = decoded(loaded[name], ref["ids"])
    assert ours == ref["decode"]
    # The tokenizers library's own decode (where the fixture has it) too:
    # transformers' and it agree on these rows, and we with both.
    assert ours == ref.get("tokenizers_decode", ours)
    skipped = decoded(loaded[name], ref["ids"], skip_special_tokens=True)
    assert skipped == ref["decode_skip_special"]


@pytest.mark.parametrize("name", ["llama2", "mistral"])
def test_byte_pieces_that_form_no_character_are_one_replacement_each(loaded, name):
    # tokenizers' ByteFallback: a run of byte pieces that is not UTF-8 is one
    # U+FFFD per piece, its valid start included.
    ref = REFERENCE[name]
    assert decoded(loaded[name], ref["byte_rows"]) == ref["byte_decode"]
    assert ref["byte_decode"][0] == "a\ufffd\ufffd\ufffd\ufffdx"


@pytest.mark.parametrize("name", HUB)
def test_chat_templates_with_tools_render_as_transformers(loaded, name):
    tokenizer = loaded[name]
    for chat in REFERENCE[name]["chats"]:
        args = (chat["messages"],)
        options = {"tools": chat["tools"], "date_string": "26 Jul 2024"}
        if chat["error"] is None:
            text = tokenizer.apply_chat_template(*args, **options)
            assert text == chat["text"], chat["messages"]
        else:
            # raise_exception, or a message the template cannot read (an
            # assistant turn without content in Llama-2's): as transformers.
            with pytest.raises(ValueError, match=re.escape(chat["error"])):
                tokenizer.apply_chat_template(*args, **options)


def test_what_each_folder_reads(loaded):
    assert loaded["llama3"].bos_token == "<|begin_of_text|>"
    assert loaded["llama2"].get_config()["prepend_scheme"] == "prepend"
    assert loaded["mistral"].token_to_id("<|im_end|>") == 513 + 1
    qwen = loaded["qwen25"]  # <tool_call> is added but not special
    assert "<tool_call>" in qwen.added_tokens
    assert "<tool_call>" not in qwen.special_tokens
    for name in ("gpt2_added", "gpt2_added_json", "gpt2_added_files"):
        tokenizer = loaded[name]
        end = REFERENCE[name]["eos_token_id"] + 1
        assert tokenizer.token_to_id("<|endoftext|>") == end
        assert tokenizer("a<|endoftext|>").numpy().tolist()[-1] == end


def test_tokenizer_json_defines_a_folder_that_also_has_vocab_and_merges():
    """gpt2_added_files: vocab.json and merges.txt lack <|endoftext|>, which
    only tokenizer.json's added_tokens holds (tokenizer_config.json as
    transformers 5 saves it): read as transformers reads it, the folder's
    own eos_token_id is the task's end token and greedy text is
    transformers'."""
    folder = os.path.join(FOLDERS, "gpt2_added_files")
    ref = REFERENCE["gpt2_added_files"]
    assert {"vocab.json", "merges.txt", "tokenizer.json"} <= set(ref["files"])
    task = kt.tasks.TextGenerator.from_pretrained(folder)
    assert task.end_token_id == ref["model_eos_token_id"] + 1 == 301
    assert "<|endoftext|>" in task.tokenizer.special_tokens
    for case in ref["greedy"]:
        assert case["min_logit_margin"] > 1e-4
        text = task.generate(case["prompt"], max_new_tokens=6)
        assert text == case["text"], case


def test_a_keras_file_keeps_the_sentencepiece_model_and_flags(loaded, tmp_path):
    import keras

    for name in ("mistral", "gpt2_added"):
        tokenizer = loaded[name]
        texts = REFERENCE[name]["texts"][:20]
        model = keras.Sequential([keras.Input((), dtype="string"), tokenizer])
        model.save(tmp_path / f"{name}.keras")
        again = keras.saving.load_model(tmp_path / f"{name}.keras").layers[-1]
        assert again(texts).to_list() == tokenizer(texts).to_list()
        assert again.special_tokens == tokenizer.special_tokens


def edited(name, tmp_path, file, edit):
    target = tmp_path / name
    shutil.copytree(os.path.join(FOLDERS, name), target)
    with open(target / file, encoding="utf-8") as f:
        data = json.load(f)
    edit(data)
    with open(target / file, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return target


def test_clean_up_tokenization_spaces_as_transformers_5(tmp_path):
    # transformers 5 ignores the flag for BPE tokenizers unless forced.
    ref = REFERENCE["gpt2_added"]
    flag = "clean_up_tokenization_spaces"
    force = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
    folder = edited(
        "gpt2_added",
        tmp_path,
        "tokenizer_config.json",
        lambda c: c.update({flag: True}),
    )
    tokenizer = kt.text.tokenizer_from_pretrained(folder)
    assert decoded(tokenizer, ref["ids"]) == ref["decode_clean_up_unforced"]
    forced = edited(
        "gpt2_added",
        tmp_path / "f",
        "tokenizer_config.json",
        lambda c: c.update({flag: True, force: True}),
    )
    tokenizer = kt.text.tokenizer_from_pretrained(forced)
    assert decoded(tokenizer, ref["ids"]) == ref["decode_clean_up"]
    assert ref["decode_clean_up"] != ref["decode"]
    assert tokenizer.get_config()[flag] is True


def test_sentencepiece_json_that_cannot_be_run_is_refused(tmp_path):
    def nfkc(data):
        data["normalizer"] = {"type": "NFKC"}

    def no_unknown(data):
        data["model"]["unk_token"] = None

    for edit, message in [
        (nfkc, "legacy normalizer"),
        (no_unknown, "unk_token"),
    ]:
        folder = edited("mistral", tmp_path / edit.__name__, "tokenizer.json", edit)
        with pytest.raises(ValueError, match=message):
            kt.text.tokenizer_from_pretrained(folder)
    with open(
        os.path.join(FOLDERS, "mistral", "tokenizer.json"), encoding="utf-8"
    ) as f:
        data = json.load(f)
    merges = data["model"]["merges"]
    vocabulary = data["model"]["vocab"]
    # A piece with two splits in the vocabulary, one of them left out.
    for left, right in merges:
        piece = left + right
        splits = [
            (piece[:i], piece[i:])
            for i in range(1, len(piece))
            if piece[:i] in vocabulary and piece[i:] in vocabulary
        ]
        if len(splits) > 1:
            break
    dropped = next(s for s in splits if list(s) != [left, right])
    data["model"]["merges"] = [m for m in merges if tuple(m) != dropped]
    with pytest.raises(ValueError, match="merges lack"):
        hf_sentencepiece.proto_from_tokenizer_json(data, "tokenizer.json")
