"""Hugging Face GPT-2 checkpoints load exactly: logits and greedy
continuations against transformers' own (committed fixtures made by
tests/fixtures/make_hf_fixtures.py), ids shifted by one for padding, the
folder's byte-level BPE, save_pretrained round trips and exports."""

import json
import os
import shutil

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import reference_import, run_export_test, to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
TINY = os.path.join(HF, "gpt2_tiny")


@pytest.fixture(scope="module")
def tiny():
    return kt.models.from_pretrained(TINY), kt.text.tokenizer_from_pretrained(TINY)


def reference():
    ref = dict(np.load(os.path.join(HF, "gpt2_tiny_outputs.npz")))
    # Our ids are GPT-2's plus one; 0 is padding.
    ref["ours"] = np.where(ref["padding_mask"], ref["token_ids"] + 1, 0)
    with open(os.path.join(HF, "gpt2_tiny_tokens.json"), encoding="utf-8") as f:
        ref.update(json.load(f))
    return ref


def check_logits(model, ref, atol=5e-6):  # about 10x the error measured, 4.8e-7
    # Logits over GPT-2's vocabulary are ours from id 1 on, at every real
    # position (padding on the right cannot reach them: attention is causal).
    logits = to_numpy(model(ref["ours"]))
    real = ref["padding_mask"]
    np.testing.assert_allclose(logits[..., 1:][real], ref["logits"][real], atol=atol)
    return logits


def test_gpt2_checkpoint_computes_what_transformers_computes(tiny):
    model, _ = tiny
    assert type(model) is kt.models.GPT2
    assert (model.vocabulary_size, model.activation) == (301, "gelu_approximate")
    np.testing.assert_array_equal(
        to_numpy(model.embeddings.token_embedding.embeddings)[0], 0
    )  # the padding row
    check_logits(model, reference())


def test_layer_norm_epsilon_is_the_checkpoints(tmp_path):
    # gpt2_tiny_eps has layer_norm_epsilon 1e-3, not GPT-2's 1e-5, and
    # activations small enough for it to matter.
    folder = os.path.join(HF, "gpt2_tiny_eps")
    ref = dict(np.load(os.path.join(HF, "gpt2_tiny_eps_outputs.npz")))
    ref["ours"] = np.where(ref["padding_mask"], ref["token_ids"] + 1, 0)
    model = kt.models.from_pretrained(folder)
    assert model.layer_norm_epsilon == 1e-3
    check_logits(model, ref)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    default = tmp_path / "default"
    shutil.copytree(folder, default)
    config["layer_norm_epsilon"] = 1e-5
    (default / "config.json").write_text(json.dumps(config))
    logits = to_numpy(kt.models.from_pretrained(default)(ref["ours"]))[..., 1:]
    real = ref["padding_mask"]
    assert np.abs(logits[real] - ref["logits"][real]).max() > 1e-3  # it matters
    saved = kt.models.save_pretrained(model, tmp_path / "saved")
    with open(os.path.join(saved, "config.json")) as f:
        assert json.load(f)["layer_norm_epsilon"] == 1e-3
    check_logits(kt.models.from_pretrained(saved), ref)


def test_greedy_continuations_are_transformers_tokens(tiny):
    model, tokenizer = tiny
    ref = reference()
    for prompt, theirs in zip(ref["prompts"], ref["continuations"], strict=True):
        ids = to_numpy(tokenizer(prompt))[None]
        assert (ids[0] - 1).tolist() == theirs[: ids.shape[1]]
        for use_cache in (True, False):
            out = kt.generation.generate(
                model, ids, len(theirs) - ids.shape[1], use_cache=use_cache
            )
            assert (to_numpy(out)[0] - 1).tolist() == theirs


def test_folder_tokenizer_from_either_file_format(tiny, tmp_path):
    _, tokenizer = tiny
    ref = reference()
    assert [[i - 1 for i in r] for r in tokenizer(ref["texts"]).to_list()] == ref["ids"]
    # transformers 5 writes only tokenizer.json: the same ids from it.
    shutil.copy(os.path.join(TINY, "tokenizer.json"), tmp_path / "tokenizer.json")
    again = kt.text.tokenizer_from_pretrained(tmp_path)
    assert again(ref["texts"]).to_list() == tokenizer(ref["texts"]).to_list()
    assert again.token_to_id("<|endoftext|>") == 1  # GPT-2 id 0, here


