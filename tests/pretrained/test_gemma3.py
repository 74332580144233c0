"""Gemma 3 text checkpoints load exactly: a tiny random `Gemma3ForCausalLM`
folder and its `gemma3` GGUF file against transformers' own logits, greedy
continuations, tokenizer ids and chat prompt (committed fixtures made by
tests/fixtures/hf/make_gemma3_fixtures.py from what transformers reloads);
save_pretrained round trips; the config values we refuse; and the real
Gemma 3 270M GGUF file (Q4_K_M) against transformers' continuations
(tests/fixtures/hf/make_gemma3_references.py)."""

import json
import os
import shutil

import gguf
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer import _gguf
from keras_transformer.pretrained import gguf_gemma3
from tests.fixtures.real_models import install_command, joined_gguf
from tests.helpers import to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
PATHS = {
    "folder": os.path.join(HF, "gemma3_tiny"),
    "gguf": os.path.join(HF, "gguf", "gemma3_tiny.Q8_0.gguf"),
}
# The bound; the largest difference measured is 7.6e-6 (logits up
# to 31), in the folder and in the GGUF file.
ATOL = 1e-4
with open(os.path.join(HF, "gemma3_reference.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)
LOGITS = dict(np.load(os.path.join(HF, "gemma3_logits.npz")))


@pytest.fixture(scope="module", params=sorted(PATHS))
def loaded(request):
    source = request.param
    return source, kt.models.from_pretrained(PATHS[source]), REFERENCE[source]


def batch(prompts):
    """Our ids (theirs + 1), 0-padded on the right."""
    ids = np.zeros((len(prompts), max(map(len, prompts))), "int32")
    for row, prompt in zip(ids, prompts, strict=True):
        row[: len(prompt)] = np.array(prompt) + 1
    return ids


def test_logits_are_transformers(loaded):
    source, model, reference = loaded
    assert type(model) is kt.models.Gemma3
    logits = to_numpy(model(batch(reference["prompt_ids"])))
    for k, prompt in enumerate(reference["prompt_ids"]):
        theirs = LOGITS[f"{source}/{k}"]
        np.testing.assert_allclose(logits[k, : len(prompt), 1:], theirs, atol=ATOL)


def test_greedy_tokens_are_transformers_past_the_window(loaded):
    _, model, reference = loaded
    prompts, steps = reference["prompt_ids"], REFERENCE["new_tokens"]
    assert min(map(len, prompts)) > model.sliding_window
    for use_cache in (True, False):
        out = to_numpy(
            kt.generation.generate(model, batch(prompts), steps, use_cache=use_cache)
        )
        for row, prompt, expected in zip(
            out, prompts, reference["continuations"], strict=True
        ):
            assert (row[: len(prompt) + steps] - 1).tolist() == expected, use_cache


def test_config_is_read_as_transformers_reads_it(loaded):
    _, model, reference = loaded
    config = reference["config"]
    assert model.layer_types == config["layer_types"]
    assert model.sliding_window == config["sliding_window"]
    assert model.query_pre_attn_scalar == config["query_pre_attn_scalar"]
    assert model.head_dim == config["head_dim"]
    rope = config["rope_parameters"]
    assert model.rope_theta == rope["full_attention"]["rope_theta"]
    assert model.local_rope_theta == rope["sliding_attention"]["rope_theta"]
    scaling = model.rope_scaling or {"rope_type": "default"}
    assert scaling["rope_type"] == rope["full_attention"]["rope_type"]


@pytest.mark.parametrize("source", sorted(PATHS))
def test_tokenizer_and_chat_template_are_transformers(source):
    reference = REFERENCE[source]
    tokenizer = kt.text.tokenizer_from_pretrained(PATHS[source])
    for text, ids, skipped in zip(
        REFERENCE["texts"],
        reference["text_ids"],
        reference["decodes_skip_special"],
        strict=True,
    ):
        ours = to_numpy(tokenizer(text))
        assert (ours - 1).tolist() == ids, text
        decoded = tokenizer.detokenize(ours, skip_special_tokens=True)
        assert decoded.numpy().decode() == skipped
    chat = tokenizer.apply_chat_template(REFERENCE["chat_messages"])
    assert chat == reference["chat"]


@pytest.mark.parametrize("source", sorted(PATHS))
def test_task_generates_transformers_greedy_text(source):
    reference = REFERENCE[source]
    task = kt.tasks.from_pretrained(PATHS[source])
    assert isinstance(task, kt.tasks.TextGenerator)
    text = task.generate(REFERENCE["texts"][0], max_new_tokens=REFERENCE["new_tokens"])
    assert text == reference["generated_text"]


def test_save_pretrained_round_trip(loaded, tmp_path):
    source, model, reference = loaded
    if source == "gguf":  # its Q8_0 projections stay int8: no float folder
        with pytest.raises(ValueError, match="quantized_mode='int8'"):
            kt.models.save_pretrained(model, tmp_path / "saved")
        return
    kt.models.save_pretrained(model, tmp_path / "saved")
    with open(tmp_path / "saved" / "config.json", encoding="utf-8") as f:
        written = json.load(f)
    with open(os.path.join(PATHS["folder"], "config.json"), encoding="utf-8") as f:
        theirs = json.load(f)
    # transformers' keys, plus the older rope keys transformers 4 reads.
    unwritten = {"_sliding_window_pattern", "transformers_version"}
    assert set(theirs) - set(written) <= unwritten | {"use_bidirectional_attention"}
    older = {"rope_theta", "rope_local_base_freq", "rope_scaling"}
    assert set(written) - set(theirs) == older
    restored = kt.models.from_pretrained(tmp_path / "saved")
    assert restored.get_config() == model.get_config()
    ids = batch(reference["prompt_ids"])
    np.testing.assert_array_equal(to_numpy(restored(ids)), to_numpy(model(ids)))


def rewrite(tmp_path, **changes):
    copy = tmp_path / "gemma3"
    shutil.copytree(PATHS["folder"], copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_older_configs_read_the_same(tmp_path):
    older = rewrite(
        tmp_path, rope_parameters=None, rope_theta=10000.0, rope_local_base_freq=100.0,
        rope_scaling={"rope_type": "linear", "factor": 2.0}, layer_types=None,
    )  # fmt: skip
    model = kt.models.from_pretrained(older)
    # Without layer_types: every sixth layer global, as transformers reads it
    # (the fixture's own layer types differ).
    assert model.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    assert model.layer_types != REFERENCE["folder"]["config"]["layer_types"]
    assert (model.rope_theta, model.local_rope_theta) == (10000.0, 100.0)
    assert model.rope_scaling == {"rope_type": "linear", "factor": 2.0}


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping=30.0"),
        ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping=50.0"),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention=True"),
        ({"hidden_activation": "gelu"}, "hidden_activation='gelu'"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False"),
        ({"architectures": ["Gemma3ForConditionalGeneration"]}, "Gemma3ForCond"),
        ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 2.0},
                              "sliding_attention": {"rope_type": "default"}}},
         "'yarn'"),
        ({"rope_parameters": {"full_attention": {"rope_type": "default"},
                              "sliding_attention": {"rope_type": "linear",
                                                    "factor": 2.0}}},
         "'linear'"),
    ],
)  # fmt: skip
def test_configs_we_do_not_compute_are_refused(tmp_path, changes, match):
    with pytest.raises(ValueError, match=match):
        kt.models.from_pretrained(rewrite(tmp_path, **changes))


