"""Hugging Face Whisper checkpoints load exactly: encoder states, logits,
greedy ids (forced language, with and without timestamps) and the detected
language, tokenizer ids on hard text and decoded text, against transformers'
own (committed fixtures made by tests/fixtures/hf/make_whisper_fixtures.py
from the folder as transformers reloads it: a random whisper-tiny layout at
width 16 with the real multilingual tokenizer and generation config);
save_pretrained round trips, other dtypes, the older folder form, and the
config values we refuse."""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_transformer as kt
from keras_transformer.pretrained.whisper_plan import TimestampRules
from tests.helpers import reference_import

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
AUDIO = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "audio")
FOLDER = os.path.join(HF, "whisper_tiny_random")
# The bound for encoder states; measured 1.8e-5.
ATOL = 1e-4
# Logits: measured 2.5e-4 from transformers' float32 logits (whose largest
# is 19.3); transformers' own float32 logits differ from its float64 ones
# by 3.9e-4 on this fixture (its q and k weights make attention sharp), so
# 1e-4 is below float32's noise here. Their logsumexp: within 1e-4.
LOGITS_ATOL = 5e-4


def reference():
    with open(os.path.join(HF, "whisper_tiny_random_reference.json")) as f:
        return json.load(f)


_MODEL = []


def loaded():
    if not _MODEL:
        _MODEL.append(kt.models.from_pretrained(FOLDER))
    return _MODEL[0]


def features():
    stored = np.load(os.path.join(AUDIO, "whisper_features.npz"))
    return np.stack([stored[f"speech_{i}"].T for i in range(3)])  # (3, F, M)


def logits_of(model, outputs):
    inputs = {
        "encoder_features": features(),
        "decoder_token_ids": outputs["decoder_input_ids"] + 1,
    }
    return np.asarray(model(inputs)).astype("float32")[..., 1:]  # theirs


def test_encoder_states_and_logits_equal_transformers():
    model = loaded()
    outputs = np.load(os.path.join(HF, "whisper_tiny_random_outputs.npz"))
    np.testing.assert_allclose(
        np.asarray(model.encode(features())),
        outputs["encoder_last_hidden_state"],
        atol=ATOL,
    )
    logits = logits_of(model, outputs)
    np.testing.assert_allclose(
        logits[..., outputs["logits_columns"]], outputs["logits"], atol=LOGITS_ATOL
    )
    top = logits.max(-1, keepdims=True)
    logsumexp = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    np.testing.assert_allclose(logsumexp, outputs["logits_logsumexp"], atol=ATOL)
    np.testing.assert_array_equal(logits.argmax(-1), outputs["logits_argmax"])


@pytest.mark.parametrize("timestamps", [False, True])
def test_greedy_ids_equal_transformers(timestamps):
    """`generate` with the checkpoint's settings (suppress_tokens,
    begin_suppress_tokens) and Whisper's timestamp rules gives
    transformers' ids for `language="en"`."""
    model = loaded()
    key = "greedy_en_transcribe" + ("_timestamps" if timestamps else "")
    prompt = [50258, 50259, 50359] + ([] if timestamps else [50363])
    options = dict(model.generation_config)
    options["max_new_tokens"] = 12
    if timestamps:
        options["logits_processors"] = [TimestampRules(50365, 50)]
    tokens = kt.generation.generate(
        model,
        {
            "encoder_features": features(),
            "decoder_token_ids": np.array([prompt] * 3) + 1,
        },
        **options,
    )
    assert (tokens[:, len(prompt) :] - 1).tolist() == reference()[key]["ids"]


