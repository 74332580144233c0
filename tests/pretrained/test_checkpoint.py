"""What every checkpoint folder gets, whatever its family: shards read only
from inside the folder, JSON errors that name the file and the line, and
tied copies checked by value (BERT's masked-LM decoder here; GPT-2's and
the seq2seq families' in their own test files)."""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import keras_transformer as kt
from tests.helpers import to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
INDEX = "model.safetensors.index.json"
SHARD = "model-00002-of-00003.safetensors"


def copy(name, tmp_path):
    path = tmp_path / name
    shutil.copytree(os.path.join(HF, name), path)
    return path


def point_shard_at(path, shard):
    """Makes the index name `shard` for every tensor of the second shard."""
    with open(os.path.join(HF, "bert_tiny_sharded", INDEX), encoding="utf-8") as f:
        index = json.load(f)
    index["weight_map"] = {
        k: shard if v == SHARD else v for k, v in index["weight_map"].items()
    }
    (path / INDEX).write_text(json.dumps(index))


@pytest.mark.parametrize("where", ["parent", "absolute", "symlink"])
def test_index_shards_outside_the_folder_are_refused(tmp_path, where):
    path = copy("bert_tiny_sharded", tmp_path)
    outside = tmp_path / "elsewhere.safetensors"
    shutil.move(path / SHARD, outside)  # a valid shard, only outside
    shard = {
        "parent": "../elsewhere.safetensors",
        "absolute": str(outside),
        "symlink": "link.safetensors",
    }[where]
    if where == "symlink":
        os.symlink(outside, path / shard)
    point_shard_at(path, shard)
    with pytest.raises(ValueError, match=f"outside the checkpoint folder.*{shard}"):
        kt.models.from_pretrained(path)
    # Inside the folder, the same shard under another name loads.
    shutil.move(outside, path / "renamed.safetensors")
    point_shard_at(path, "renamed.safetensors")
    assert type(kt.models.from_pretrained(path)) is kt.models.BERT


@pytest.mark.parametrize(
    "name, file, read",
    [
        ("bert_tiny", "config.json", kt.models.from_pretrained),
        ("marian_tiny", "generation_config.json", kt.models.from_pretrained),
        ("bert_tiny_sharded", INDEX, kt.models.from_pretrained),
        ("gpt2_tiny", "tokenizer_config.json", kt.text.tokenizer_from_pretrained),
        ("bert_tiny_mlm", "tokenizer.json", kt.text.tokenizer_from_pretrained),
        ("bart_tiny", "vocab.json", kt.text.tokenizer_from_pretrained),
    ],
)
def test_json_errors_name_the_file_and_the_line(tmp_path, name, file, read):
    path = copy(name, tmp_path)
    if file == "vocab.json":  # read only where no tokenizer.json defines it
        (path / "tokenizer.json").unlink()
    (path / file).write_text('{\n  "model_type": "bert",\n  oops\n}')
    with pytest.raises(ValueError, match=f"{file}.* line 3, column 3"):
        read(path)


def test_a_config_that_is_not_an_object_is_refused(tmp_path):
    path = copy("bert_tiny", tmp_path)
    (path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="config.json.*JSON object.*list"):
        kt.models.from_pretrained(path)


def _mlm_logits(model):
    ref = dict(np.load(os.path.join(HF, "bert_tiny_outputs.npz")))
    inputs = {k: ref[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    positions = np.array([[1, 2], [2, 3], [1, 4]])
    return to_numpy(model({**inputs, "mask_positions": positions}))


def test_bert_masked_lm_decoder_is_tied_by_value(tmp_path):
    path = copy("bert_tiny_mlm", tmp_path)
    tensors = load_file(path / "model.safetensors")
    embedding = tensors["bert.embeddings.word_embeddings.weight"]
    expected = _mlm_logits(kt.models.from_pretrained(os.path.join(HF, "bert_tiny_mlm")))
    # Older checkpoints carry the tied copies: equal values load the same.
    tied = {
        **tensors,
        "cls.predictions.decoder.weight": embedding.copy(),
        "cls.predictions.decoder.bias": tensors["cls.predictions.bias"].copy(),
    }
    save_file(tied, str(path / "model.safetensors"))
    np.testing.assert_array_equal(
        _mlm_logits(kt.models.from_pretrained(path)), expected
    )
    for key, value in [
        ("cls.predictions.decoder.weight", embedding + 1e-3),
        ("cls.predictions.decoder.bias", tensors["cls.predictions.bias"] + 1),
    ]:
        save_file({**tied, key: value}, str(path / "model.safetensors"))
        with pytest.raises(ValueError, match=f"'{key}' differs.*ties"):
            kt.models.from_pretrained(path)
    save_file(tied, str(path / "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(
        json.dumps({**config, "tie_word_embeddings": False})
    )
    with pytest.raises(ValueError, match="tie_word_embeddings=False"):
        kt.models.from_pretrained(path)
