"""Marian and BART checkpoints: loaded exactly, tokenized and decoded as
`transformers` does, written back.

The fixtures (tests/fixtures/hf/{marian,bart}_tiny*) come from
tests/fixtures/make_seq2seq_fixtures.py, run with torch and transformers;
these tests read them without either.
"""

import json
import os
import shutil

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import reference_import

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")
FAMILIES = ["marian_tiny", "bart_tiny"]
BEAM_KEYS = ("rules", "num_beams", "length_penalty", "early_stopping")


def folder(name):
    return os.path.join(FIXTURES, name)


@pytest.fixture(scope="module")
def loaded():
    """`{name: (model, source tokenizer, target tokenizer)}`, loaded once."""
    result = {}
    for name in FAMILIES:
        model = kt.models.from_pretrained(folder(name))
        tokenizer = kt.text.tokenizer_from_pretrained(folder(name))
        source, target = tokenizer if isinstance(tokenizer, tuple) else (tokenizer,) * 2
        result[name] = (model, source, target)
    return result


def reference(name):
    return json.load(open(folder(f"{name}_generation.json"), encoding="utf-8"))


@pytest.mark.parametrize("name", FAMILIES)
def test_encoder_states_and_logits_match_transformers(loaded, name):
    model = loaded[name][0]
    outputs = np.load(folder(f"{name}_outputs.npz"))
    mask = outputs["attention_mask"].astype(bool)
    source = np.where(mask, outputs["input_ids"] + 1, 0)  # our ids: theirs + 1
    decoder = outputs["decoder_input_ids"] + 1
    states = np.asarray(model.encode(source))
    np.testing.assert_allclose(
        states[mask], outputs["encoder_hidden_states"][mask], rtol=0, atol=5e-5
    )  # 5.2e-6 (Marian) and 7.2e-6 (BART) measured
    logits = np.asarray(
        model({"encoder_token_ids": source, "decoder_token_ids": decoder})
    )
    assert logits.shape[-1] == outputs["logits"].shape[-1] + 1  # + our padding
    # 1.8e-5 (Marian) and 1.5e-5 (BART) measured, on logits up to about 10
    np.testing.assert_allclose(logits[..., 1:], outputs["logits"], rtol=0, atol=2e-4)


def test_options_follow_each_family(loaded):
    marian, bart = loaded["marian_tiny"][0], loaded["bart_tiny"][0]
    assert (marian.position, marian.sinusoidal_layout, marian.activation) == (
        "sinusoidal",
        "concatenated",
        "silu",
    )
    assert marian.scale_embeddings and not marian.embedding_layer_norm
    assert (bart.position, bart.position_offset, bart.activation) == (
        "learned",
        2,
        "gelu",
    )
    assert bart.embedding_layer_norm and not bart.scale_embeddings
    assert len(bart.encoder_blocks) == 2 and len(bart.decoder_blocks) == 1
    # Their decoder start tokens, in our ids: Marian's pad, BART's </s>.
    assert marian.decoder_start_token_id == 85 + 1
    assert bart.decoder_start_token_id == 2 + 1
    # Their generation_config.json, whole, in our ids (theirs + 1).
    assert marian.generation_config == {
        "end_token_id": 0 + 1,
        "max_new_tokens": 24 - 1,  # max_length counts the start token
        "sampler": "beam",
        "rules": "transformers",
        "num_beams": 4,
        "length_penalty": 1.0,
        "early_stopping": False,
        "suppressed_token_ids": [85 + 1],  # bad_words_ids [[85]]: the pad
        "force_end_token": True,
        "renormalize_logits": True,
    }
    assert bart.generation_config == {
        "end_token_id": 2 + 1,
        "max_new_tokens": 20 - 1,
        "sampler": "beam",
        "rules": "transformers",
        "num_beams": 4,
        "length_penalty": 2.0,
        "early_stopping": True,
        "min_new_tokens": 6 - 1,
        "no_repeat_ngram_size": 3,
        "forced_first_token_id": 0 + 1,
        "force_end_token": True,
    }


