"""Hugging Face ViT checkpoints load exactly: logits and the final hidden
states against transformers' own (committed fixtures made by
tests/fixtures/make_vit_fixtures.py), channels last; save_pretrained round
trips; configurations we do not compute are refused by name."""

import json
import os
import shutil

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import reference_import, to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
TINY = os.path.join(HF, "vit_tiny")


@pytest.fixture(scope="module")
def tiny():
    return kt.models.from_pretrained(TINY)


def reference():
    return dict(np.load(os.path.join(HF, "vit_tiny_outputs.npz")))


def final_states(model, images):
    """The final LayerNorm's output `(B, N + 1, E)`, which transformers
    returns as `last_hidden_state`."""
    return to_numpy(keras.Model(model.input, model.final_layer_norm.output)(images))


def copy_with(tmp_path, weights=None, **changes):
    """The tiny checkpoint with `changes` to its config.json (and other
    tensors, if given)."""
    folder = tmp_path / "changed"
    shutil.copytree(TINY, folder, dirs_exist_ok=True)
    with open(os.path.join(TINY, "config.json")) as f:
        config = {**json.load(f), **changes}
    with open(folder / "config.json", "w") as f:
        json.dump(config, f)
    if weights is not None:
        from safetensors.numpy import save_file

        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_vit_checkpoint_computes_what_transformers_computes(tiny):
    model = tiny
    assert type(model) is kt.models.ViT
    expected = dict(
        image_size=16, patch_size=4, num_classes=5, num_channels=3, num_layers=2,
        num_heads=2, hidden_dim=16, intermediate_dim=32, layer_norm_epsilon=1e-12,
    )  # fmt: skip
    assert {k: model.get_config()[k] for k in expected} == expected
    ref = reference()
    logits = to_numpy(model(ref["pixel_values"]))  # channels last
    states = final_states(model, ref["pixel_values"])
    # Measured with transformers 5.24 / torch 2.13: 3.0e-6 and 1.8e-6.
    np.testing.assert_allclose(
        logits, ref["logits"], rtol=0, atol=3e-5
    )  # 3.0e-6 measured (1.8e-6 states)
    np.testing.assert_allclose(states, ref["last_hidden_state"], rtol=0, atol=2e-5)
    # The class each image gets is transformers' class, and they differ.
    assert logits.argmax(-1).tolist() == ref["logits"].argmax(-1).tolist()
    assert len(set(logits.argmax(-1).tolist())) > 1
    assert np.abs(ref["last_hidden_state"]).mean() > 0.1  # not a trivial output


def test_no_layernorm_weight_is_one_and_no_bias_zero_in_the_fixture(tiny):
    # Otherwise a forgotten LayerNorm or bias would load unnoticed.
    model = tiny
    norms = [model.final_layer_norm]
    for block in model.blocks:
        norms += [block.self_attention_layer_norm, block.feedforward_layer_norm]
    for norm in norms:
        assert np.abs(to_numpy(norm.gamma) - 1).min() > 0
        assert np.abs(to_numpy(norm.beta)).min() > 0
    assert np.abs(to_numpy(model.patch_embedding.projection.bias)).min() > 0
    key_bias = to_numpy(model.blocks[1].self_attention_layer.key_dense.bias)
    assert np.abs(key_bias).min() > 0


def test_channels_first_images_are_not_ours(tiny):
    # transformers takes (B, C, H, W); our model is channels last, and a
    # transposed batch gives other logits, not the same ones.
    ref = reference()
    images = ref["pixel_values"]
    swapped = images.transpose(0, 2, 1, 3)  # H and W swapped: still (B, 16, 16, 3)
    assert np.abs(to_numpy(tiny(swapped)) - ref["logits"]).max() > 1e-2
    with pytest.raises(ValueError, match=r"\(None, 16, 16, 3\).*\(4, 3, 16, 16\)"):
        tiny(images.transpose(0, 3, 1, 2))


def test_the_checkpoints_layer_norm_eps_and_qkv_bias(tmp_path):
    ref = reference()
    # The same weights with layer_norm_eps=1e-2: transformers' logits move by
    # 0.06, and ours with them.
    model = kt.models.from_pretrained(copy_with(tmp_path, layer_norm_eps=1e-2))
    assert model.layer_norm_epsilon == 1e-2
    assert np.abs(ref["eps_logits"] - ref["logits"]).max() > 1e-2
    logits = to_numpy(model(ref["pixel_values"]))
    np.testing.assert_allclose(logits, ref["eps_logits"], rtol=0, atol=3e-5)
    # Without query/key/value biases ours stay zeros.
    from safetensors.numpy import load_file

    weights = {
        key: value
        for key, value in load_file(os.path.join(TINY, "model.safetensors")).items()
        if not key.endswith(("query.bias", "key.bias", "value.bias"))
    }
    folder = copy_with(tmp_path / "no_bias", weights, qkv_bias=False)
    model = kt.models.from_pretrained(folder)
    assert not to_numpy(model.blocks[0].self_attention_layer.query_dense.bias).any()
    logits = to_numpy(model(ref["pixel_values"]))
    np.testing.assert_allclose(logits, ref["no_qkv_bias_logits"], rtol=0, atol=3e-5)


