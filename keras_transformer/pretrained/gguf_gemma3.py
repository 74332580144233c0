"""`gemma3` GGUF files (llama.cpp's Gemma 3 text models) -> `kt.models.Gemma3`,
as transformers loads them (`AutoModelForCausalLM.from_pretrained(folder,
gguf_file=name)`); `pretrained/gguf.py` reads the file and its tokens and
hands the metadata and tensors here.

- metadata: the keys transformers maps (context and feed-forward lengths,
  sizes, heads, `attention.key_length` as the head size, the RMS epsilon,
  the sliding window, `rope.freq_base` as the global rotary base); the file
  holds no layer pattern, local rotary base or `query_pre_attn_scalar`, so
  transformers' defaults apply (every sixth layer global, base 10000,
  scalar 256), as they do here. Another key (rope scaling, which
  transformers would ignore) is refused by name;
- tensors: llama.cpp stores every Gemma RMS scale as `1 + scale`
  (`convert_hf_to_gguf.py`); one is subtracted, as transformers does, in
  the model's dtype. `ffn_norm` is the pre-feed-forward norm and
  `post_ffw_norm` the post-feed-forward one. Every tensor type that
  `gguf.py` reads is dequantized into the model's dtype (Q8_0 and Q4_0
  too: Gemma's layers are not given int8 blocks).
"""

from keras_transformer.layers.quantization import int8_at_build
from keras_transformer.pretrained import gemma3, llama
from keras_transformer.pretrained.gguf_tensors import (
    FileTensors,
    built_int8,
    set_int8,
)

# `gemma3.{key}` -> the config.json key, as transformers maps them.
CONFIG_KEYS = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "attention.key_length": "head_dim",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.sliding_window": "sliding_window",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
}
IGNORED_KEYS = ("rope.dimension_count",)  # transformers reads it as nothing
# llama.cpp's tensor names -> Hugging Face's (`blk.N.` -> `model.layers.N.`).
TOP_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "post_ffw_norm": "post_feedforward_layernorm",
}


def config_of(metadata, path):
    """The `config.json` keys of a `gemma3` file's metadata (the tokens'
    are added by `gguf.py`), or a ValueError naming a key we refuse."""
    config = {"architectures": [gemma3.ARCHITECTURE], "model_type": gemma3.MODEL_TYPE}
    for key, value in metadata.items():
        if not key.startswith("gemma3."):
            continue
        name = key[len("gemma3.") :]
        if name in CONFIG_KEYS:
            config[CONFIG_KEYS[name]] = value
        elif name == "attention.value_length":
            continue  # checked below
        elif name not in IGNORED_KEYS:
            raise ValueError(
                f"This GGUF file's metadata key {key!r} is not one we compute "
                f"(known: {sorted('gemma3.' + k for k in CONFIG_KEYS)}). "
                f"Received: {key}={value!r:.100} in {path!r}"
            )
    size = config.get("head_dim", gemma3.DEFAULTS["head_dim"])
    if metadata.get("gemma3.attention.value_length", size) != size:
        raise ValueError(
            f"This GGUF file's value heads differ from its key heads ({size}). "
            f"Received: gemma3.attention.value_length="
            f"{metadata['gemma3.attention.value_length']!r} in {path!r}"
        )
    return config


def load(reader, config, dtype, path):
    """Our `Gemma3` of a `gemma3` file (`reader`, its `config` from
    `config_of`), built under `dtype` (None: float32)."""
    arguments = gemma3.config_to_arguments(config)  # checks, before tensors
    names = {t.name: hf_name(t.name, path) for t in reader.tensors}
    # llama.cpp's `1 + scale` of every norm, back to Gemma's `scale`.
    offsets = {n: _minus_one for n in names.values() if n.endswith("norm.weight")}
    tensors = FileTensors(reader, names, offsets, dtype)
    try:
        return gemma3.build(
            arguments,
            tensors,
            dtype,
            prepare=lambda m: set_int8(m, tensors, llama.projection_layers),
            constructing=int8_at_build(built_int8(tensors)),
        )
    finally:
        tensors.close()


def _minus_one(w):
    return w - w.dtype.type(1)


def hf_name(name, path):
    """The Hugging Face name of a `gemma3` tensor name, or a ValueError."""
    if name in TOP_TENSORS:
        return TOP_TENSORS[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit():
        if parts[2] in BLOCK_TENSORS and parts[3] == "weight":
            return f"model.layers.{parts[1]}.{BLOCK_TENSORS[parts[2]]}.weight"
    raise ValueError(
        f"This GGUF file has a tensor we do not compute: {name!r}. Received in {path!r}"
    )