def test_generation_settings_are_read_from_either_file(tmp_path):
    """generation_config.json (whisper-tiny's form) and, without it,
    config.json's legacy keys give the same `generate` settings."""
    model = loaded()
    settings = model.generation_config
    assert settings["begin_suppressed_token_ids"] == [221, 50258]
    assert len(settings["suppressed_token_ids"]) == 88
    assert settings["end_token_id"] == 50258
    speech = model.speech_settings
    assert speech["no_timestamps_token_id"] == 50364
    assert speech["lang_to_id"]["<|en|>"] == 50260
    assert speech["max_initial_timestamp_index"] == 50
    path = tmp_path / "legacy"
    shutil.copytree(FOLDER, path)
    os.remove(path / "generation_config.json")
    legacy = kt.models.from_pretrained(path)
    for key in ("suppressed_token_ids", "begin_suppressed_token_ids", "end_token_id"):
        assert legacy.generation_config[key] == settings[key], key


def test_tokenizer_ids_and_text_equal_transformers(tmp_path):
    ref = reference()
    tokenizer = kt.text.tokenizer_from_pretrained(FOLDER)
    assert isinstance(tokenizer, kt.text.WhisperTokenizer)
    texts = [case["text"] for case in ref["tokens"]]
    expected = [[i + 1 for i in case["ids"]] for case in ref["tokens"]]
    assert tokenizer(texts).to_list() == expected
    for case in ref["decoded"]:
        text = tokenizer.detokenize(
            [[i + 1 for i in case["ids"]]],
            skip_special_tokens=case["skip_special_tokens"],
            decode_with_timestamps=case["decode_with_timestamps"],
        )
        assert text.numpy()[0].decode() == case["text"], case
    for token, id in ref["special_ids"].items():
        assert tokenizer.token_to_id(token) == id + 1
    # transformers 5's form: only a tokenizer.json.
    path = tmp_path / "json_only"
    shutil.copytree(FOLDER, path)
    for name in ("vocab.json", "merges.txt", "added_tokens.json"):
        os.remove(path / name)
    assert kt.text.tokenizer_from_pretrained(path)(texts).to_list() == expected


def test_save_pretrained_writes_the_same_tensors_and_reloads(tmp_path):
    model = loaded()
    tokenizer = kt.text.tokenizer_from_pretrained(FOLDER)
    path = kt.models.save_pretrained(model, tmp_path / "saved", tokenizer=tokenizer)
    theirs = load_file(os.path.join(FOLDER, "model.safetensors"))
    written = load_file(os.path.join(path, "model.safetensors"))
    assert sorted(written) == sorted(theirs)
    for key, value in theirs.items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    with open(os.path.join(FOLDER, "generation_config.json")) as f:
        generation = json.load(f)
    with open(os.path.join(path, "generation_config.json")) as f:
        saved = json.load(f)
    for key in ("suppress_tokens", "begin_suppress_tokens", "lang_to_id",
                "task_to_id", "no_timestamps_token_id", "forced_decoder_ids",
                "max_initial_timestamp_index", "decoder_start_token_id",
                "eos_token_id", "max_length", "alignment_heads"):  # fmt: skip
        assert saved[key] == generation[key], key
    again = kt.models.from_pretrained(path)
    outputs = np.load(os.path.join(HF, "whisper_tiny_random_outputs.npz"))
    np.testing.assert_array_equal(logits_of(again, outputs), logits_of(model, outputs))
    assert again.generation_config == model.generation_config
    assert again.speech_settings == model.speech_settings
    texts = [case["text"] for case in reference()["tokens"]]
    reread = kt.text.tokenizer_from_pretrained(path)
    assert reread(texts).to_list() == tokenizer(texts).to_list()