def test_save_pretrained_round_trips_with_identical_logits(tiny, tmp_path):
    folder = kt.models.save_pretrained(tiny, tmp_path / "copy")
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    from safetensors.numpy import load_file

    theirs = load_file(os.path.join(TINY, "model.safetensors"))
    ours = load_file(os.path.join(folder, "model.safetensors"))
    assert set(ours) == set(theirs)  # transformers' tensor names, all of them
    for name, value in ours.items():
        np.testing.assert_array_equal(value, theirs[name])
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "vit" and config["num_labels"] == 5
    assert "id2label" not in config  # our ViT has a class count, not names
    again = kt.models.from_pretrained(folder)
    images = reference()["pixel_values"]
    np.testing.assert_array_equal(to_numpy(again(images)), to_numpy(tiny(images)))
    # A model of our own, not from a checkpoint, with another epsilon.
    model = kt.models.vit(8, 4, 3, num_channels=1, num_layers=1, num_heads=2,
                          hidden_dim=8, intermediate_dim=16,
                          layer_norm_epsilon=1e-6)  # fmt: skip
    folder = kt.models.save_pretrained(model, tmp_path / "own")
    again = kt.models.from_pretrained(folder)
    assert again.get_config() == model.get_config()
    images = np.random.default_rng(0).random((2, 8, 8, 1), "float32")
    np.testing.assert_array_equal(to_numpy(again(images)), to_numpy(model(images)))
    with pytest.raises(ValueError, match="tokenizer"):
        kt.models.save_pretrained(model, tmp_path / "bad", tokenizer="vocab.txt")


def test_save_pretrained_loads_in_transformers_with_identical_logits(tiny, tmp_path):
    transformers = reference_import("transformers")
    torch = reference_import("torch")
    # transformers' model of our folder and of the fixture's, in one
    # process: the same weights through the same kernels, bit for bit (the
    # stored reference was computed on another CPU; float32 sums in another
    # order move it by 1e-6, as they would move ours).
    folder = kt.models.save_pretrained(tiny, tmp_path / "ours")
    load = transformers.ViTForImageClassification.from_pretrained
    theirs, original = load(folder).eval(), load(TINY).eval()
    ref = reference()
    pixels = torch.tensor(ref["pixel_values"].transpose(0, 3, 1, 2))  # NCHW
    with torch.no_grad():
        logits = theirs(pixel_values=pixels).logits.numpy()
        expected = original(pixel_values=pixels).logits.numpy()
    np.testing.assert_array_equal(logits, expected)
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=1e-5)
    assert theirs.config.num_labels == 5


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_act": "gelu_new"}, "hidden_act='gelu_new'"),
        ({"qkv_bias": "yes"}, "qkv_bias='yes'"),
        ({"image_size": [16, 32]}, r"image_size=\[16, 32\]"),
        ({"patch_size": [4, 2]}, r"patch_size=\[4, 2\]"),
        ({"num_channels": 1}, "num_channels=1"),
        ({"architectures": ["ViTModel"]}, r"architectures=\['ViTModel'\]"),
        (
            {"architectures": ["ViTForMaskedImageModeling"]},
            "ViTForMaskedImageModeling",
        ),
        ({"model_type": "deit"}, "model_type='deit'"),
        ({"hidden_size": 32}, "disagrees with its config.json"),
        ({"num_labels": 3, "id2label": None}, "disagrees with its config.json"),
    ],
)
def test_unsupported_checkpoints_are_refused_by_name(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        kt.models.from_pretrained(copy_with(tmp_path, **change))


def test_square_lists_are_squares_and_folders_need_weights(tmp_path):
    model = kt.models.from_pretrained(
        copy_with(tmp_path, image_size=[16, 16], patch_size=[4, 4])
    )
    assert (model.image_size, model.patch_size) == (16, 4)
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(os.path.join(TINY, "config.json"), empty / "config.json")
    with pytest.raises(FileNotFoundError, match="No model.safetensors"):
        kt.models.from_pretrained(empty)
    with pytest.raises(FileNotFoundError, match="config.json"):
        kt.models.from_pretrained(tmp_path / "nowhere")
