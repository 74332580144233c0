"""PEFT adapters checked by PEFT's documented rule, without torch.

A LoRA adapter folder changes each target module's weight by
`W += (alpha / r) * B @ A` (`lora_B` `(out, r)`, `lora_A` `(r, in)`), with
`r` and `alpha` of the module's entry of `rank_pattern` / `alpha_pattern`
(a key matches a module name ending with it, PEFT's `get_pattern_key`)
or else the config's `r` / `lora_alpha`; with `fan_in_fan_out` (GPT-2's
Conv1D, whose weight is `(in, out)`) the update is transposed. `merge` does
that in numpy on the base folder's `model.safetensors`.

- Our writer (`save_lora(format="peft")`): the base merged with what it
  wrote gives the LoRA model's logits.
- peft's own adapters with `rank_pattern` and `alpha_pattern`
  (`tests/fixtures/make_peft_pattern_fixtures.py`): we load them and give
  peft's logits, and so does the rule (which checks the rule itself).
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import keras_transformer as kt
from tests.helpers import to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
PREFIX = "base_model.model."


def pattern_value(patterns, module, default):
    """PEFT's `get_pattern_key`: the first key `module` ends with (as a
    dotted suffix, the key a regular expression)."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def merge(base, adapter, out):
    """`out`: a copy of the folder `base` whose `model.safetensors` has the
    adapter folder's updates merged by PEFT's rule. Returns the updated
    weight names."""
    shutil.copytree(base, out)
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        config = json.load(f)
    assert config["peft_type"] == "LORA" and not config.get("use_rslora")
    path = os.path.join(out, "model.safetensors")
    with safe_open(path, framework="numpy") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}
    file = os.path.join(adapter, "adapter_model.safetensors")
    with safe_open(file, framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    updated = []
    for key in sorted(tensors):
        if not key.endswith(".lora_A.weight"):
            continue
        module = key.removeprefix(PREFIX).removesuffix(".lora_A.weight")
        a = tensors[key]  # (r, in)
        b = tensors[key.replace(".lora_A.", ".lora_B.")]  # (out, r)
        rank = pattern_value(config["rank_pattern"], module, config["r"])
        alpha = pattern_value(config["alpha_pattern"], module, config["lora_alpha"])
        assert a.shape[0] == b.shape[1] == rank, (module, a.shape, rank)
        update = alpha / rank * (b.astype("float64") @ a)  # (out, in)
        if config["fan_in_fan_out"]:
            update = update.T
        name = module + ".weight"
        weights[name] = (weights[name] + update).astype(weights[name].dtype)
        updated.append(name)
    save_file(weights, path, metadata={"format": "pt"})
    return updated


def logits(model, ids):
    return to_numpy(model(ids + 1))[..., 1:]  # our ids: theirs + 1


# Per family: LoRA targets, whose writing uses rank_pattern (GPT-2: query
# and value written as one c_attn update of rank 2r) and alpha_pattern.
WRITTEN = {
    "gpt2_tiny": ("query", "value", "attention_output", "feedforward_output_dense"),
    "llama_tiny": ("query", "value", "attention_output", "gate", "down"),
}


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_our_written_adapter_merged_by_the_rule_gives_our_logits(name, tmp_path):
    model = kt.models.from_pretrained(os.path.join(HF, name))
    ids = np.array([[4, 9, 40, 3, 7, 1], [11, 0, 5, 8, 2, 30]])
    base = logits(model, ids)
    model.enable_lora(2, targets=WRITTEN[name], alpha=3)
    rng = np.random.default_rng(2)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype("float32") * 0.3)
    expected = logits(model, ids)
    assert np.abs(expected - base).max() > 0.1  # the update counts
    folder = model.save_lora(tmp_path / "adapter", format="peft")
    merged = tmp_path / "merged"
    updated = merge(os.path.join(HF, name), folder, merged)
    assert len(updated) == 2 * (3 if name == "gpt2_tiny" else len(WRITTEN[name]))
    got = logits(kt.models.from_pretrained(str(merged)), ids)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", ["gpt2_tiny", "llama_tiny"])
def test_a_peft_adapter_with_rank_and_alpha_patterns_gives_peft_logits(name, tmp_path):
    adapter = os.path.join(HF, f"{name}_lora_patterns")
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        config = json.load(f)
    assert config["rank_pattern"] and config["alpha_pattern"]
    reference = np.load(os.path.join(HF, f"{name}_lora_patterns_logits.npz"))
    ids = reference["input_ids"]
    model = kt.models.from_pretrained(os.path.join(HF, name))
    assert np.abs(logits(model, ids) - reference["logits"]).max() > 0.05
    model.load_lora(adapter)
    np.testing.assert_allclose(logits(model, ids), reference["logits"], atol=1e-4)
    merge(os.path.join(HF, name), adapter, tmp_path / "merged")
    merged = kt.models.from_pretrained(str(tmp_path / "merged"))
    np.testing.assert_allclose(logits(merged, ids), reference["logits"], atol=1e-4)
