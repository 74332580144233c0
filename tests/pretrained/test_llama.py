"""Hugging Face Llama, Mistral and Qwen2 checkpoints load exactly: logits
and greedy continuations against transformers' own (committed fixtures
made by tests/fixtures/hf/make_llama_fixtures.py from the folders as
transformers reloads them), bfloat16 and sharded folders, save_pretrained
round trips, and the config values we refuse."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_transformer as kt
from keras_transformer.pretrained import llama as llama_checkpoints
from tests.helpers import reference_import, run_model_saving_test, to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
FAMILIES = ["llama_tiny", "llama_tiny_bias", "mistral_tiny", "qwen2_tiny"]
# The bound; the largest difference measured is 3.8e-5 (bfloat16
# weights upcast, logits up to 24), 2.0e-5 in float32 folders.
ATOL = 1e-4
# Keys of transformers' config.json that no model reads (see
# test_saved_folders.py), and the end tokens, which come with a tokenizer.
NOT_READ = ("transformers_version", "dtype", "bos_token_id", "eos_token_id")
# Keys we write for transformers 4, which reads them instead of
# rope_parameters.
LEGACY = ("rope_theta", "rope_scaling")


def folder(name):
    return os.path.join(HF, name)


@pytest.fixture(scope="module")
def reference():
    with open(folder("llama_family_reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    ref["logits"] = dict(np.load(folder("llama_family_logits.npz")))
    return ref


@pytest.fixture(scope="module")
def loaded():
    models = {}

    def get(name):
        if name not in models:
            models[name] = kt.models.from_pretrained(folder(name))
        return models[name]

    return get


def batch(prompts):
    """Our ids (theirs + 1), 0-padded on the right."""
    ids = np.zeros((len(prompts), max(map(len, prompts))), "int32")
    for row, prompt in zip(ids, prompts, strict=True):
        row[: len(prompt)] = np.array(prompt) + 1
    return ids


def max_difference(model, reference, name):
    """The largest |ours - transformers'| over every real position, on
    transformers' vocabulary (ours from id 1 on)."""
    logits = to_numpy(model(batch(reference["prompts"]))).astype("float32")
    assert (logits[..., 0] < -1e4).all()  # padding is never predicted
    worst = 0.0
    for k, prompt in enumerate(reference["prompts"]):
        theirs = reference["logits"][f"{name}/{k}"]
        ours = logits[k, : len(prompt), 1:]
        worst = max(worst, float(np.abs(ours - theirs).max()))
    return worst


@pytest.mark.parametrize("name", [*FAMILIES, "llama_tiny_sharded"])
def test_logits_are_transformers(loaded, reference, name):
    model = loaded(name)
    assert type(model) is kt.models.Llama
    assert max_difference(model, reference, name) < ATOL


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_tokens_are_transformers(loaded, reference, name):
    # mistral_tiny's window (8) is shorter than the first prompt (14).
    model = loaded(name)
    prompts, theirs = reference["prompts"], reference["models"][name]["continuations"]
    for use_cache in (True, False):
        out = to_numpy(
            kt.generation.generate(
                model, batch(prompts), reference["new_tokens"], use_cache=use_cache
            )
        )
        for row, prompt, expected in zip(out, prompts, theirs, strict=True):
            length = len(prompt) + reference["new_tokens"]
            assert (row[:length] - 1).tolist() == expected, (name, use_cache)


def test_config_is_read_as_transformers_reads_it(loaded):
    llama = loaded("llama_tiny")
    assert (llama.vocabulary_size, llama.head_dim, llama.rope_theta) == (513, 16, 5e4)
    assert llama.rope_scaling["rope_type"] == "llama3"
    assert (llama.num_heads, llama.num_key_value_heads) == (4, 2)
    assert not llama.tie_word_embeddings and llama.sliding_window is None
    assert loaded("mistral_tiny").sliding_window == 8
    qwen2 = loaded("qwen2_tiny")
    assert (qwen2.attention_bias, qwen2.tie_word_embeddings) == ("qkv", True)
    assert qwen2.rope_theta == 1e6
    # Exactly the checkpoint's parameters: no padding row is added.
    assert qwen2.count_params() == sum(
        v.size
        for v in load_file(
            os.path.join(folder("qwen2_tiny"), "model.safetensors")
        ).values()
    )


