"""`save_pretrained` writes what transformers wrote, checked without torch:
each fixture folder (made by transformers 5.24) is loaded and saved again,
and the copy must hold the same tensors, the same `config.json` on every
key transformers reads, the same `generation_config.json` and the same
tokenizer files. (The `*_loads_in_transformers*` tests, which need torch,
check that transformers computes the same numbers from such a copy.)
"""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_transformer as kt

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
WITH_TOKENIZER = ["bert_tiny", "gpt2_tiny", "marian_tiny", "bart_tiny"]
FOLDERS = [*WITH_TOKENIZER, "bert_tiny_mlm", "bert_tiny_classifier"]

# Keys of transformers' config.json that no model reads: its version; the
# folder it came from; and `dtype`, read only by `from_pretrained(
# dtype="auto")`, where a missing one means the tensors' own: float32, ours.
NOT_READ = ("transformers_version", "_name_or_path", "dtype")
# Keys we leave out, at the value transformers' config class takes when
# they are missing (BertConfig(), GPT2Config() ... of transformers 5.24).
DEFAULTS = {
    "bert": {
        "classifier_dropout": None,
        "add_cross_attention": False,
        "is_decoder": False,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "tie_word_embeddings": True,
    },
    "gpt2": {
        "add_cross_attention": False,
        "reorder_and_upcast_attn": False,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "use_cache": True,
        "pad_token_id": None,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
    },
    "marian": {
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "is_decoder": False,
        "use_cache": True,
        "bos_token_id": None,
    },
    "bart": {
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "is_decoder": False,
        "use_cache": True,
        "classifier_dropout": 0.0,
        "id2label": {str(i): f"LABEL_{i}" for i in range(3)},
        "label2id": {f"LABEL_{i}": i for i in range(3)},
    },
}
# Keys we write that transformers 5 does not read: BERT's
# `position_embedding_type` (older versions read it; "absolute" is their
# default), BART's legacy `forced_bos_token_id` (generation_config.json's is
# the one read).
EXTRA = {"bert": {"position_embedding_type"}, "bart": {"forced_bos_token_id"}}


def read(folder, name):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        return json.load(f)


def meaning(config):
    """The config with values that transformers derives made explicit (a
    None `n_inner` is 4 * n_embd; a None `classifier_dropout` is the hidden
    dropout), and without the keys no model reads."""
    config = {k: v for k, v in config.items() if k not in NOT_READ}
    if config.get("n_inner", 0) is None:
        config["n_inner"] = 4 * config["n_embd"]
    if "classifier_dropout" in config and config["classifier_dropout"] is None:
        config["classifier_dropout"] = config["hidden_dropout_prob"]
    return config


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """`{name: folder}`: each fixture loaded and saved again."""
    root = tmp_path_factory.mktemp("saved")
    folders = {}
    for name in FOLDERS:
        model = kt.models.from_pretrained(os.path.join(HF, name))
        tokenizer = None
        if name in WITH_TOKENIZER:
            tokenizer = kt.text.tokenizer_from_pretrained(os.path.join(HF, name))
        folders[name] = kt.models.save_pretrained(model, root / name, tokenizer)
    return folders


@pytest.mark.parametrize("name", FOLDERS)
def test_the_same_tensors_under_the_same_names(saved, name):
    theirs = load_file(os.path.join(HF, name, "model.safetensors"))
    ours = load_file(os.path.join(saved[name], "model.safetensors"))
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        np.testing.assert_array_equal(ours[key], value, err_msg=key)


@pytest.mark.parametrize("name", FOLDERS)
def test_config_is_transformers_on_every_key_it_reads(saved, name):
    theirs = read(os.path.join(HF, name), "config.json")
    family = theirs["model_type"]
    ours = read(saved[name], "config.json")
    assert EXTRA.get(family, set()) <= set(ours)
    ours = {k: v for k, v in ours.items() if k not in EXTRA.get(family, ())}
    assert meaning({**DEFAULTS[family], **ours}) == meaning(theirs)


@pytest.mark.parametrize("name", ["marian_tiny", "bart_tiny"])
def test_generation_config_is_transformers(saved, name):
    theirs = read(os.path.join(HF, name), "generation_config.json")
    del theirs["transformers_version"]
    assert read(saved[name], "generation_config.json") == theirs


def test_tokenizer_files_are_transformers(saved):
    marian = os.path.join(HF, "marian_tiny")
    for file in ("source.spm", "target.spm"):
        with (
            open(os.path.join(marian, file), "rb") as f,
            open(os.path.join(saved["marian_tiny"], file), "rb") as g,
        ):
            assert g.read() == f.read(), file
    for name in WITH_TOKENIZER:
        theirs = read(os.path.join(HF, name), "tokenizer_config.json")
        ours = read(saved[name], "tokenizer_config.json")
        # transformers 5 writes RobertaTokenizer for BART, the class that
        # BartTokenizer now is; older versions need BartTokenizer.
        expected = {"bart_tiny": "BartTokenizer"}.get(name, theirs["tokenizer_class"])
        assert ours["tokenizer_class"] == expected
        assert {k: theirs[k] for k in ours if k != "tokenizer_class"} == {
            k: v for k, v in ours.items() if k != "tokenizer_class"
        }
    for name in ("gpt2_tiny", "bart_tiny", "marian_tiny"):
        assert read(saved[name], "vocab.json") == read(
            os.path.join(HF, name), "vocab.json"
        )
    for name in ("gpt2_tiny", "bart_tiny"):
        with open(os.path.join(HF, name, "merges.txt"), encoding="utf-8") as f:
            theirs = f.read().splitlines()
        with open(os.path.join(saved[name], "merges.txt"), encoding="utf-8") as f:
            assert f.read().splitlines() == theirs
    with open(os.path.join(saved["bert_tiny"], "vocab.txt"), encoding="utf-8") as f:
        tokens = f.read().splitlines()
    vocabulary = read(os.path.join(HF, "bert_tiny"), "tokenizer.json")["model"]["vocab"]
    assert tokens == sorted(vocabulary, key=vocabulary.get)