@pytest.mark.parametrize("name", FAMILIES)
def test_tokenizer_ids_match_transformers(loaded, name):
    model, source, _ = loaded[name]
    rows = reference(name)
    ids = source.truncate(source.tokenize([r["text"] for r in rows]), 64)
    ours = [[i - 1 for i in row] for row in ids.to_list()]
    assert ours == [r["input_ids"] for r in rows]
    assert max(len(r["input_ids"]) for r in rows) == model.max_sequence_length == 64


def _generate(model, source, rows, **settings):
    ids = source.truncate(source.tokenize([r["text"] for r in rows]), 64)
    ids = ids.to_tensor().numpy()
    tokens = kt.generation.generate(model, {"encoder_token_ids": ids}, **settings)
    return [[t - 1 for t in row if t != 0] for row in tokens]  # theirs, unpadded


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_matches_transformers_generate(loaded, name):
    model, source, target = loaded[name]
    rows = reference(name)
    greedy = {k: v for k, v in model.generation_config.items() if k not in BEAM_KEYS}
    ours = _generate(model, source, rows, **{**greedy, "sampler": "greedy"})
    assert any(len(r["greedy_ids"]) < 10 for r in rows)  # some end early
    assert ours == [r["greedy_ids"] for r in rows]
    ids = [[t + 1 for t in row] for row in ours]
    text = target.detokenize(ids, skip_special_tokens=True).numpy()
    assert [t.decode() for t in text] == [r["greedy_text"] for r in rows]


@pytest.mark.parametrize("name", FAMILIES)
def test_beam_search_matches_transformers_generate(loaded, name):
    model, source, target = loaded[name]
    rows = reference(name)
    ours = _generate(model, source, rows, **model.generation_config)  # its own
    assert ours == [r["beam_ids"] for r in rows]
    ids = [[t + 1 for t in row] for row in ours]
    text = target.detokenize(ids, skip_special_tokens=True).numpy()
    assert [t.decode() for t in text] == [r["beam_text"] for r in rows]


@pytest.mark.parametrize("name", FAMILIES)
def test_save_pretrained_round_trip(loaded, name, tmp_path):
    model, source, target = loaded[name]
    tokenizer = (source, target) if name.startswith("marian") else source
    path = kt.models.save_pretrained(model, tmp_path / "out", tokenizer=tokenizer)
    files = set(os.listdir(path))
    assert {"config.json", "model.safetensors", "generation_config.json"} <= files
    again = kt.models.from_pretrained(path)
    assert again.generation_config == model.generation_config
    assert again.decoder_start_token_id == model.decoder_start_token_id
    inputs = {
        "encoder_token_ids": np.array([[5, 9, 12, 2, 0, 0], [7, 8, 9, 10, 11, 2]]),
        "decoder_token_ids": np.array([[model.decoder_start_token_id, 6, 7]] * 2),
    }
    np.testing.assert_array_equal(np.asarray(again(inputs)), np.asarray(model(inputs)))
    tokens = kt.text.tokenizer_from_pretrained(path)
    again_source = tokens[0] if isinstance(tokens, tuple) else tokens
    texts = [r["text"] for r in reference(name)]
    assert again_source.tokenize(texts).to_list() == source.tokenize(texts).to_list()