DELETE = object()


def rewrite(tmp_path, name, **changes):
    """A copy of fixture `name` whose config.json has `changes` (`DELETE`
    deletes the key)."""
    copy = tmp_path / name
    shutil.copytree(folder(name), copy)
    with open(copy / "config.json", encoding="utf-8") as f:
        config = json.load(f)
    for key, value in changes.items():
        if value is DELETE:
            config.pop(key, None)
        else:
            config[key] = value
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_rope_scaling_and_window_change_the_logits(reference, tmp_path):
    rope = {"rope_type": "default", "rope_theta": 5e4}
    plain = kt.models.from_pretrained(
        rewrite(tmp_path, "llama_tiny", rope_parameters=rope)
    )
    assert max_difference(plain, reference, "llama_tiny") > 1e-2
    absent = rewrite(tmp_path / "absent", "mistral_tiny", sliding_window=DELETE)
    # transformers' default when the key is absent
    assert kt.models.from_pretrained(absent).sliding_window == 4096
    full = kt.models.from_pretrained(
        rewrite(tmp_path / "null", "mistral_tiny", sliding_window=None)
    )
    assert full.sliding_window is None
    assert max_difference(full, reference, "mistral_tiny") > 1e-2


def test_older_configs_with_rope_theta_and_rope_scaling(reference, tmp_path):
    # transformers 4 wrote rope_theta and rope_scaling (with "type").
    scaling = {
        "type": "llama3",
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    copy = rewrite(
        tmp_path,
        "llama_tiny",
        rope_parameters=DELETE,
        rope_theta=5e4,
        rope_scaling=scaling,
    )
    assert (
        max_difference(kt.models.from_pretrained(copy), reference, "llama_tiny") < ATOL
    )
    copy = rewrite(tmp_path / "q", "qwen2_tiny", rope_parameters=DELETE, rope_theta=1e6)
    assert (
        max_difference(kt.models.from_pretrained(copy), reference, "qwen2_tiny") < ATOL
    )


def test_qwen2_window_only_when_every_layer_slides(tmp_path):
    # Qwen2.5's configs carry a sliding_window that use_sliding_window=false
    # turns off.
    off = rewrite(tmp_path / "off", "qwen2_tiny", sliding_window=4, layer_types=DELETE)
    assert kt.models.from_pretrained(off).sliding_window is None
    every = rewrite(
        tmp_path / "all", "qwen2_tiny", sliding_window=4, use_sliding_window=True,
        max_window_layers=0, layer_types=DELETE,
    )  # fmt: skip
    assert kt.models.from_pretrained(every).sliding_window == 4
    upper = rewrite(
        tmp_path / "upper", "qwen2_tiny", sliding_window=4, use_sliding_window=True,
        max_window_layers=1, layer_types=DELETE,
    )  # fmt: skip
    with pytest.raises(ValueError, match="max_window_layers=1"):
        kt.models.from_pretrained(upper)


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"mlp_bias": True}, "mlp_bias=True"),
        ({"attention_dropout": 0.1}, "attention_dropout=0.1"),
        (
            {
                "rope_parameters": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "rope_theta": 1e4,
                }
            },
            "rope type.*'yarn'",
        ),
        (
            {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
            "rope_scaling=.*dynamic",
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "beta": 1}},
            "keys we do not compute.*beta",
        ),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config="),
        ({"architectures": ["LlamaForSequenceClassification"]}, "architectures="),
    ],
)
def test_configs_we_do_not_compute_are_refused(tmp_path, changes, match):
    with pytest.raises(ValueError, match=match):
        kt.models.from_pretrained(rewrite(tmp_path, "llama_tiny", **changes))


