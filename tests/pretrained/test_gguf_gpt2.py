"""`gpt2` GGUF files load into `kt.models.GPT2` as transformers loads them:
logits, greedy tokens, tokenizer ids and the task's greedy text against
transformers' own on the same files (`gpt2_tiny.{F16,Q8_0}.gguf`, made by
tests/fixtures/hf/make_gguf_fixtures.py in llama.cpp's GPT-2 layout)."""

import json
import os

import gguf
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import reference_import, to_numpy

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf", "gguf")
with open(os.path.join(FIXTURES, "gpt2_reference.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)
LOGITS = dict(np.load(os.path.join(FIXTURES, "gpt2_logits.npz")))
NAMES = sorted(REFERENCE)
# Measured at most 5.4e-6 on both files.
ATOL = 1e-4
PROMPTS = ["Hello world, this is a test.", "The quick brown fox"]  # the script's


def path(name):
    return os.path.join(FIXTURES, name)


@pytest.fixture(scope="module")
def models():
    return {name: kt.models.from_pretrained(path(name)) for name in NAMES}


def logits(model, ids):
    """Logits over the file's ids (ours are theirs + 1)."""
    return np.asarray(model(np.array([ids]) + 1))[0, :, 1:]


@pytest.mark.parametrize("name", NAMES)
def test_logits_and_greedy_tokens_match_transformers(name, models):
    model, reference = models[name], REFERENCE[name]
    assert isinstance(model, kt.models.GPT2)
    for i, ids in enumerate(reference["prompt_ids"]):
        np.testing.assert_allclose(
            logits(model, ids), LOGITS[f"{name}/{i}"], atol=ATOL, rtol=0
        )
        expected = reference["greedy"][i]
        out = kt.generation.generate(
            model, np.array([ids]) + 1, len(expected) - len(ids)
        )
        assert (np.asarray(out)[0] - 1).tolist() == expected


@pytest.mark.parametrize("name", NAMES)
def test_config_from_metadata(name):
    config = kt.pretrained.gguf.read_config(path(name))
    theirs = REFERENCE[name]["config"]
    # transformers reads no context length of GPT-2 files (n_positions
    # stays 1024) nor feed-forward size (n_inner None: 4 x hidden).
    assert config["n_positions"] == theirs["n_positions"] == 1024
    assert config["n_inner"] == 4 * theirs["n_embd"]
    for key in ("model_type", "vocab_size", "n_embd", "n_layer", "n_head"):
        assert config[key] == theirs[key], key
    for key in ("layer_norm_epsilon", "tie_word_embeddings", "eos_token_id"):
        assert config[key] == theirs[key], key
    assert config["architectures"] == ["GPT2LMHeadModel"]


def test_tokenizer_ids_match_transformers():
    reference = REFERENCE[NAMES[0]]
    tokenizer = kt.text.tokenizer_from_pretrained(path(NAMES[0]))
    for text, ids, decoded in zip(
        reference["texts"], reference["text_ids"], reference["decode"], strict=True
    ):
        ours = np.asarray(tokenizer(text))
        assert (ours - 1).tolist() == ids, text
        assert tokenizer.detokenize(ours).numpy().decode() == decoded
    for prompt, ids in zip(PROMPTS, reference["prompt_ids"], strict=True):
        assert (np.asarray(tokenizer(prompt)) - 1).tolist() == ids
    assert tokenizer.bos_token is None  # GPT-2 puts no token first
    for key, token in reference["special_tokens"].items():
        if token is not None:
            assert tokenizer.special_tokens_map[key] == token


@pytest.mark.parametrize("name", NAMES)
def test_task_from_gguf_generates_transformers_greedy_text(name):
    reference = REFERENCE[name]
    task = kt.tasks.from_pretrained(path(name))
    assert isinstance(task, kt.tasks.TextGenerator)
    # "<|endoftext|>", file id 0, is our id 1.
    assert task.end_token_id == reference["config"]["eos_token_id"] + 1 == 1
    prompt, expected = reference["prompt_ids"][1], reference["greedy"][1]
    reply = task.generate(PROMPTS[1], max_new_tokens=len(expected) - len(prompt))
    new = np.array(expected[len(prompt) :]) + 1
    assert (
        reply
        == task.tokenizer.detokenize(new, skip_special_tokens=True).numpy().decode()
    )


def test_an_untied_head_loads_and_computes_as_transformers(monkeypatch, tmp_path):
    # A head quantized to another type than the embedding differs from it:
    # transformers unties it (its GPT2LMHeadModel with tie_word_embeddings
    # False), so do we.
    read = kt.pretrained.gguf.dequantized

    def untied(tensor, rows, dtype="float32"):
        return read(tensor, rows, dtype) + 0.5 * (tensor.name == "output.weight")

    monkeypatch.setattr(kt.pretrained.gguf, "dequantized", untied)
    model = kt.models.from_pretrained(path(NAMES[0]))
    assert not model.tie_word_embeddings
    assert model.get_config()["tie_word_embeddings"] is False
    ids = np.array([[5, 6, 7, 8]])
    ours = to_numpy(model(ids))
    kt.models.save_pretrained(model, tmp_path)
    with open(tmp_path / "config.json", encoding="utf-8") as f:
        assert json.load(f)["tie_word_embeddings"] is False
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    reference = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        theirs = reference(torch.tensor(ids - 1)).logits.numpy()
    np.testing.assert_allclose(ours[..., 1:], theirs, rtol=0, atol=1e-4)
    head = reference.lm_head.weight.detach().numpy()
    assert not np.array_equal(head, reference.transformer.wte.weight.detach().numpy())
    reloaded = kt.models.from_pretrained(tmp_path)
    np.testing.assert_array_equal(to_numpy(reloaded(ids)), ours)


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"gpt2.rope.freq_base": 10000}, "'gpt2.rope.freq_base'"),
        ({"general.architecture": "phi3"}, "architecture.*'phi3'"),
    ],
)
def test_what_we_do_not_compute_is_refused_by_name(tmp_path, metadata, message):
    source = gguf.GGUFReader(path(NAMES[0]))
    values = kt.pretrained.gguf._gguf.metadata(source)
    values.update(metadata)
    names = [t.name for t in source.tensors]
    with pytest.raises(ValueError, match=message):
        kt.pretrained.gguf.config_of(values, names, "refused.gguf")


def test_dtype_other_than_float32_is_refused():
    with pytest.raises(ValueError, match="dtype='bfloat16'"):
        kt.models.from_pretrained(path(NAMES[0]), dtype="bfloat16")