@pytest.mark.parametrize("name", FAMILIES)
def test_save_pretrained_loads_in_transformers(loaded, name, tmp_path):
    transformers = reference_import("transformers")
    torch = reference_import("torch")
    model, source, target = loaded[name]
    tokenizer = (source, target) if name.startswith("marian") else source
    path = kt.models.save_pretrained(model, tmp_path / "out", tokenizer=tokenizer)
    classes = {
        "marian_tiny": transformers.MarianMTModel,
        "bart_tiny": transformers.BartForConditionalGeneration,
    }
    theirs = classes[name].from_pretrained(path).eval()
    outputs = np.load(folder(f"{name}_outputs.npz"))
    with torch.no_grad():
        logits = theirs(
            input_ids=torch.tensor(outputs["input_ids"]),
            attention_mask=torch.tensor(outputs["attention_mask"]),
            decoder_input_ids=torch.tensor(outputs["decoder_input_ids"]),
        ).logits.numpy()
    np.testing.assert_allclose(logits, outputs["logits"], rtol=0, atol=1e-4)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    rows = reference(name)
    assert [hf_tokenizer(r["text"], truncation=True)["input_ids"] for r in rows] == [
        r["input_ids"] for r in rows
    ]
    with torch.no_grad():
        generated = theirs.generate(torch.tensor([rows[0]["input_ids"]]))
    assert generated[0].tolist() == rows[0]["beam_ids"]


def _copy(name, tmp_path):
    path = tmp_path / name
    shutil.copytree(folder(name), path)
    return path


@pytest.mark.parametrize(
    "key, value",
    [
        ("share_encoder_decoder_embeddings", False),
        ("tie_word_embeddings", False),
        ("activation_function", "mish"),
        ("decoder_attention_heads", 4),
        ("do_sample", True),
        ("num_beam_groups", 2),
    ],
)
def test_unsupported_config_names_key_before_weights(tmp_path, key, value):
    path = _copy("marian_tiny", tmp_path)
    file = (
        "generation_config.json"
        if key in ("do_sample", "num_beam_groups")
        else "config.json"
    )
    config = json.load(open(path / file))
    config[key] = value
    json.dump(config, open(path / file, "w"))
    os.remove(path / "model.safetensors")  # the check comes before reading weights
    with pytest.raises(ValueError, match=key):
        kt.models.from_pretrained(path)


def test_multi_token_bad_words_are_refused(tmp_path):
    path = _copy("marian_tiny", tmp_path)
    generation = json.load(open(path / "generation_config.json"))
    generation["bad_words_ids"] = [[3, 4]]
    json.dump(generation, open(path / "generation_config.json", "w"))
    with pytest.raises(ValueError, match="bad_words_ids"):
        kt.models.from_pretrained(path)


def test_missing_tokenizer_file(tmp_path):
    path = _copy("marian_tiny", tmp_path)
    os.remove(path / "target.spm")
    with pytest.raises(FileNotFoundError, match="target.spm"):
        kt.text.tokenizer_from_pretrained(path)


@pytest.mark.parametrize("name", FAMILIES)
def test_tokenizer_larger_than_model_vocabulary(tmp_path, name):
    path = _copy(name, tmp_path)
    config = json.load(open(path / "config.json"))
    config["vocab_size"] = 40
    json.dump(config, open(path / "config.json", "w"))
    with pytest.raises(ValueError, match="vocab_size=40"):
        kt.text.tokenizer_from_pretrained(path)


