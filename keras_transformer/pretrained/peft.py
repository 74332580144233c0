"""Hugging Face PEFT LoRA adapters (`adapter_config.json` +
`adapter_model.safetensors`) <-> our LoRA (`kt.models`' `enable_lora`), for
the families whose `Family` record names their PEFT modules (GPT-2, Llama,
Mistral, Qwen2, Gemma 3, T5, Whisper).

A PEFT module `m` with matrices `lora_A` `(r, in)` and `lora_B` `(out, r)`
adds `s * lora_B @ lora_A` to the `(out, in)` weight (`s = alpha / r`, or
`alpha / sqrt(r)` with rsLoRA); ours adds `alpha / r * A @ B` to the
`(in, out)` kernel: `A = lora_A.T`, `B = lora_B.T`. GPT-2's `c_attn` holds
query, key and value side by side: its `lora_A` is each one's `A`, its
`lora_B` split in three their `B`s. Our LoRA has one rank and one alpha;
modules of other ranks (`rank_pattern`) are padded with zeros to the
largest, and each module's scale is folded into its `B`, so the sums are
the same.

Writing, our query, key and value updates become one `c_attn` update of
rank `n * r` (`n` of them adapted): `lora_A` stacks their `A`s, `lora_B`
is block-diagonal; exact, with `rank_pattern` / `alpha_pattern` for
`c_attn` when other modules are adapted too. A target is a module's name
below its block index (`attn.c_proj`, `SelfAttention.q`, `fc1`), and the
`task_type` the family's (T5: `SEQ_2_SEQ_LM`; Whisper: none, as peft's
causal and seq2seq wrappers pass `input_ids`, which Whisper does not take).
"""

import json
import math
import os
import re

import numpy as np

from keras_transformer import _validation as validation
from keras_transformer.models.lora import PEFT_FORMAT
from keras_transformer.pretrained import registry

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
# Settings we do not reproduce: refused unless they hold these values.
DEFAULTS = {
    "peft_type": "LORA",
    "bias": "none",
    "use_dora": False,
    "modules_to_save": None,
    "layers_to_transform": None,
    "layers_pattern": None,
    "lora_bias": False,
    "target_parameters": None,
    "trainable_token_indices": None,
    "layer_replication": None,
}


def modules(model):
    """`{PEFT module name: [(our layer, slice of lora_B's rows or None)]}`
    of `model`, from its family's record (`pretrained/registry.py`)."""
    return registry.peft_family(model).peft_modules(model)


def _pattern_value(patterns, module, default):
    """PEFT's `rank_pattern` / `alpha_pattern` lookup: the first pattern
    matching the end of the module's name."""
    for pattern, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


def _target(module):
    """PEFT's target of a module: its name below the block index
    ("transformer.h.0.attn.c_proj" -> "attn.c_proj", Whisper's
    "model.encoder.layers.0.fc1" -> "fc1")."""
    parts = module.split(".")
    index = max(i for i, part in enumerate(parts) if part.isdigit())
    return ".".join(parts[index + 1 :])