def test_tensors_that_disagree_are_refused(tmp_path):
    copy = rewrite(tmp_path, "llama_tiny", tie_word_embeddings=True)
    with pytest.raises(ValueError, match="'lm_head.weight' differs"):
        kt.models.from_pretrained(copy)
    copy = rewrite(tmp_path / "k", "llama_tiny", num_key_value_heads=4)
    with pytest.raises(ValueError, match="k_proj.weight.*shape"):
        kt.models.from_pretrained(copy)
    with pytest.raises(ValueError, match="dtype='int8'"):
        kt.models.from_pretrained(folder("llama_tiny"), dtype="int8")
    # Other families load in float32 only, refused before any weight is read.
    with pytest.raises(ValueError, match="dtype='bfloat16' for model_type='gpt2'"):
        kt.models.from_pretrained(folder("gpt2_tiny"), dtype="bfloat16")


def test_sharded_folder_holds_the_same_weights(loaded):
    for ours, theirs in zip(
        loaded("llama_tiny_sharded").weights, loaded("llama_tiny").weights, strict=True
    ):
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(theirs))


def test_bfloat16_folder_upcast_exactly_by_default(reference):
    model = kt.models.from_pretrained(folder("qwen2_tiny_bf16"))
    assert {v.dtype for v in model.weights} == {"float32"}
    stored = llama_checkpoints.checkpoint.read_weights(folder("qwen2_tiny_bf16"), None)
    embedding = stored["model.embed_tokens.weight"]
    assert embedding.dtype.name == "bfloat16"
    np.testing.assert_array_equal(
        to_numpy(model.token_embedding.embeddings), embedding.astype("float32")
    )
    assert max_difference(model, reference, "qwen2_tiny_bf16_upcast") < ATOL


def test_bfloat16_folder_kept_in_bfloat16(reference, tmp_path):
    model = kt.models.from_pretrained(folder("qwen2_tiny_bf16"), dtype="bfloat16")
    assert model.token_embedding.embeddings.dtype == "bfloat16"
    assert {v.dtype for v in model.weights} == {"bfloat16"}
    # Its logits: within transformers' own bfloat16 error
    # (tests/pretrained/test_half_precision.py).
    saved = kt.models.save_pretrained(model, tmp_path / "bf16")
    with (
        open(os.path.join(saved, "model.safetensors"), "rb") as f,
        open(os.path.join(folder("qwen2_tiny_bf16"), "model.safetensors"), "rb") as g,
    ):
        assert f.read() == g.read()  # byte for byte transformers' file


def test_loading_holds_one_tensor_at_a_time_and_assigns_large_ones_in_rows(
    tmp_path, monkeypatch
):
    """The folder's tensors are read when looked up, not kept; a tensor over
    `BLOCK_BYTES` crosses into its variable a block of rows at a time (here
    every tensor over 256 bytes): the weights are still the file's, bit for
    bit."""
    checkpoint = llama_checkpoints.checkpoint
    stored = checkpoint.read_weights(folder("qwen2_tiny_bf16"), None)
    key = "model.embed_tokens.weight"
    assert stored[key] is not stored[key]  # read again: nothing kept
    np.testing.assert_array_equal(stored[key], stored[key])
    monkeypatch.setattr(checkpoint, "BLOCK_BYTES", 256)
    model = kt.models.from_pretrained(folder("qwen2_tiny_bf16"), dtype="bfloat16")
    saved = kt.models.save_pretrained(model, tmp_path / "bf16")
    with (
        open(os.path.join(saved, "model.safetensors"), "rb") as f,
        open(os.path.join(folder("qwen2_tiny_bf16"), "model.safetensors"), "rb") as g,
    ):
        assert f.read() == g.read()


