"""Marian and BART checkpoints as real folders lay them out: opus-mt and
bart-large-cnn carry tied copies of the shared table (`lm_head.weight`,
`*.embed_tokens.weight`), Marian its sinusoid table
(`*.embed_positions.weight`), fairseq conversions `.version` buffers, and
some exports no `final_logits_bias`. Copies of the fixtures augmented with
each load with identical logits; an untied copy is refused."""

import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import keras_transformer as kt

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")
FAMILIES = ["marian_tiny", "bart_tiny"]


def logits(model, name):
    outputs = np.load(os.path.join(FIXTURES, f"{name}_outputs.npz"))
    mask = outputs["attention_mask"].astype(bool)
    inputs = {
        "encoder_token_ids": np.where(mask, outputs["input_ids"] + 1, 0),
        "decoder_token_ids": outputs["decoder_input_ids"] + 1,
    }
    return np.asarray(model(inputs))


def rewrite(name, tmp_path, change):
    """A copy of fixture `name` whose tensors `change(tensors)` returns."""
    path = tmp_path / name
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(os.path.join(FIXTURES, name), path)
    tensors = load_file(path / "model.safetensors")
    save_file(change(tensors), str(path / "model.safetensors"))
    return path


def marian_sinusoids(length, depth):
    """transformers' MarianSinusoidalPositionalEmbedding table: sines of
    the even frequencies first, then cosines."""
    angles = np.array(
        [
            [p / 10000 ** (2 * (j // 2) / depth) for j in range(depth)]
            for p in range(length)
        ]
    )
    return np.concatenate(
        [np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1
    ).astype("float32")


def real_layout(name):
    def change(tensors):
        shared = tensors["model.shared.weight"]
        extra = {
            "lm_head.weight": shared.copy(),
            "model.encoder.embed_tokens.weight": shared.copy(),
            "model.decoder.embed_tokens.weight": shared.copy(),
            "model.encoder.version": np.array([2.0], "float32"),
            "model.decoder.version": np.array([2.0], "float32"),
        }
        if name == "marian_tiny":
            rows, depth = 64, shared.shape[1]
            for side in ("encoder", "decoder"):
                extra[f"model.{side}.embed_positions.weight"] = marian_sinusoids(
                    rows, depth
                )
        return {**tensors, **extra}

    return change


@pytest.mark.parametrize("name", FAMILIES)
def test_real_layouts_load_with_identical_logits(tmp_path, name):
    expected = logits(kt.models.from_pretrained(os.path.join(FIXTURES, name)), name)
    path = rewrite(name, tmp_path, real_layout(name))
    np.testing.assert_array_equal(
        logits(kt.models.from_pretrained(path), name), expected
    )
    # Only a tied copy of the table, no model.shared.weight: the same.
    path = rewrite(
        name,
        tmp_path,
        lambda t: {
            k: v for k, v in real_layout(name)(t).items() if k != "model.shared.weight"
        },
    )
    np.testing.assert_array_equal(
        logits(kt.models.from_pretrained(path), name), expected
    )


@pytest.mark.parametrize("name", FAMILIES)
def test_a_missing_final_logits_bias_is_zeros(tmp_path, name):
    def zeros(t):
        return {**t, "final_logits_bias": np.zeros_like(t["final_logits_bias"])}

    expected = logits(kt.models.from_pretrained(rewrite(name, tmp_path, zeros)), name)
    path = rewrite(
        name,
        tmp_path,
        lambda t: {k: v for k, v in t.items() if k != "final_logits_bias"},
    )
    model = kt.models.from_pretrained(path)
    np.testing.assert_array_equal(logits(model, name), expected)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("key", ["lm_head.weight", "model.encoder.embed_tokens.weight"])
def test_an_untied_copy_is_refused(tmp_path, name, key):
    def untie(tensors):
        tensors = real_layout(name)(tensors)
        return {**tensors, key: tensors[key] + 1e-3}

    with pytest.raises(ValueError, match=f"'{key}' differs.*ties"):
        kt.models.from_pretrained(rewrite(name, tmp_path, untie))