def test_save_pretrained_refuses_other_seq2seq(tmp_path):
    model = kt.models.seq2seq(
        30, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    with pytest.raises(ValueError, match="Marian or BART"):
        kt.models.save_pretrained(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_save_pretrained_refuses_mismatched_tokenizer(loaded, tmp_path):
    model = loaded["marian_tiny"][0]
    bart_tokenizer = loaded["bart_tiny"][1]
    with pytest.raises(ValueError, match="tokenizer"):
        kt.models.save_pretrained(model, tmp_path / "out", tokenizer=bart_tokenizer)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name, export, signature, argument, output",
    [
        ("marian_tiny", "translator", "translate", "sentences", "translation"),
        ("bart_tiny", "summarizer", "summarize", "documents", "summary"),
    ],
)
def test_export_serves_transformers_outputs(
    loaded, tmp_path, name, export, signature, argument, output
):
    """The SavedModel (TensorFlow and tensorflow-text only) gives the text of
    transformers' generate with the checkpoint's settings: beam search, and
    an empty source and one over the maximum length among the inputs."""
    from tests.helpers import run_export_test

    model, source, target = loaded[name]
    if export == "translator":
        path = kt.export.export_translator(model, source, target, tmp_path / "saved")
    else:
        path = kt.export.export_summarizer(model, source, tmp_path / "saved")
    rows = reference(name)
    texts = [r["text"] for r in rows]
    names, (served,) = run_export_test(path, [(signature, {argument: texts})], tmp_path)
    assert names == ["serving_default", signature]
    assert [t.decode() for t in served[output]] == [r["beam_text"] for r in rows]


def test_bart_tokenizer_json_alone_gives_the_same_ids(loaded, tmp_path):
    path = _copy("bart_tiny", tmp_path)
    os.remove(path / "vocab.json")
    os.remove(path / "merges.txt")  # what transformers 5 writes: tokenizer.json
    tokenizer = kt.text.tokenizer_from_pretrained(path)
    rows = reference("bart_tiny")
    ids = tokenizer.truncate(tokenizer.tokenize([r["text"] for r in rows]), 64)
    assert [[i - 1 for i in row] for row in ids.to_list()] == [
        r["input_ids"] for r in rows
    ]


def test_special_tokens_beyond_the_model_vocabulary_are_allowed(tmp_path):
    # bart-large-cnn: vocab_size 50264, and vocab.json's 50265th token <mask>.
    characters = list(kt.text.bytes_to_unicode().values())
    tokens = ["<s>", "<pad>", "</s>", "<unk>", *characters, "<mask>"]
    (tmp_path / "vocab.json").write_text(
        json.dumps({t: i for i, t in enumerate(tokens)})
    )
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    config = {"model_type": "bart", "vocab_size": len(tokens) - 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    tokenizer = kt.text.tokenizer_from_pretrained(tmp_path)
    assert tokenizer.vocabulary_size() == len(tokens) + 1
    assert tokenizer.emitted_vocabulary_size() == len(tokens)  # <mask> aside
    config["vocab_size"] = len(tokens) - 2  # an ordinary token beyond: refused
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="vocab_size"):
        kt.text.tokenizer_from_pretrained(tmp_path)


def test_generation_settings_follow_transformers_precedence(tmp_path):
    path = _copy("bart_tiny", tmp_path)
    config = json.load(open(path / "config.json"))
    config.update(num_beams=7, force_bos_token_to_be_generated=True)
    json.dump(config, open(path / "config.json", "w"))
    # generation_config.json wins over config.json's legacy keys...
    assert kt.models.from_pretrained(path).generation_config["num_beams"] == 4
    # ...which count when it is absent (legacy BART forces <s>).
    os.remove(path / "generation_config.json")
    settings = kt.models.from_pretrained(path).generation_config
    assert settings["num_beams"] == 7 and settings["forced_first_token_id"] == 1
    assert settings["max_new_tokens"] == 19  # transformers' default max_length 20


@pytest.mark.parametrize(
    "key, value",
    [("num_return_sequences", 2), ("encoder_no_repeat_ngram_size", 3),
     ("forced_decoder_ids", [[1, 5]]), ("encoder_repetition_penalty", 1.2)],
)  # fmt: skip
def test_unsupported_generation_settings_are_refused(tmp_path, key, value):
    path = _copy("bart_tiny", tmp_path)
    generation = json.load(open(path / "generation_config.json"))
    generation[key] = value
    json.dump(generation, open(path / "generation_config.json", "w"))
    with pytest.raises(ValueError, match=key):
        kt.models.from_pretrained(path)


def test_repetition_penalty_is_read_and_written_back(tmp_path):
    path = _copy("bart_tiny", tmp_path)
    generation = json.load(open(path / "generation_config.json"))
    generation["repetition_penalty"] = 1.2
    json.dump(generation, open(path / "generation_config.json", "w"))
    model = kt.models.from_pretrained(path)
    assert model.generation_config["repetition_penalty"] == 1.2
    saved = kt.models.save_pretrained(model, tmp_path / "saved")
    written = json.load(open(os.path.join(saved, "generation_config.json")))
    assert written["repetition_penalty"] == 1.2


def test_several_eos_token_ids_decode_as_transformers(tmp_path):
    """A generation_config.json listing two end tokens (fixture from
    make_eos_list_fixture.py): transformers' ids for greedy and beam search,
    the same text from the Translator and its SavedModel, the list written
    back by save_pretrained."""
    from tests.helpers import run_export_test

    with open(folder("marian_tiny_eos_list.json"), encoding="utf-8") as f:
        fixture = json.load(f)
    path = _copy("marian_tiny", tmp_path)
    with open(path / "generation_config.json", "w") as f:
        json.dump(fixture["generation_config"], f)
    translator = kt.tasks.from_pretrained(path)
    model, source = translator.model, translator.source_tokenizer
    settings = model.generation_config
    assert settings["end_token_id"] == [0 + 1, 61 + 1]
    assert settings["suppressed_token_ids"] == [85 + 1]  # 61 dropped: an end id
    rows = fixture["rows"]
    assert sum(r["greedy_ids"][-1] == 61 for r in rows) >= 3  # the second ends
    greedy = {k: v for k, v in settings.items() if k not in BEAM_KEYS}
    ours = _generate(model, source, rows, **{**greedy, "sampler": "greedy"})
    assert ours == [r["greedy_ids"] for r in rows]
    assert _generate(model, source, rows, **settings) == [r["beam_ids"] for r in rows]
    # End tokens are never written into the text (transformers' decode keeps
    # 61, an ordinary token): ours is theirs without it.
    rows = [r for r in rows if r["text"]]  # translate refuses an empty text
    texts = translator.translate([r["text"] for r in rows])
    target = translator.target_tokenizer
    kept = [[t + 1 for t in r["beam_ids"][1:] if t not in (0, 61)] for r in rows]
    kept = target.detokenize(kept, skip_special_tokens=True).numpy()
    expected = [t.decode() for t in kept]
    assert texts == expected
    assert any(r["beam_text"] != t for r, t in zip(rows, texts, strict=True))
    saved = kt.models.save_pretrained(model, tmp_path / "saved")
    written = json.load(open(os.path.join(saved, "generation_config.json")))
    assert written["eos_token_id"] == [0, 61] and "forced_eos_token_id" not in written
    assert kt.models.from_pretrained(saved).generation_config == settings
    exported = translator.export(tmp_path / "served")
    request = [("translate", {"sentences": [r["text"] for r in rows]})]
    _, (served,) = run_export_test(exported, request, tmp_path)
    assert [t.decode() for t in served["translation"]] == texts


def test_forced_eos_must_be_the_eos_token_ids(tmp_path):
    """Forcing every end id at the last step is what we reproduce: a forced
    list equal to the end ids is read and written back, another refused."""
    path = _copy("marian_tiny", tmp_path)
    generation = json.load(open(path / "generation_config.json"))
    generation.update(eos_token_id=[0, 61], forced_eos_token_id=[61, 0])
    json.dump(generation, open(path / "generation_config.json", "w"))
    model = kt.models.from_pretrained(path)
    assert model.generation_config["force_end_token"] is True
    saved = kt.models.save_pretrained(model, tmp_path / "saved")
    written = json.load(open(os.path.join(saved, "generation_config.json")))
    assert written["forced_eos_token_id"] == [0, 61]
    for forced in (0, [0], [0, 61, 7]):
        generation["forced_eos_token_id"] = forced
        json.dump(generation, open(path / "generation_config.json", "w"))
        with pytest.raises(ValueError, match="forced_eos_token_id"):
            kt.models.from_pretrained(path)
    generation.update(eos_token_id=[0, "x"], forced_eos_token_id=None)
    json.dump(generation, open(path / "generation_config.json", "w"))
    with pytest.raises(ValueError, match="eos_token_id"):
        kt.models.from_pretrained(path)


def test_pytorch_bin_only_says_to_convert(tmp_path):
    path = _copy("marian_tiny", tmp_path)
    os.replace(path / "model.safetensors", path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="convert it to safetensors"):
        kt.models.from_pretrained(path)