def test_bfloat16_greedy_tokens_are_transformers_bfloat16_tokens(reference):
    # transformers' bfloat16 run and ours round in different places (see
    # test_rotary_attention.py), so a step whose top two logits are within
    # two bfloat16 spacings (0.125 between 16 and 32) may go either way:
    # prompt 0's last step is a tie (margin 0.0). Every other step is ours.
    model = kt.models.from_pretrained(folder("qwen2_tiny_bf16"), dtype="bfloat16")
    ref = reference["models"]["qwen2_tiny_bf16"]
    prompts, new = reference["prompts"], reference["new_tokens"]
    out = to_numpy(kt.generation.generate(model, batch(prompts), new))
    clear = [[m > 0.25 for m in margins] for margins in ref["margins"]]
    assert sum(map(sum, clear)) == 19  # of 20 steps
    for row, prompt, theirs, steps in zip(
        out, prompts, ref["continuations"], clear, strict=True
    ):
        agree = steps.index(False) if False in steps else new
        length = len(prompt) + agree
        assert (row[:length] - 1).tolist() == theirs[:length]
    # Teacher-forced on transformers' continuations, every clear step too.
    full = to_numpy(model(batch(ref["continuations"]))).astype("float32")
    differ = []
    pairs = zip(prompts, ref["continuations"], strict=True)
    for k, (prompt, theirs) in enumerate(pairs):
        chosen = full[k, len(prompt) - 1 : len(theirs) - 1].argmax(-1) - 1
        new_tokens = theirs[len(prompt) :]
        differ += [(k, i) for i, t in enumerate(new_tokens) if chosen[i] != t]
    assert all(not clear[k][i] for k, i in differ), differ


@pytest.mark.parametrize("name", FAMILIES)
def test_save_pretrained_writes_the_folder_transformers_wrote(loaded, name, tmp_path):
    saved = kt.models.save_pretrained(loaded(name), tmp_path / name)
    assert sorted(os.listdir(saved)) == ["config.json", "model.safetensors"]
    with open(os.path.join(folder(name), "model.safetensors"), "rb") as f:
        theirs = f.read()
    with open(os.path.join(saved, "model.safetensors"), "rb") as f:
        assert f.read() == theirs
    with open(os.path.join(folder(name), "config.json"), encoding="utf-8") as f:
        theirs = json.load(f)
    with open(os.path.join(saved, "config.json"), encoding="utf-8") as f:
        ours = json.load(f)
    assert ours["dtype"] == "float32"
    assert ours["rope_theta"] == theirs["rope_parameters"]["rope_theta"]
    assert {k: v for k, v in ours.items() if k not in (*NOT_READ, *LEGACY)} == {
        k: v for k, v in theirs.items() if k not in NOT_READ
    }


def test_keras_file_round_trip(loaded, reference, tmp_path):
    model = loaded("mistral_tiny")
    restored = run_model_saving_test(model, batch(reference["prompts"]), tmp_path)
    assert type(restored) is kt.models.Llama and restored.sliding_window == 8


def test_save_pretrained_loads_in_transformers(loaded, reference, tmp_path):
    transformers = reference_import("transformers")
    torch = reference_import("torch")
    for name in FAMILIES:
        saved = kt.models.save_pretrained(loaded(name), tmp_path / name)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(saved).eval()
        for k, prompt in enumerate(reference["prompts"]):
            with torch.no_grad():
                logits = theirs(torch.tensor([prompt])).logits[0].numpy()
            expected = reference["logits"][f"{name}/{k}"]
            # The same weights: 3.1e-6 measured between transformers 5.24
            # (the fixture's) and 5.25 on this machine.
            np.testing.assert_allclose(logits, expected, rtol=0, atol=3e-5)


def test_keras_dtype_policy_is_left_as_it_was():
    before = keras.config.dtype_policy().name
    llama_checkpoints.load(folder("qwen2_tiny_bf16"), dtype="bfloat16")
    assert keras.config.dtype_policy().name == before
