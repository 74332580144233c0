"""Hugging Face Llama, Mistral and Qwen2 checkpoints (`model_type: llama`,
`LlamaForCausalLM`; `mistral`, `MistralForCausalLM`; `qwen2`,
`Qwen2ForCausalLM`) <-> `kt.models.Llama`.

The three families are one architecture with options: Mistral adds a
sliding attention window, Qwen2 biases on the query, key and value
projections (and optionally a window on its upper layers, which we compute
only when it covers every layer). Loading is a renaming and re-shaping of
tensors:

- torch's `nn.Linear` weights are `(out, in)`; Keras kernels are `(in,
  out)`, the attention projections' too (`kt.layers.RotaryAttention` keeps
  them as matrices: query `(E, H·D)`, key and value `(E, Hkv·D)`, output
  `(H·D, E)`);
- ids: our ids are the checkpoint's plus one (id 0 is padding), as for
  GPT-2; the token table holds exactly the checkpoint's rows, looked up at
  id - 1, so no row is added or dropped.

`dtype="bfloat16"` (or `"float16"`) builds the model under that dtype
policy and keeps the stored weights in it; bfloat16 files are memory-mapped
and never upcast on the way. A config value that we do not compute exactly
is refused, naming the key and the value, before any weight is read.

transformers 5 writes rope settings in `rope_parameters` (with
`rope_theta` inside); older folders in `rope_theta` and `rope_scaling`.
Both are read, as transformers reads them (`rope_scaling` first), and
`save` writes both, so that transformers 4 and 5 read the folder alike.

Shape legend: V the checkpoint's vocabulary size, E hidden size, H query
heads, Hkv key/value heads, D head size, F feed-forward size.
"""

import dataclasses

from keras_transformer.models.llama import Llama
from keras_transformer.pretrained import checkpoint
from keras_transformer.pretrained.decoder_build import build_decoder
from keras_transformer.pretrained.family import Family
from keras_transformer.text import hf_llama

MODEL_TYPES = ("llama", "mistral", "qwen2")
ARCHITECTURES = {
    "llama": ("LlamaForCausalLM",),
    "mistral": ("MistralForCausalLM",),
    "qwen2": ("Qwen2ForCausalLM",),
}
NAMES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2"}
# transformers' defaults for keys a config.json may lack, per family.
DEFAULTS = {
    "llama": dict(max_position_embeddings=2048, sliding_window=None),
    "mistral": dict(
        max_position_embeddings=4096 * 32, num_key_value_heads=8, sliding_window=4096
    ),
    "qwen2": dict(
        max_position_embeddings=32768,
        num_key_value_heads=32,
        sliding_window=4096,
        use_sliding_window=False,
        max_window_layers=28,
    ),
}
# Config values we compute exactly: key -> the allowed values (the first
# is the default).
REQUIRED = {
    "hidden_act": ("silu",),
    "mlp_bias": (False,),
    "attention_dropout": (0.0,),
    "quantization_config": (None,),
}
DTYPES = ("float32", "bfloat16", "float16")
# The rope types we compute, and the keys each reads.
ROPE_KEYS = {
    "default": (),
    "linear": ("factor",),
    "llama3": (
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    ),
}
SAME = checkpoint.SAME
TRANSPOSE = (lambda w: w.T, lambda w: w.T)  # torch (out, in) <-> Keras (in, out)