def test_gguf_q8_0_projections_stay_int8_blocks_of_32():
    model = kt.models.from_pretrained(PATHS["gguf"])
    assert model.quantized_mode == "int8"
    q8_0 = [
        t.name
        for t in gguf.GGUFReader(PATHS["gguf"]).tensors
        if t.tensor_type.name == "Q8_0" and t.name != "token_embd.weight"
    ]
    assert len(q8_0) == len([v for v in model.weights if v.dtype == "int8"]) > 0


def test_gguf_keys_and_tensors_we_do_not_compute_are_refused():
    metadata = _gguf.metadata(_gguf.open_file(PATHS["gguf"]))
    for key, value in [("gemma3.rope.scaling.type", "linear"),
                       ("gemma3.attention.value_length", 8)]:  # fmt: skip
        with pytest.raises(ValueError, match=key):
            gguf_gemma3.config_of({**metadata, key: value}, "file.gguf")
    with pytest.raises(ValueError, match="rope_freqs"):
        gguf_gemma3.hf_name("rope_freqs.weight", "file.gguf")


# The real file: transformers' float32 logits against ours, relative to the
# largest logit (the bound).
RELATIVE = 1e-4
REAL = "gemma3-270m"


@pytest.fixture(scope="module")
def real():
    path = joined_gguf(REAL)
    if path is None:
        missing = f"{REAL} is not installed ({install_command(REAL)})"
        # A reference test that skips in CI proves nothing: the test command
        # installs the parts.
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    with open(os.path.join(HF, "gemma3_270m_references.json"), encoding="utf-8") as f:
        return kt.tasks.from_pretrained(path), json.load(f)


def test_real_270m_logits_are_transformers(real):
    task, reference = real
    ref = reference["logits"]
    ours = to_numpy(task.model(np.array([ref["prompt_ids"]]) + 1))[0, :, 1:]
    ours = ours.astype("float64")  # (T, V)
    top_ids = np.array(ref["top_ids"])
    bound = RELATIVE * ref["largest"]
    values = np.take_along_axis(ours, top_ids, axis=-1)
    np.testing.assert_allclose(values, ref["top_values"], rtol=0, atol=bound)
    top = ours.max(-1)
    logsumexp = np.log(np.exp(ours - top[:, None]).sum(-1)) + top
    np.testing.assert_allclose(logsumexp, ref["logsumexp"], rtol=0, atol=bound)
    assert (ours.argmax(-1) == top_ids[:, 0]).all()


def test_real_270m_continues_text_as_transformers(real):
    task, reference = real
    for item in reference["continuations"]:
        ids = (to_numpy(task.tokenizer(item["prompt"])) - 1).tolist()
        assert ids == item["prompt_ids"]
        text = task.generate(item["prompt"], max_new_tokens=reference["new_tokens"])
        assert text == item["text"]
