"""Hugging Face Gemma 3 text checkpoints (`model_type: gemma3_text`,
`Gemma3ForCausalLM`) <-> `kt.models.Gemma3`.

Loading renames and transposes tensors, as for Llama (torch's `(out, in)`
weights are Keras' `(in, out)` kernels; our ids are the checkpoint's plus
one, the token table holding exactly the checkpoint's rows). Gemma's RMS
scales are zero-centred in the file and in our layers
(`kt.layers.GemmaRMSNormalization` multiplies by `1 + scale`), so they load
as they are. The head is the token embedding: a file whose `lm_head.weight`
differs from it is refused.

The rotary settings are read as transformers 5 reads them: per layer kind
in `rope_parameters` (`full_attention`, `sliding_attention`), or, in older
folders, `rope_theta` and `rope_scaling` (global layers) and
`rope_local_base_freq` (local layers). The layer kinds are `layer_types`,
else every `sliding_window_pattern`-th layer (default 6) is global.
`save` writes both forms. Values we do not compute (logit soft-capping,
bidirectional attention, another activation, a rope type other than
`"default"` and global `"linear"`) are refused by name before a weight is
read.

Shape legend: V the checkpoint's vocabulary size, E hidden size.
"""

from keras_transformer.models.gemma3 import (
    GLOBAL,
    LOCAL,
    Gemma3,
    default_layer_types,
)
from keras_transformer.pretrained import checkpoint, llama
from keras_transformer.pretrained.decoder_build import build_decoder
from keras_transformer.pretrained.family import Family
from keras_transformer.text import hf_llama

MODEL_TYPE, ARCHITECTURE = "gemma3_text", "Gemma3ForCausalLM"
# transformers' `Gemma3TextConfig` defaults of keys a config.json may lack.
DEFAULTS = dict(
    vocab_size=262_208,
    max_position_embeddings=131_072,
    num_key_value_heads=4,
    head_dim=256,
    sliding_window=4096,
    query_pre_attn_scalar=256,
    rms_norm_eps=1e-6,
)
# Config values we compute exactly: key -> the allowed values (the first
# is the default).
REQUIRED = {
    "hidden_activation": ("gelu_pytorch_tanh",),
    "attention_bias": (False,),
    "attention_dropout": (0.0, 0),
    "final_logit_softcapping": (None,),
    "attn_logit_softcapping": (None,),
    "use_bidirectional_attention": (False, None),
    "tie_word_embeddings": (True,),
    "quantization_config": (None,),
}
# Rope types per layer kind, and the keys each reads besides its base.
ROPE_KEYS = {GLOBAL: {"default": (), "linear": ("factor",)}, LOCAL: {"default": ()}}
THETA = {GLOBAL: 1_000_000.0, LOCAL: 10_000.0}  # transformers' defaults
SAME, TRANSPOSE = checkpoint.SAME, llama.TRANSPOSE


def load(path, dtype=None):
    """Our `Gemma3` of a Gemma 3 text folder, weights in place; `dtype`
    None or `"float32"`, `"bfloat16"` or `"float16"` (as `llama.load`)."""
    if dtype is not None and dtype not in llama.DTYPES:
        raise ValueError(
            f"`dtype` must be None or one of {list(llama.DTYPES)}. "
            f"Received: dtype={dtype!r}"
        )
    arguments = config_to_arguments(checkpoint.read_config(path))  # checks first
    return build(arguments, checkpoint.read_weights(path, dtype=None), dtype)


def save(model, path, tokenizer=None):
    """Writes a `Gemma3` as a Gemma 3 text folder, weights in their dtype."""
    if tokenizer is not None:
        raise ValueError(
            "Writing the tokenizer of a Gemma 3 folder is not supported yet: "
            "save the model alone and copy the tokenizer files of the folder "
            f"it came from. Received: tokenizer={tokenizer!r}"
        )
    config, tensors = export(model)
    return checkpoint.write_folder(path, config, tensors)


def rope_settings(config):
    """`{layer kind: (rope_theta, rope_scaling or None)}` of a config, as
    transformers 5 reads it (see the module), or a ValueError."""
    parameters = config.get("rope_parameters") or {}
    if not set(parameters) <= {GLOBAL, LOCAL} or not parameters:
        # An older config: flat keys, `rope_scaling` for the global layers.
        scaling = config.get("rope_scaling") or parameters
        parameters = {
            GLOBAL: {"rope_theta": config.get("rope_theta", THETA[GLOBAL]), **scaling},
            LOCAL: {"rope_theta": config.get("rope_local_base_freq", THETA[LOCAL])},
        }
    settings = {}
    for kind in (GLOBAL, LOCAL):
        rope = dict(parameters.get(kind) or {})
        received = f"Received: rope_parameters[{kind!r}]={parameters.get(kind)!r}"
        rope_type = rope.pop("rope_type", rope.pop("type", "default"))
        if rope_type not in ROPE_KEYS[kind]:
            raise ValueError(
                f"This checkpoint's rope type on its {kind} layers is not "
                f"supported (supported: {list(ROPE_KEYS[kind])}). {received}"
            )
        theta = float(rope.pop("rope_theta", THETA[kind]))
        unknown = sorted(set(rope) - set(ROPE_KEYS[kind][rope_type]))
        if unknown:
            raise ValueError(
                f"This checkpoint's {rope_type!r} rope settings have keys we do "
                f"not compute ({unknown}). {received}"
            )
        scaling = {"rope_type": rope_type, **rope} if rope_type != "default" else None
        settings[kind] = theta, scaling
    return settings