def load(model, path):
    """Enables LoRA on `model` and sets it to the PEFT adapter in `path`."""
    from safetensors.numpy import load_file

    config = validation.read_json(os.path.join(path, CONFIG))
    for key, value in DEFAULTS.items():
        if config.get(key, value) not in (value, [], {}):
            raise ValueError(
                f"The adapter's `{key}` is not supported. Received: "
                f"{key}={config[key]!r} in {os.path.join(path, CONFIG)}"
            )
    weights_path = os.path.join(path, WEIGHTS)
    if not os.path.isfile(weights_path):
        raise FileNotFoundError(
            f"The adapter folder has no {WEIGHTS} (.bin adapters are pickles and "
            f"are not read). Received: path={path!r}"
        )
    tensors = load_file(weights_path)
    table = modules(model)
    found = {}
    for key, value in tensors.items():
        match = re.fullmatch(
            re.escape(PREFIX) + r"(.+)\.lora_([AB])(?:\.default)?\.weight", key
        )
        if match is None or match.group(1) not in table:
            raise ValueError(
                f"The adapter's tensor {key!r} is not a LoRA matrix of a "
                f"{type(model).__name__} projection. Received: path={path!r}"
            )
        found.setdefault(match.group(1), {})[match.group(2)] = value
    rank = max(
        int(_pattern_value(config.get("rank_pattern"), m, config["r"])) for m in found
    )
    updates = {}  # our layer -> (A (in, R), B (R, out)) at scale 1
    for module, pair in found.items():
        a, b = pair.get("A"), pair.get("B")
        if a is None or b is None:
            raise ValueError(
                f"The adapter lacks lora_A or lora_B of {module!r}. "
                f"Received: lora_{''.join(sorted(pair))} alone in path={path!r}"
            )
        r = int(_pattern_value(config.get("rank_pattern"), module, config["r"]))
        alpha = float(
            _pattern_value(config.get("alpha_pattern"), module, config["lora_alpha"])
        )
        scale = alpha / (math.sqrt(r) if config.get("use_rslora") else r)
        a = np.pad(a.T, [(0, 0), (0, rank - r)])  # (in, R)
        b = np.pad(scale * b.T, [(0, rank - r), (0, 0)])  # (R, out)
        for layer, rows in table[module]:
            updates[id(layer)] = (layer, a, b if rows is None else b[:, rows])
    targets = sorted({layer.name for layer, _, _ in updates.values()})
    layers = [layer for layer, _, _ in updates.values()]
    missing = [
        layer.path for layer in model.projection_layers()
        if layer.name in targets and layer not in layers
    ]  # fmt: skip
    if missing:
        raise ValueError(
            f"The adapter adapts {targets} in some layers but not in "
            f"{missing[:3]}; ours adapts a name everywhere. Received: path={path!r}"
        )
    if model.lora_rank is None:
        model.enable_lora(rank, targets=targets, alpha=rank)
    enabled = list(model.lora_layers().values())
    if sorted(map(id, enabled)) != sorted(updates) or any(
        tuple(layer.lora_kernel_a.shape) != a.shape
        or tuple(layer.lora_kernel_b.shape) != b.shape
        for layer, a, b in updates.values()
    ):
        raise ValueError(
            f"The adapter does not fit this model's LoRA layers (rank "
            f"{model.lora_rank}). Received: path={path!r}"
        )
    for layer, a, b in updates.values():
        layer.lora_kernel_a.assign(a)
        layer.lora_kernel_b.assign(b * layer.lora_rank / layer.lora_alpha)


def save(model, path):
    """Writes `model`'s LoRA as a PEFT adapter folder `path`."""
    from safetensors.numpy import save_file

    family = registry.peft_family(model)
    table = family.peft_modules(model)
    covered = {id(layer) for parts in table.values() for layer, _ in parts}
    unnamed = [p for p, la in model.lora_layers().items() if id(la) not in covered]
    if unnamed:
        raise ValueError(
            f"A PEFT adapter of a {type(model).__name__} has no module for "
            f"{unnamed[:3]}; written, their updates would be lost. Received: "
            f"LoRA on {sorted({p.rpartition('/')[2] for p in unnamed})}"
        )
    rank, alpha = model.lora_rank, model.lora_alpha
    tensors, targets, ranks = {}, [], {}
    for module, parts in table.items():
        adapted = [(layer, rows) for layer, rows in parts if layer.lora_enabled]
        if not adapted:
            continue
        target = _target(module)
        if target not in targets:
            targets.append(target)
        if parts[0][1] is None:
            layer = parts[0][0]
            a = np.asarray(layer.lora_kernel_a).T  # (r, in)
            b = np.asarray(layer.lora_kernel_b).T  # (out, r)
        else:  # GPT-2's c_attn: the adapted parts, block-diagonal
            width = parts[0][1].stop - parts[0][1].start
            a = np.concatenate([np.asarray(la.lora_kernel_a).T for la, _ in adapted])
            b = np.zeros((3 * width, rank * len(adapted)), "float32")
            for j, (layer, rows) in enumerate(adapted):
                b[rows, j * rank : (j + 1) * rank] = np.asarray(layer.lora_kernel_b).T
            ranks[target] = rank * len(adapted)
        tensors[f"{PREFIX}{module}.lora_A.weight"] = np.ascontiguousarray(a)
        tensors[f"{PREFIX}{module}.lora_B.weight"] = np.ascontiguousarray(b)
    config = {
        "peft_type": "LORA",
        "task_type": family.peft_task_type,
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": targets,
        "rank_pattern": {},
        "alpha_pattern": {},
        "fan_in_fan_out": family.peft_fan_in_fan_out,
        "bias": "none",
        "lora_dropout": 0.0,
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "base_model_name_or_path": None,
    }
    for target, wide in ranks.items():
        if len(targets) == 1:  # c_attn alone: one rank for all
            config["r"], config["lora_alpha"] = wide, alpha * wide / rank
        elif wide != rank:
            config["rank_pattern"][target] = wide
            config["alpha_pattern"][target] = alpha * wide / rank
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, WEIGHTS), metadata={"format": "pt"})
    with open(os.path.join(path, CONFIG), "w", encoding="utf-8") as file:
        json.dump(config, file, indent=2)
    return os.path.abspath(path)


PEFT_FORMAT.update(load=load, save=save, modules=modules)