def load(path, dtype=None):
    """Our `Llama` of a Llama, Mistral or Qwen2 folder, weights in place.

    `dtype`: None or `"float32"` (float32 weights, whatever the file
    holds), `"bfloat16"` or `"float16"` (the model built under that dtype
    policy, its weights in it)."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(
            f"`dtype` must be None or one of {list(DTYPES)}. Received: dtype={dtype!r}"
        )
    config = checkpoint.read_config(path)
    arguments = config_to_arguments(config)  # checks, before reading weights
    return build(arguments, checkpoint.read_weights(path, dtype=None), dtype)


def save(model, path, tokenizer=None):
    """Writes a `Llama` as a Llama, Mistral or Qwen2 folder (the family
    that computes what it computes), weights in their dtype."""
    if tokenizer is not None:
        raise ValueError(
            "Writing the tokenizer of a Llama, Mistral or Qwen2 folder is not "
            "supported yet: save the model alone and copy the tokenizer files "
            f"of the folder it came from. Received: tokenizer={tokenizer!r}"
        )
    config, tensors = export(model)
    return checkpoint.write_folder(path, config, tensors)


def rope_settings(config):
    """`(rope_theta, rope_scaling)` of a config, read as transformers reads
    them: `rope_scaling` (older folders) before `rope_parameters`
    (transformers 5), `rope_theta` inside them before the top-level one."""
    key = "rope_scaling" if config.get("rope_scaling") else "rope_parameters"
    received = f"Received: {key}={config.get(key)!r}"
    rope = dict(config.get(key) or {})
    kind = rope.pop("rope_type", rope.pop("type", "default"))
    if kind not in ROPE_KEYS:
        raise ValueError(
            f"This checkpoint's rope type is not supported (supported: "
            f"{list(ROPE_KEYS)}). {received}"
        )
    theta = float(rope.pop("rope_theta", config.get("rope_theta", 10000.0)))
    factor = rope.pop("partial_rotary_factor", config.get("partial_rotary_factor"))
    if factor not in (None, 1.0):
        raise ValueError(
            "This checkpoint rotates only part of each head, which is not "
            f"supported. Received: partial_rotary_factor={factor!r}"
        )
    if kind == "llama3":  # transformers' default for the pretraining length
        rope.setdefault(
            "original_max_position_embeddings", config["max_position_embeddings"]
        )
    unknown = sorted(set(rope) - set(ROPE_KEYS[kind]))
    if unknown:
        raise ValueError(
            f"This checkpoint's {kind!r} rope settings have keys we do not "
            f"compute ({unknown}). {received}"
        )
    return theta, None if kind == "default" else {"rope_type": kind, **rope}


def window(config, model_type):
    """The sliding window of every layer (None: full attention), or a
    ValueError when only some layers have one."""
    if config["sliding_window"] is None:
        return None
    return VARIANTS[model_type].window(config)


def _qwen2_window(config):
    """Qwen2's window: only with use_sliding_window, on the layers from
    max_window_layers on (or as layer_types lists them)."""
    size = config["sliding_window"]
    if not config["use_sliding_window"]:
        return None
    layers = config["num_hidden_layers"]
    kinds = config.get("layer_types") or [
        "sliding_attention" if i >= config["max_window_layers"] else "full_attention"
        for i in range(layers)
    ]
    if set(kinds) == {"full_attention"}:
        return None
    if set(kinds) == {"sliding_attention"}:
        return size
    raise ValueError(
        "This Qwen2 checkpoint slides its attention window on some layers "
        "only; kt.models.Llama applies one window to all or none. Received: "
        f"max_window_layers={config['max_window_layers']!r}, "
        f"layer_types={config.get('layer_types')!r}, num_hidden_layers={layers}"
    )


def config_to_arguments(config):
    """`Llama` constructor arguments from a Hugging Face `config.json`."""
    model_type = config.get("model_type")
    name = NAMES[model_type]
    checkpoint.check_architecture(config, name, ARCHITECTURES[model_type])
    checkpoint.check_supported(config, name, REQUIRED)
    config = {**DEFAULTS[model_type], **config}
    heads = config["num_attention_heads"]
    theta, scaling = rope_settings(config)
    bias = VARIANTS[model_type].attention_bias(config)
    return dict(
        vocabulary_size=config["vocab_size"] + 1,  # + our padding id 0
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        num_key_value_heads=config.get("num_key_value_heads") or heads,
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        max_sequence_length=config["max_position_embeddings"],
        rope_theta=theta,
        rope_scaling=scaling,
        sliding_window=window(config, model_type),
        attention_bias=bias,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        layer_norm_epsilon=config.get("rms_norm_eps", 1e-6),
    )


def model_type_of(model):
    """The `model_type` that computes what `model` computes, or a
    ValueError."""
    if model.attention_bias == "qkv":
        return "qwen2"
    if model.sliding_window is None:
        return "llama"
    if not model.attention_bias:
        return "mistral"
    raise ValueError(
        "No Hugging Face family has both a sliding window and biases on all "
        f"four attention projections. Received: model={model!r} with "
        f"sliding_window={model.sliding_window}, "
        f"attention_bias={model.attention_bias!r}"
    )


def arguments_to_config(model, dtype):
    """The Hugging Face `config.json` of a `Llama` (its weights in
    `dtype`), with the keys transformers 5 writes for the family."""
    model_type = model_type_of(model)
    if (model.rope_scaling or {}).get("rope_type") == "frequency_factors":
        raise ValueError(
            "A model with 'frequency_factors' rope scaling (llama.cpp's "
            "rope_freqs.weight) has no Hugging Face config: transformers has none. "
            f"Received: rope_scaling={model.rope_scaling!r}"
        )
    rope = {"rope_theta": model.rope_theta, "rope_type": "default"}
    if model.rope_scaling is not None:
        scaling = dict(model.rope_scaling)
        scaling.pop("type", None)
        rope.update(scaling)
    config = {
        "architectures": list(ARCHITECTURES[model_type][:1]),
        "model_type": model_type,
        "vocab_size": model.vocabulary_size - 1,
        "hidden_size": model.hidden_dim,
        "intermediate_size": model.intermediate_dim,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "head_dim": model.head_dim or model.hidden_dim // model.num_heads,
        "max_position_embeddings": model.max_sequence_length,
        "rms_norm_eps": model.layer_norm_epsilon,
        "hidden_act": "silu",
        "attention_dropout": 0.0,
        "tie_word_embeddings": bool(model.tie_word_embeddings),
        "rope_parameters": rope,
        # transformers 4 reads these two instead of rope_parameters.
        "rope_theta": model.rope_theta,
        "rope_scaling": None if model.rope_scaling is None else rope,
        "dtype": dtype,
        "initializer_range": 0.02,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": None,
        "eos_token_id": None,
    }
    VARIANTS[model_type].write_keys(model, config)
    return config


def _llama_keys(model, config):
    config.update(
        attention_bias=bool(model.attention_bias), mlp_bias=False, pretraining_tp=1
    )


def _mistral_keys(model, config):
    config["sliding_window"] = model.sliding_window


def _qwen2_keys(model, config):
    if config["head_dim"] == model.hidden_dim // model.num_heads:
        del config["head_dim"]  # Qwen2Config has none; transformers derives it
    sliding = model.sliding_window is not None
    config.update(
        sliding_window=model.sliding_window,
        use_sliding_window=sliding,
        # transformers' default when no layer slides; 0: all slide.
        max_window_layers=0 if sliding else 28,
        layer_types=[("sliding" if sliding else "full") + "_attention"]
        * model.num_layers,
    )


@dataclasses.dataclass(frozen=True)
class Variant:
    """How one `model_type` reads and writes the options that differ:
    `window(config)` (the sliding window of a config that has one),
    `attention_bias(config)` (`kt.models.Llama`'s `attention_bias`), and
    `write_keys(model, config)` (the keys its `config.json` adds)."""

    window: object
    attention_bias: object
    write_keys: object


VARIANTS = {
    "llama": Variant(
        window=lambda config: None,
        attention_bias=lambda config: bool(config.get("attention_bias", False)),
        write_keys=_llama_keys,
    ),
    "mistral": Variant(
        window=lambda config: config["sliding_window"],
        attention_bias=lambda config: False,
        write_keys=_mistral_keys,
    ),
    "qwen2": Variant(
        window=_qwen2_window,
        attention_bias=lambda config: "qkv",
        write_keys=_qwen2_keys,
    ),
}


def block_projections(block):
    """`(name, layer)` of a block's projections, in the names that the
    weight table and PEFT share."""
    attention, feedforward = block.attention, block.feedforward
    return [
        ("self_attn.q_proj", attention.query_dense),
        ("self_attn.k_proj", attention.key_dense),
        ("self_attn.v_proj", attention.value_dense),
        ("self_attn.o_proj", attention.output_dense),
        ("mlp.gate_proj", feedforward.gate),
        ("mlp.up_proj", feedforward.up),
        ("mlp.down_proj", feedforward.down),
    ]


def projection_layers(model):
    """`{Hugging Face weight name: our layer}` of every projection (the
    output head included when untied) of a `Llama` or a `Gemma3`."""
    layers = {
        f"model.layers.{i}.{name}.weight": layer
        for i, block in enumerate(model.blocks)
        for name, layer in block_projections(block)
    }
    if getattr(model, "lm_head", None) is not None:
        layers["lm_head.weight"] = model.lm_head
    return layers


def peft_modules(model):
    """`{PEFT module name: [(our layer, None)]}` of a `Llama`."""
    return {
        f"model.layers.{i}.{name}": [(layer, None)]
        for i, block in enumerate(model.blocks)
        for name, layer in block_projections(block)
    }


def weight_pairs(model):
    """`(Hugging Face name, our variable, (to ours, to theirs))` for every
    tensor of a `Llama`."""
    pairs = [("model.embed_tokens.weight", model.token_embedding.embeddings, SAME)]
    for i, block in enumerate(model.blocks):
        prefix = f"model.layers.{i}"
        norms = {
            "self_attn": (f"{prefix}.input_layernorm.weight", block.attention_norm),
            "mlp": (
                f"{prefix}.post_attention_layernorm.weight",
                block.feedforward_norm,
            ),
        }
        for name, layer in block_projections(block):
            norm = norms.pop(name.split(".")[0], None)  # each norm before its part
            if norm is not None:
                pairs.append((norm[0], norm[1].scale, SAME))
            pairs.append((f"{prefix}.{name}.weight", layer.kernel, TRANSPOSE))
            if layer.bias is not None:
                pairs.append((f"{prefix}.{name}.bias", layer.bias, SAME))
    pairs.append(("model.norm.weight", model.final_norm.scale, SAME))
    if not model.tie_word_embeddings:
        pairs.append(("lm_head.weight", model.lm_head.kernel, TRANSPOSE))
    return pairs


def build(arguments, weights, dtype=None, prepare=None, constructing=None):
    """Our `Llama` of checked constructor `arguments` and a checkpoint's
    tensors, built under `dtype` (None: float32). `prepare(model)` returns
    the tensors it set before the rest are (a GGUF file's int8 blocks);
    `constructing` is entered while the model is built (`int8_at_build`)."""
    return build_decoder(
        Llama, weight_pairs, arguments, weights, dtype, prepare, constructing
    )


def export(model):
    """`(config, tensors)` of a `Llama` in Hugging Face's names and
    layouts, the tensors in the model's weights' dtype."""
    dtype = model.token_embedding.embeddings.dtype
    return arguments_to_config(model, dtype), checkpoint.tensors(weight_pairs(model))


FAMILY = Family(
    name="Llama",
    model_types=MODEL_TYPES,
    classes=(Llama,),
    architectures={
        names[0]: (Llama, "TextGenerator") for names in ARCHITECTURES.values()
    },
    load=load,
    save=save,
    default_architectures={t: names[0] for t, names in ARCHITECTURES.items()},
    dtypes=DTYPES,
    tokenizers={model_type: hf_llama.from_folder for model_type in MODEL_TYPES},
    peft_modules=peft_modules,
)