@pytest.mark.parametrize(
    "change, key",
    [
        ({"activation_function": "relu"}, "activation_function"),
        ({"scale_embedding": True}, "scale_embedding"),
        ({"decoder_attention_heads": 4}, "decoder_attention_heads"),
        ({"architectures": ["WhisperForAudioClassification"]}, "architectures"),
    ],
)
def test_what_we_do_not_compute_is_refused_by_name(change, key, tmp_path):
    path = tmp_path / "changed"
    shutil.copytree(FOLDER, path)
    with open(path / "config.json") as f:
        config = json.load(f)
    config.update(change)
    with open(path / "config.json", "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError, match=key):
        kt.models.from_pretrained(path)


def test_parameter_counts_equal_transformers():
    """whisper-tiny and whisper-base count what transformers counts (the
    issue's numbers); the fixture's model counts transformers'
    `num_parameters()` of it."""
    for name, count in (("whisper_tiny", 37_760_640), ("whisper_base", 72_593_920)):
        preset = kt.models.PRESETS[name]
        assert preset["parameters"] == count
        assert kt.models.Whisper.parameter_count(**preset["config"]) == count
    config = reference()["config"]
    assert loaded().count_params() == config["num_parameters"]
    arguments = {
        k: loaded().get_config()[k]
        for k in (
            "vocabulary_size",
            "num_layers",
            "num_heads",
            "hidden_dim",
            "intermediate_dim",
            "num_mel_bins",
        )  # fmt: skip
    }
    assert kt.models.Whisper.parameter_count(**arguments) == config["num_parameters"]


# Measured: peft's float32 logits are 2.0e-3 from its float64 ones, ours
# 1.1e-3 (3.5e-4 with Eigen's kernels), the committed ones 1.5e-3.
PEFT_RATIO = 2.0


def logsumexp_of(logits):
    top = logits.max(-1, keepdims=True)
    return np.log(np.exp(logits - top).sum(-1)) + top[..., 0]


def peft_float64_and_float32_logits(reference):
    """peft's logits of base + whisper_tiny_random_lora, in float64 and in
    float32 (all columns)."""
    peft = reference_import("peft")
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    base = transformers.WhisperForConditionalGeneration.from_pretrained(FOLDER)
    model = peft.PeftModel.from_pretrained(
        base, os.path.join(HF, "whisper_tiny_random_lora")
    )
    features_ = torch.tensor(features()[:1].transpose(0, 2, 1))
    ids = torch.tensor(reference["decoder_input_ids"])
    with torch.no_grad():
        single = model.eval()(input_features=features_, decoder_input_ids=ids)
        double = model.double()(
            input_features=features_.double(), decoder_input_ids=ids
        )
    return double.logits.numpy(), single.logits.numpy()


def test_a_peft_adapter_gives_peft_logits_and_round_trips(tmp_path):
    """whisper_tiny_random_lora (make_whisper_fixtures.py): peft's logits of
    base + adapter on q_proj, k_proj, v_proj, out_proj and fc1 of every
    layer, self- and cross-attention; written back as a PEFT folder and
    read again, the same logits."""
    reference = np.load(os.path.join(HF, "whisper_tiny_random_lora_logits.npz"))
    inputs = {
        "encoder_features": features()[:1],
        "decoder_token_ids": reference["decoder_input_ids"] + 1,
    }
    columns = reference["logits_columns"] + 1
    model = kt.models.from_pretrained(FOLDER)
    base = np.asarray(model(inputs))[..., columns]
    model.load_lora(os.path.join(HF, "whisper_tiny_random_lora"))
    logits = np.asarray(model(inputs))
    assert np.abs(base - reference["logits"]).max() > 0.05  # the adapter counts
    # The adapter sharpens the fixture's attention further: float32 itself
    # is that far from exact, by an amount that depends on the CPU's
    # kernels. The bound is peft's own float32 error against its float64
    # run: the larger of this CPU's and the committed logits' (peft's
    # float32 on the CPU that made the fixture). Measured: 9.6e-5 on one
    # CPU, 2.0e-3 on another; the fixture's 1.5e-3.
    exact, theirs = peft_float64_and_float32_logits(reference)
    stored = np.abs(reference["logits"] - exact[..., columns - 1]).max()
    own = max(np.abs(theirs - exact).max(), stored)
    error = np.abs(logits[..., 1:] - exact).max()
    assert error < PEFT_RATIO * own, (error, own)
    # logsumexp moves by at most the largest logit difference.
    logsumexp = logsumexp_of(logits[..., 1:].astype("float64"))
    for recorded in (logsumexp_of(exact), reference["logits_logsumexp"]):
        assert np.abs(logsumexp - recorded).max() < PEFT_RATIO * own
    written = model.save_lora(tmp_path / "adapter", format="peft")
    again = kt.models.from_pretrained(FOLDER)
    again.load_lora(written)
    np.testing.assert_allclose(np.asarray(again(inputs)), logits, atol=1e-5)


def test_our_adapter_on_every_projection_gives_peft_logits(tmp_path):
    """Our LoRA (random A and B) on each projection PEFT names, written as a
    PEFT folder: peft.PeftModel.from_pretrained over transformers' model of
    the same folder gives our logits (an adapter written with a causal or
    seq2seq `task_type` fails there: peft passes Whisper `input_ids`)."""
    peft = reference_import("peft")
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    reference = np.load(os.path.join(HF, "whisper_tiny_random_lora_logits.npz"))
    model = kt.models.from_pretrained(FOLDER)
    targets = sorted({layer.name for layer in model.projection_layers()})
    model.enable_lora(2, targets=targets, alpha=3)
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype("float32") * 0.1)
    inputs = {
        "encoder_features": features()[:1],
        "decoder_token_ids": reference["decoder_input_ids"] + 1,
    }
    logits = np.asarray(model(inputs))[..., 1:]
    written = model.save_lora(tmp_path / "adapter", format="peft")
    base = transformers.WhisperForConditionalGeneration.from_pretrained(FOLDER)
    theirs = peft.PeftModel.from_pretrained(base, written).eval()
    arguments = {
        "input_features": torch.tensor(features()[:1].transpose(0, 2, 1)),
        "decoder_input_ids": torch.tensor(reference["decoder_input_ids"]),
    }
    with torch.no_grad():
        peft_logits = theirs(**arguments).logits.numpy()
        with theirs.disable_adapter():
            base_logits = theirs(**arguments).logits.numpy()
    assert np.abs(base_logits - peft_logits).max() > 0.05  # the adapter counts
    np.testing.assert_allclose(logits, peft_logits, atol=LOGITS_ATOL)  # 1.3e-4