def test_fine_tune_save_and_load_elsewhere(tiny, tmp_path):
    _, tokenizer = tiny
    model = kt.models.from_pretrained(TINY)  # a fresh copy to train
    ref = reference()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(from_logits=True),
    )
    ids = ref["ours"]
    history = model.fit(ids[:, :-1], ids[:, 1:], epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    folder = kt.models.save_pretrained(model, tmp_path / "tuned", tokenizer=tokenizer)
    assert sorted(os.listdir(folder)) == [
        "config.json", "merges.txt", "model.safetensors", "tokenizer_config.json",
        "vocab.json",
    ]  # fmt: skip
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert (config["vocab_size"], config["eos_token_id"]) == (300, 0)  # GPT-2's ids
    loaded = kt.models.from_pretrained(folder)
    # Training moves the padding row (the softmax includes its logit); the
    # checkpoint has no such row, so it loads as zeros again. Every logit over
    # GPT-2's vocabulary is the same, and so is every generated token.
    real = ref["padding_mask"]
    np.testing.assert_array_equal(
        to_numpy(loaded(ids))[..., 1:][real], to_numpy(model(ids))[..., 1:][real]
    )
    prompt = ids[:1, :3]
    np.testing.assert_array_equal(
        to_numpy(kt.generation.generate(loaded, prompt, 6)),
        to_numpy(kt.generation.generate(model, prompt, 6)),
    )
    again = kt.text.tokenizer_from_pretrained(folder)
    assert again(ref["texts"]).to_list() == tokenizer(ref["texts"]).to_list()


def test_save_pretrained_loads_in_transformers_with_identical_logits(tiny, tmp_path):
    transformers = reference_import("transformers")
    torch = reference_import("torch")
    model, tokenizer = tiny
    folder = kt.models.save_pretrained(model, tmp_path / "ours", tokenizer=tokenizer)
    # transformers' model of our folder and of the fixture's, in one
    # process: the same weights through the same kernels, bit for bit. The
    # stored reference moves with torch's kernels (1.6e-5 in a test worker
    # that had run other modules, where 1e-6 had held alone).
    load = transformers.GPT2LMHeadModel.from_pretrained
    theirs, original = load(folder).eval(), load(TINY).eval()
    ref = reference()
    inputs = {
        "input_ids": torch.tensor(ref["token_ids"]),
        "attention_mask": torch.tensor(ref["padding_mask"].astype("int64")),
    }
    with torch.no_grad():
        logits = theirs(**inputs).logits.numpy()
        expected = original(**inputs).logits.numpy()
    real = ref["padding_mask"]
    np.testing.assert_array_equal(logits[real], expected[real])
    np.testing.assert_allclose(logits[real], ref["logits"][real], rtol=0, atol=1e-4)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert hf_tokenizer(ref["texts"][3])["input_ids"] == ref["ids"][3]


@pytest.mark.slow
def test_exported_text_generator_of_an_imported_gpt2(tiny, tmp_path):
    # Strings in, strings out, the BPE in the graph; served without this library.
    model, tokenizer = tiny
    ref = reference()
    path = kt.export.export_text_generator(
        model, tokenizer, tmp_path / "gpt2", max_new_tokens=8, end_token=None
    )
    request = {
        "prompts": np.array(ref["prompts"], dtype=object),
        "max_new_tokens": np.int32(8),
        "temperature": np.float32(0.0),
    }
    _, (out,) = run_export_test(path, [("generate", request)], tmp_path)
    for row, prompt, theirs in zip(
        out["token_ids"], ref["prompts"], ref["continuations"], strict=True
    ):
        length = len(to_numpy(tokenizer(prompt)))
        assert (row[: length + 8] - 1).tolist() == theirs[: length + 8]
    expected = tokenizer.detokenize(out["token_ids"]).numpy().tolist()
    assert out["text"].tolist() == expected


def test_bad_gpt2_checkpoints(tmp_path):
    folder = tmp_path / "gpt2"
    shutil.copytree(TINY, folder)
    with open(os.path.join(TINY, "config.json")) as f:
        original = json.load(f)
    for change, message in [
        ({"activation_function": "relu"}, "activation_function='relu'"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"architectures": ["GPT2ForSequenceClassification"]}, "GPT2LMHeadModel"),
        ({"n_embd": 32}, "'transformer.wte.weight' has shape"),
        (
            {"model_type": "mt5"},
            r"supported: \['bart', 'bert', 'gemma3_text', 'gpt2', 'llama', 'marian', "
            r"'mistral', 'qwen2', 't5', 'vit', 'whisper'\]",
        ),
    ]:
        with open(folder / "config.json", "w") as f:
            json.dump({**original, **change}, f)
        with pytest.raises(ValueError, match=message):
            kt.models.from_pretrained(folder)
    shutil.copy(os.path.join(TINY, "config.json"), folder / "config.json")
    from safetensors.numpy import load_file, save_file

    tensors = load_file(os.path.join(TINY, "model.safetensors"))
    untied = {**tensors, "lm_head.weight": tensors["transformer.wte.weight"] + 1}
    save_file(untied, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="lm_head.weight.*ties"):
        kt.models.from_pretrained(folder)
    # OpenAI's own names (no prefix) and causal-mask buffers load.
    plain = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    plain["h.0.attn.bias"] = np.ones((1, 1, 32, 32), "float32")
    save_file(plain, str(folder / "model.safetensors"))
    check_logits(kt.models.from_pretrained(folder), reference())
    del plain["h.1.mlp.c_fc.bias"]
    save_file(plain, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="no tensor 'h.1.mlp.c_fc.bias'"):
        kt.models.from_pretrained(folder)
    os.remove(folder / "merges.txt")
    os.remove(folder / "tokenizer.json")
    os.remove(folder / "vocab.json")
    with pytest.raises(FileNotFoundError, match="vocab.json and merges.txt"):
        kt.text.tokenizer_from_pretrained(folder)
    (folder / "tokenizer.json").write_text('{"model": {"type": "Unigram"}}')
    with pytest.raises(ValueError, match="tokenizer.json.*'Unigram'"):
        kt.text.tokenizer_from_pretrained(folder)
    bert = kt.text.tokenizer_from_pretrained(os.path.join(HF, "bert_tiny"))
    with pytest.raises(ValueError, match="BytePairTokenizer"):
        kt.models.save_pretrained(kt.models.from_pretrained(TINY), tmp_path, bert)
