"""Hugging Face T5 checkpoints load exactly: encoder states and logits,
greedy and 4-beam ids, tokenizer ids on hard text and decoded text, against
transformers' own (committed fixtures made by
tests/fixtures/hf/make_t5_fixtures.py from the folders as transformers
reloads them: t5_tiny, T5 v1.0 with a hub-form spiece.model; flan_t5_tiny,
gated GELU, untied, d_kv x heads != d_model, 3 decoder blocks, with only a
tokenizer.json); save_pretrained round trips, other dtypes, shards, and the
config values we refuse."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

import keras_transformer as kt
from tests.helpers import reference_import

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
NAMES = ["t5_tiny", "flan_t5_tiny"]
# The bound; measured 2.4e-6 (t5_tiny) and 3.8e-5 (flan_t5_tiny).
ATOL = 1e-4


def folder(name):
    return os.path.join(HF, name)


def reference(name):
    with open(folder(f"{name}_reference.json"), encoding="utf-8") as f:
        return json.load(f)


_MODELS = {}


def loaded(name):
    if name not in _MODELS:
        _MODELS[name] = kt.models.from_pretrained(folder(name))
    return _MODELS[name]


def ours(ids, mask=None):
    """Our ids (theirs + 1), 0 where the mask is 0."""
    ids = np.asarray(ids, "int32") + 1
    return ids if mask is None else np.where(np.asarray(mask) == 1, ids, 0)


def logits_of(model, outputs):
    inputs = {
        "encoder_token_ids": ours(
            outputs["encoder_input_ids"], outputs["encoder_attention_mask"]
        ),
        "decoder_token_ids": ours(outputs["decoder_input_ids"]),
    }
    return np.asarray(model(inputs))[..., 1:]  # without our padding id


@pytest.mark.parametrize("name", NAMES)
def test_encoder_states_and_logits_equal_transformers(name):
    model = loaded(name)
    outputs = np.load(folder(f"{name}_outputs.npz"))
    source = ours(outputs["encoder_input_ids"], outputs["encoder_attention_mask"])
    assert (source != 0).sum(1).max() > 40  # distances past the exact buckets
    states = np.asarray(model.encode(source))
    real = outputs["encoder_attention_mask"][..., None] == 1
    expected = outputs["encoder_last_hidden_state"]
    np.testing.assert_allclose(
        np.where(real, states, 0), np.where(real, expected, 0), atol=ATOL
    )
    np.testing.assert_allclose(logits_of(model, outputs), outputs["logits"], atol=ATOL)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["greedy", "beam"])
def test_greedy_and_beam_ids_equal_transformers(name, mode):
    case = reference(name)[mode]
    source = np.asarray(case["input_ids"])
    source = np.where(source != 0, source + 1, 0)  # their 0 here: padding
    options = {"sampler": "greedy"}
    if mode == "beam":
        options = dict(
            sampler="beam",
            rules="transformers",
            num_beams=4,
            length_penalty=case["kwargs"]["length_penalty"],
            early_stopping=case["kwargs"]["early_stopping"],
        )
    tokens = kt.generation.generate(
        loaded(name),
        {"encoder_token_ids": source},
        max_new_tokens=case["kwargs"]["max_new_tokens"],
        end_token_id=2,
        **options,
    )
    expected = np.asarray(case["ids"])
    np.testing.assert_array_equal(np.maximum(np.asarray(tokens) - 1, 0), expected)


@pytest.mark.parametrize("name", NAMES)
def test_tokenizer_ids_and_text_equal_transformers(name):
    """Whitespace runs, CJK, NFKC, unknown characters, sentinels and
    `</s>` typed as text; decoding with and without special tokens."""
    tokenizer = kt.text.tokenizer_from_pretrained(folder(name))
    assert isinstance(tokenizer, kt.text.T5Tokenizer)
    expected = reference(name)
    texts = [case["text"] for case in expected["tokens"]]
    ids = tokenizer(texts).to_list()
    assert [[i - 1 for i in row] for row in ids] == [
        case["ids"] for case in expected["tokens"]
    ]
    for case in expected["decoded"]:
        text = tokenizer.detokenize(
            np.asarray(case["ids"]) + 1, skip_special_tokens=case["skip_special_tokens"]
        )
        assert text.numpy().decode() == case["text"], case
    assert tokenizer.vocabulary_size() - 1 == expected["config"]["len_tokenizer"]
    assert (
        tokenizer.token_to_id("<extra_id_0>") - 1 == expected["config"]["sentinel_0_id"]
    )


@pytest.mark.parametrize("name", NAMES)
def test_unknown_and_ids_past_the_vocabulary_decode_as_transformers(name):
    """`<unk>` at the start, middle and end, beside lone spaces and
    repeated, is dropped by skip_special_tokens with the spaces around it
    kept; ids past the tokenizer (the checkpoint's padded rows) are dropped
    either way, never written as `<unk>`: eagerly and in a graph."""
    tokenizer = kt.text.tokenizer_from_pretrained(folder(name))
    cases = reference(name)["unknown_decoded"]
    assert any(None in case["tokens"] for case in cases)  # ids past it
    graph = {
        skip: tf.function(
            lambda ids, skip=skip: tokenizer.detokenize(ids, skip_special_tokens=skip)
        )
        for skip in (False, True)
    }
    for case in cases:
        ids, skip = np.asarray(case["ids"]) + 1, case["skip_special_tokens"]
        text = tokenizer.detokenize(ids, skip_special_tokens=skip)
        assert text.numpy().decode() == case["text"], case
        ragged = tf.ragged.constant([ids, ids[:1]], dtype=tf.int32)
        assert graph[skip](ragged)[0].numpy().decode() == case["text"], case


def test_a_tokenizer_json_folder_and_a_spiece_folder_agree():
    """The unigram model written back from flan's tokenizer.json tokenizes
    as t5_tiny's spiece.model (the same SentencePiece model)."""
    texts = [case["text"] for case in reference("t5_tiny")["tokens"]]
    one = kt.text.tokenizer_from_pretrained(folder("t5_tiny"))
    other = kt.text.tokenizer_from_pretrained(folder("flan_t5_tiny"))
    assert one(texts).to_list() == other(texts).to_list()


@pytest.mark.parametrize("name", NAMES)
def test_save_pretrained_writes_the_same_tensors_and_reloads(name, tmp_path):
    model = loaded(name)
    tokenizer = kt.text.tokenizer_from_pretrained(folder(name))
    path = kt.models.save_pretrained(model, tmp_path / "saved", tokenizer=tokenizer)
    theirs, written = (
        load_file(folder(name) + "/model.safetensors"),
        load_file(os.path.join(path, "model.safetensors")),
    )
    assert sorted(written) == sorted(theirs)
    for key, value in theirs.items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    with open(os.path.join(folder(name), "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        saved = json.load(f)
    for key in ("d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers",
                "num_heads", "feed_forward_proj", "tie_word_embeddings",
                "vocab_size", "task_specific_params"):  # fmt: skip
        assert saved.get(key) == config.get(key), key
    again = kt.models.from_pretrained(path)
    outputs = np.load(folder(f"{name}_outputs.npz"))
    np.testing.assert_array_equal(logits_of(again, outputs), logits_of(model, outputs))
    texts = [case["text"] for case in reference(name)["tokens"]]
    reread = kt.text.tokenizer_from_pretrained(path)
    assert reread(texts).to_list() == tokenizer(texts).to_list()


def test_sharded_folders(tmp_path):
    # (bfloat16 and float16 folders: tests/pretrained/test_half_precision.py.)
    outputs = np.load(folder("flan_t5_tiny_outputs.npz"))
    expected = outputs["logits"]
    # Two shards and their index.
    shards = tmp_path / "sharded"
    shutil.copytree(folder("flan_t5_tiny"), shards)
    tensors = load_file(shards / "model.safetensors")
    os.remove(shards / "model.safetensors")
    names = sorted(tensors)
    index = {}
    for part, keys in enumerate((names[::2], names[1::2])):
        file = f"model-0000{part + 1}-of-00002.safetensors"
        save_file({k: tensors[k] for k in keys}, shards / file, {"format": "pt"})
        index.update({k: file for k in keys})
    with open(shards / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    sharded = kt.models.from_pretrained(shards)
    np.testing.assert_allclose(logits_of(sharded, outputs), expected, atol=ATOL)


def test_a_transformers_5_config_of_an_untied_head(tmp_path):
    """transformers 5 writes `tie_word_embeddings: true` for every T5 and
    `scale_decoder_outputs` for the head; a FLAN folder so written, its
    head the table itself, loads with that head."""
    path = tmp_path / "flan"
    shutil.copytree(folder("flan_t5_tiny"), path)
    tensors = load_file(path / "model.safetensors")
    tensors.pop("lm_head.weight")
    save_file(tensors, path / "model.safetensors", {"format": "pt"})
    with open(path / "config.json") as f:
        config = json.load(f)
    config.update(tie_word_embeddings=True, scale_decoder_outputs=False)
    with open(path / "config.json", "w") as f:
        json.dump(config, f)
    model = kt.models.from_pretrained(path)
    assert model.lm_head is not None
    np.testing.assert_array_equal(
        np.asarray(model.lm_head.kernel), tensors["shared.weight"].T
    )


@pytest.mark.parametrize(
    "change, key",
    [
        ({"feed_forward_proj": "gated-silu"}, "feed_forward_proj"),
        ({"dense_act_fn": "gelu"}, "dense_act_fn"),
        ({"architectures": ["T5EncoderModel"]}, "architectures"),
        (
            {"quantization_config": {"quant_method": "bitsandbytes"}},
            "quantization_config",
        ),
    ],
)
def test_what_we_do_not_compute_is_refused_by_name(change, key, tmp_path):
    path = tmp_path / "changed"
    shutil.copytree(folder("flan_t5_tiny"), path)
    with open(path / "config.json") as f:
        config = json.load(f)
    config.update(change)
    with open(path / "config.json", "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError, match=key):
        kt.models.from_pretrained(path)


def test_parameter_counts_equal_transformers():
    """The presets count what transformers counts for t5-small/base and
    flan-t5-small/base (t5_parameter_counts.json, from meta-device models)."""
    with open(folder("t5_parameter_counts.json"), encoding="utf-8") as f:
        counts = json.load(f)
    for name in ("t5_small", "t5_base", "flan_t5_small", "flan_t5_base"):
        preset = kt.models.PRESETS[name]
        assert preset["parameters"] == counts[name]["num_parameters"], name
        assert kt.models.T5.parameter_count(**preset["config"]) == preset["parameters"]
    model = kt.models.T5.from_preset("t5_tiny")
    assert model.count_params() == kt.models.PRESETS["t5_tiny"]["parameters"]
    assert model.count_params() == kt.models.T5.parameter_count(
        **kt.models.PRESETS["t5_tiny"]["config"]
    )


def test_a_peft_adapter_gives_peft_logits_and_round_trips(tmp_path):
    """flan_t5_tiny_lora (make_t5_fixtures.py): peft's logits of base +
    adapter on q, v, o, wi_0 and wo of every block, encoder and decoder;
    written back as a PEFT folder and read again, the same logits."""
    reference = np.load(folder("flan_t5_tiny_lora_logits.npz"))
    inputs = {
        "encoder_token_ids": ours(reference["input_ids"]),
        "decoder_token_ids": ours(reference["decoder_input_ids"]),
    }
    model = kt.models.from_pretrained(folder("flan_t5_tiny"))
    base = np.asarray(model(inputs))[..., 1:]
    model.load_lora(folder("flan_t5_tiny_lora"))
    logits = np.asarray(model(inputs))[..., 1:]
    assert np.abs(base - reference["logits"]).max() > 0.05  # the adapter counts
    np.testing.assert_allclose(logits, reference["logits"], atol=ATOL)
    written = model.save_lora(tmp_path / "adapter", format="peft")
    again = kt.models.from_pretrained(folder("flan_t5_tiny"))
    again.load_lora(written)
    np.testing.assert_allclose(np.asarray(again(inputs))[..., 1:], logits, atol=1e-5)


def test_our_adapter_on_every_projection_gives_peft_logits(tmp_path):
    """Our LoRA (random A and B) on each projection PEFT names, written as a
    PEFT folder: peft.PeftModel.from_pretrained over transformers' model of
    the same folder gives our logits."""
    peft = reference_import("peft")
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    reference = np.load(folder("flan_t5_tiny_lora_logits.npz"))
    model = kt.models.from_pretrained(folder("flan_t5_tiny"))
    targets = ("query", "key", "value", "attention_output", "gate", "up", "down")
    model.enable_lora(2, targets=targets, alpha=3)
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype("float32") * 0.3)
    inputs = {
        "encoder_token_ids": ours(reference["input_ids"]),
        "decoder_token_ids": ours(reference["decoder_input_ids"]),
    }
    logits = np.asarray(model(inputs))[..., 1:]
    written = model.save_lora(tmp_path / "adapter", format="peft")
    with open(os.path.join(written, "adapter_config.json")) as f:
        assert json.load(f)["task_type"] == "SEQ_2_SEQ_LM"
    base = transformers.T5ForConditionalGeneration.from_pretrained(
        folder("flan_t5_tiny")
    )
    theirs = peft.PeftModel.from_pretrained(base, written).eval()
    with torch.no_grad():
        peft_logits = theirs(
            input_ids=torch.tensor(reference["input_ids"]),
            decoder_input_ids=torch.tensor(reference["decoder_input_ids"]),
        ).logits.numpy()
        with theirs.disable_adapter():
            base_logits = theirs(
                input_ids=torch.tensor(reference["input_ids"]),
                decoder_input_ids=torch.tensor(reference["decoder_input_ids"]),
            ).logits.numpy()
    assert np.abs(base_logits - peft_logits).max() > 0.05  # the adapter counts
    np.testing.assert_allclose(logits, peft_logits, atol=ATOL)  # measured 2.3e-5


def test_a_peft_adapter_of_a_layer_peft_does_not_name_is_refused(tmp_path):
    """flan_t5_tiny's untied head has no module in our PEFT table: writing
    its update would lose it silently."""
    model = kt.models.from_pretrained(folder("flan_t5_tiny"))
    model.enable_lora(1, targets=("query", "lm_head"))
    with pytest.raises(ValueError, match=r"no module for \['lm_head'\]"):
        model.save_lora(tmp_path / "adapter", format="peft")