SEQUENCES = [
    [50364, 2425, 1002, 50389, 50389, 1002, 13, 50414],  # two pairs, closed
    [50364, 2425, 50389, 50390, 1002, 50400, 50401, 7, 8],  # open at the end
    [50364, 2425, 1002, 50389],  # one closed pair
    [50370, 2425, 1002],  # no pair, a timestamp: ends at it
    [50364, 2425, 1002],  # no pair, <|0.00|> only: ends at the window's end
    [2425, 1002],  # no timestamp at all
]


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_segments_are_cut_as_transformers_cuts_them(sequence):
    """`WhisperTokenizer.segments` gives the start, end and tokens of
    transformers' `_retrieve_segment` (time offset 30 s, a 30 s window)."""
    torch = reference_import("torch")
    whisper = reference_import("transformers.models.whisper.generation_whisper")
    theirs, _ = whisper.WhisperGenerationMixin._retrieve_segment(
        seek_sequence=torch.tensor(sequence),
        seek_outputs=[None],
        time_offset=torch.tensor([30.0], dtype=torch.float64),
        timestamp_begin=50364,
        seek_num_frames=torch.tensor([3000]),
        time_precision=0.02,
        time_precision_features=0.01,
        input_stride=2,
        prev_idx=0,
        idx=0,
        return_token_timestamps=False,
        decoder_input_ids=torch.zeros((1, 4), dtype=torch.long),
    )
    tokenizer = kt.text.tokenizer_from_pretrained(FOLDER)
    ours = tokenizer.segments([t + 1 for t in sequence], time_offset=30.0)
    assert [(s["start"], s["end"]) for s in ours] == [
        (round(float(s["start"]), 2), round(float(s["end"]), 2)) for s in theirs
    ]
    assert [[t - 1 for t in s["tokens"]] for s in ours] == [
        s["tokens"].tolist() for s in theirs
    ]