def config_to_arguments(config):
    """`Gemma3` constructor arguments from a Hugging Face `config.json`."""
    checkpoint.check_architecture(config, "Gemma 3", (ARCHITECTURE,))
    checkpoint.check_supported(config, "Gemma 3", REQUIRED)
    config = {**DEFAULTS, **config}
    layers = config["num_hidden_layers"]
    layer_types = config.get("layer_types") or default_layer_types(
        layers, config.get("sliding_window_pattern", 6)
    )
    rope = rope_settings(config)
    return dict(
        vocabulary_size=config["vocab_size"] + 1,  # + our padding id 0
        num_layers=layers,
        num_heads=config["num_attention_heads"],
        num_key_value_heads=config["num_key_value_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        head_dim=config["head_dim"],
        max_sequence_length=config["max_position_embeddings"],
        rope_theta=rope[GLOBAL][0],
        local_rope_theta=rope[LOCAL][0],
        rope_scaling=rope[GLOBAL][1],
        sliding_window=config["sliding_window"],
        layer_types=list(layer_types),
        query_pre_attn_scalar=config["query_pre_attn_scalar"],
        layer_norm_epsilon=config["rms_norm_eps"],
    )


def arguments_to_config(model, dtype):
    """The Hugging Face `config.json` of a `Gemma3` (weights in `dtype`),
    with the keys transformers 5 writes and the older rope keys."""
    full = {"rope_type": "default", "rope_theta": model.rope_theta}
    full.update(model.rope_scaling or {})
    local = {"rope_type": "default", "rope_theta": model.local_rope_theta}
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": model.vocabulary_size - 1,
        "hidden_size": model.hidden_dim,
        "intermediate_size": model.intermediate_dim,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "num_key_value_heads": model.num_key_value_heads or model.num_heads,
        "head_dim": model.head_dim,
        "max_position_embeddings": model.max_sequence_length,
        "sliding_window": model.sliding_window,
        "layer_types": list(model.layer_types or default_layer_types(model.num_layers)),
        "query_pre_attn_scalar": model.query_pre_attn_scalar,
        "rms_norm_eps": model.layer_norm_epsilon,
        "hidden_activation": "gelu_pytorch_tanh",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "tie_word_embeddings": True,
        "rope_parameters": {GLOBAL: full, LOCAL: local},
        # transformers 4 reads these instead of rope_parameters.
        "rope_theta": model.rope_theta,
        "rope_local_base_freq": model.local_rope_theta,
        "rope_scaling": model.rope_scaling,
        "dtype": dtype,
        "initializer_range": 0.02,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": None,
        "eos_token_id": None,
    }


def block_projections(block):
    """`(name, layer)` of a block's projections, in the names that the
    weight table and PEFT share."""
    return llama.block_projections(block)


def peft_modules(model):
    """`{PEFT module name: [(our layer, None)]}` of a `Gemma3`."""
    return {
        f"model.layers.{i}.{name}": [(layer, None)]
        for i, block in enumerate(model.blocks)
        for name, layer in block_projections(block)
    }


def weight_pairs(model):
    """`(Hugging Face name, our variable, (to ours, to theirs))` for every
    tensor of a `Gemma3`."""
    pairs = [("model.embed_tokens.weight", model.token_embedding.embeddings, SAME)]
    for i, block in enumerate(model.blocks):
        prefix = f"model.layers.{i}"
        attention = block.attention
        norms = [
            ("input_layernorm", block.attention_norm),
            ("self_attn.q_norm", attention.query_norm),
            ("self_attn.k_norm", attention.key_norm),
            ("post_attention_layernorm", block.post_attention_norm),
            ("pre_feedforward_layernorm", block.feedforward_norm),
            ("post_feedforward_layernorm", block.post_feedforward_norm),
        ]
        pairs += [(f"{prefix}.{n}.weight", norm.scale, SAME) for n, norm in norms]
        pairs += [
            (f"{prefix}.{name}.weight", layer.kernel, TRANSPOSE)
            for name, layer in block_projections(block)
        ]
    pairs.append(("model.norm.weight", model.final_norm.scale, SAME))
    return pairs


def build(arguments, weights, dtype=None, prepare=None, constructing=None):
    """Our `Gemma3` of checked constructor `arguments` and a checkpoint's
    tensors (a mapping of Hugging Face names), built under `dtype` (None:
    float32). `prepare` and `constructing`: as `kt.pretrained.llama.build`'s
    (a GGUF file's int8 blocks)."""
    return build_decoder(
        Gemma3, weight_pairs, arguments, weights, dtype, prepare, constructing
    )


def export(model):
    """`(config, tensors)` of a `Gemma3` in Hugging Face's names and
    layouts, the tensors in the model's weights' dtype."""
    dtype = model.token_embedding.embeddings.dtype
    return arguments_to_config(model, dtype), checkpoint.tensors(weight_pairs(model))


FAMILY = Family(
    name="Gemma 3",
    model_types=(MODEL_TYPE,),
    classes=(Gemma3,),
    architectures={ARCHITECTURE: (Gemma3, "TextGenerator")},
    load=load,
    save=save,
    default_architectures={MODEL_TYPE: ARCHITECTURE},
    dtypes=llama.DTYPES,
    tokenizers={MODEL_TYPE: hf_llama.from_folder},
    peft_modules=peft_modules,
)
