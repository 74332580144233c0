"""GGUF files (llama.cpp's single-file checkpoints: what llama.cpp, Ollama
and LM Studio download) -> `kt.models.Llama` or `kt.models.GPT2`, as
transformers loads them (`AutoModelForCausalLM.from_pretrained(folder,
gguf_file=name)`).

A GGUF file holds the config as metadata under llama.cpp's names and the
tensors under its own. Loading builds the Hugging Face `config.json` of the
metadata and the Hugging Face tensors of the file, then goes through
`kt.pretrained.llama`'s `config_to_arguments` and `build`, as a folder does:

- architectures (`general.architecture`): `llama` (a file named exactly
  "mistral" is Mistral, as transformers reads it) and `qwen2`; another
  architecture, an unknown metadata key of the architecture, or a tensor
  we do not compute is refused by name before any tensor is read;
- llama.cpp permutes the query and key rows of `llama` files for its
  rotary code (`convert_hf_to_gguf.py`); the permutation is reversed, as
  transformers reverses it (Qwen2 files are not permuted);
- tensor types: F32, F16 and BF16 exactly; Q8_0 and Q4_0 projections are
  kept as they are, losslessly, as our int8 with a scale per block of 32
  input rows (their weights are integers times a scale per 32 weights
  along the input), so memory stays small and the outputs are the
  dequantized file's; the token embedding table, which our int8 layout
  holds with one scale per row, is dequantized instead, as are Q4_1,
  Q5_0, Q5_1, Q2_K..Q6_K tensors (`gguf.quants.dequantize`), into the
  model's dtype. Another type is refused by name.

`gpt2` files give a `kt.models.GPT2` through `kt.pretrained.gpt2`'s
`config_to_arguments` and `build`, in float32:

- metadata as transformers maps it, except that transformers names the
  context and feed-forward lengths `n_ctx` and `feed_forward_length`,
  which its GPT-2 does not read (it keeps 1024 positions and 4 x hidden
  size, and fails on a file of other sizes); we read them as
  `n_positions` and `n_inner`, the sizes of the file's tensors;
- llama.cpp stores `attn_qkv`, `attn_output`, `ffn_up` and `ffn_down` as
  `(out, in)`; they are transposed back to GPT-2's `Conv1D` `(in, out)`,
  as transformers does;
- llama.cpp writes the tied head as its own `output.weight`: transformers
  then unties it, we keep it tied where it equals the token embedding and
  untie it where it does not (a head quantized to another type);
- every tensor type above is dequantized, Q8_0 and Q4_0 too (GPT-2's
  layers hold no int8 blocks of 32).

Shape legend: O a projection's outputs, I its inputs, B its blocks of 32
inputs (I / 32).
"""

import numpy as np

from keras_transformer import _gguf
from keras_transformer.layers.quantization import int8_at_build
from keras_transformer.pretrained import gguf_gemma3, gpt2, llama
from keras_transformer.pretrained.gguf_tensors import (
    INT8,
    FileTensors,
    built_int8,
    dequantized,
    set_int8,
)

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "gemma3": "Gemma3ForCausalLM",
}
# The model types whose query and key rows llama.cpp permutes (Qwen2's it
# writes as they are).
PERMUTED = ("llama", "mistral")
# `{architecture}.{key}` of the metadata -> the config.json key, as
# transformers maps them (None: read by nobody, as in transformers).
CONFIG_KEYS = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "rope.dimension_count": "head_dim",
    "rope.freq_base": "rope_theta",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "vocab_size": "vocab_size",
}
# transformers reads no head size of Qwen2 files: hidden size / heads.
IGNORED_KEYS = {"qwen2": ("rope.dimension_count",)}
# Keys transformers does not read; they must state the head size it
# computes (`head_dim`, else hidden size / heads).
HEAD_SIZE_KEYS = ("attention.key_length", "attention.value_length")
# Keys llama.cpp may write that must hold these values for us to compute
# the file exactly (no rope scaling, no experts).
NEUTRAL_KEYS = {
    "rope.scaling.type": ("none",),
    "expert_count": (0,),
    "expert_used_count": (0,),
}
# llama.cpp's tensor names -> Hugging Face's (`blk.N.` -> `model.layers.N.`).
TOP_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
# GPT-2 files: metadata, tensor names (`blk.N.` -> `h.N.`) and the
# weights llama.cpp transposes.
GPT2_CONFIG_KEYS = {
    "context_length": "n_positions",
    "block_count": "n_layer",
    "feed_forward_length": "n_inner",
    "embedding_length": "n_embd",
    "attention.head_count": "n_head",
    "attention.layer_norm_epsilon": "layer_norm_epsilon",
}
GPT2_TOP_TENSORS = {
    "token_embd.weight": "wte.weight",
    "position_embd.weight": "wpe.weight",
    "output_norm.weight": "ln_f.weight",
    "output_norm.bias": "ln_f.bias",
    "output.weight": "lm_head.weight",
}
GPT2_BLOCK_TENSORS = {
    f"{theirs}.{kind}": f"{ours}.{kind}"
    for theirs, ours in [
        ("attn_norm", "ln_1"),
        ("attn_qkv", "attn.c_attn"),
        ("attn_output", "attn.c_proj"),
        ("ffn_norm", "ln_2"),
        ("ffn_up", "mlp.c_fc"),
        ("ffn_down", "mlp.c_proj"),
    ]
    for kind in ("weight", "bias")
}
GPT2_TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight")
GPT2_TRANSPOSED += ("mlp.c_proj.weight",)
EXACT = ("F32", "F16", "BF16")
DEQUANTIZED = ("Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


def read_config(path):
    """The Hugging Face `config.json` dict of the GGUF file at `path`,
    from its metadata alone (see `config_of`)."""
    reader = _gguf.open_file(path)
    return config_of(_gguf.metadata(reader), [t.name for t in reader.tensors], path)


def config_of(metadata, tensor_names, path):
    """The Hugging Face `config.json` of a GGUF file's `metadata` (as
    transformers builds it), with the file's special token ids; a
    ValueError naming what we do not compute."""
    architecture = metadata.get("general.architecture")
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"This GGUF file's architecture is not supported (supported: "
            f"{sorted(ARCHITECTURES)}). Received: general.architecture="
            f"{architecture!r} in {path!r}"
        )
    if architecture in OWN_READERS:
        return OWN_READERS[architecture][0](metadata, tensor_names, path)
    model_type = architecture
    # transformers: llama.cpp writes Mistral as `llama`; a file whose name
    # is "mistral" is read as Mistral (its sliding window by default).
    if architecture == "llama" and metadata.get("general.name") == "mistral":
        model_type = "mistral"
    config = {"architectures": [ARCHITECTURES[model_type]], "model_type": model_type}
    prefix = architecture + "."
    for key, value in metadata.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix) :]
        if name in IGNORED_KEYS.get(architecture, ()):
            continue
        if name in CONFIG_KEYS:
            config[CONFIG_KEYS[name]] = value
        elif name in HEAD_SIZE_KEYS:
            continue
        elif name not in NEUTRAL_KEYS or value not in NEUTRAL_KEYS[name]:
            raise ValueError(
                f"This GGUF file's metadata key {key!r} is not one we compute "
                f"(known: {sorted(prefix + k for k in CONFIG_KEYS)}). "
                f"Received: {key}={value!r:.100} in {path!r}"
            )
    heads = config.get("num_attention_heads") or 1
    size = config.get("head_dim") or config.get("hidden_size", 0) // heads
    for name in HEAD_SIZE_KEYS:
        if metadata.get(prefix + name, size) != size:
            raise ValueError(
                f"This GGUF file's head size differs from the one transformers "
                f"computes ({size}). Received: {prefix + name}="
                f"{metadata[prefix + name]!r} in {path!r}"
            )
    return _with_tokens(config, metadata, tensor_names)


def _gpt2_config(metadata, tensor_names, path):
    """The GPT-2 `config.json` of a `gpt2` file's metadata (see the module)."""
    config = {"architectures": [ARCHITECTURES["gpt2"]], "model_type": "gpt2"}
    for key, value in metadata.items():
        if not key.startswith("gpt2."):
            continue
        name = key[len("gpt2.") :]
        if name not in GPT2_CONFIG_KEYS:
            raise ValueError(
                f"This GGUF file's metadata key {key!r} is not one we compute "
                f"(known: {sorted('gpt2.' + k for k in GPT2_CONFIG_KEYS)}). "
                f"Received: {key}={value!r:.100} in {path!r}"
            )
        config[GPT2_CONFIG_KEYS[name]] = value
    return _with_tokens(config, metadata, tensor_names)


def _with_tokens(config, metadata, tensor_names):
    """`config` with the vocabulary size, head tying and special token ids
    transformers reads of the file."""
    if "vocab_size" not in config:
        config["vocab_size"] = len(metadata.get("tokenizer.ggml.tokens") or [])
    config["tie_word_embeddings"] = "output.weight" not in tensor_names
    for name, key in [
        ("bos_token_id", "bos_token_id"),
        ("eos_token_id", "eos_token_id"),
        ("pad_token_id", "padding_token_id"),
    ]:
        config[name] = metadata.get(f"tokenizer.ggml.{key}")
    return config


def load(path, dtype=None):
    """Our `Llama` of the GGUF file at `path`, weights in place (see the
    module): `dtype` None or `"float32"`, `"bfloat16"` or `"float16"`
    (the model built under that policy; dequantized tensors in it)."""
    if dtype is not None and dtype not in llama.DTYPES:
        raise ValueError(
            f"`dtype` must be None or one of {list(llama.DTYPES)}. "
            f"Received: dtype={dtype!r}"
        )
    reader = _gguf.open_file(path)
    config = config_of(_gguf.metadata(reader), [t.name for t in reader.tensors], path)
    if config["model_type"] in OWN_READERS:
        return OWN_READERS[config["model_type"]][1](reader, config, dtype, path)
    arguments = llama.config_to_arguments(config)  # checks, before tensors
    _check_types(reader, path)
    factors = [t for t in reader.tensors if t.name == ROPE_FREQS]
    reader.tensors = [t for t in reader.tensors if t.name != ROPE_FREQS]
    names = {t.name: _hf_name(t.name, path) for t in reader.tensors}
    if factors:
        arguments["rope_scaling"] = _frequency_factors(factors[0], arguments, path)
    tensors = FileTensors(reader, names, _permutations(config), dtype)
    del reader  # its metadata (a vocabulary): not kept beside the model
    try:
        return llama.build(
            arguments,
            tensors,
            dtype,
            prepare=lambda m: set_int8(m, tensors, llama.projection_layers),
            constructing=int8_at_build(built_int8(tensors)),
        )
    finally:
        tensors.close()


# llama.cpp's rope frequency factors (Llama 3.1+ files): one per feature
# pair, each inverse frequency divided by its own (`ggml_rope_ext`).
ROPE_FREQS = "rope_freqs.weight"


def _frequency_factors(tensor, arguments, path):
    """The `rope_scaling` of a file's `rope_freqs.weight`, which llama.cpp
    computes from the checkpoint's Llama 3 rope scaling; transformers drops
    the tensor (and so computes unscaled positions), llama.cpp applies it.
    """
    if arguments.get("rope_scaling") is not None:
        raise ValueError(
            f"This GGUF file has both {ROPE_FREQS!r} and rope scaling metadata "
            f"({arguments['rope_scaling']!r}). Received in {path!r}"
        )
    source = _gguf.TensorBytes()
    try:
        factors = dequantized(tensor, source.rows(tensor)).reshape(-1)
    finally:
        source.close()
    return {"rope_type": "frequency_factors", "factors": factors.tolist()}


def _load_gpt2(reader, config, dtype, path):
    """Our `GPT2` of a `gpt2` file (see the module), in float32."""
    if dtype not in (None, "float32"):
        raise ValueError(
            "GPT-2 GGUF files load in float32 only. Received: "
            f"dtype={dtype!r} for {path!r}"
        )
    gpt2.config_to_arguments(config)  # checks, before tensors
    names = {
        t.name: _hf_name(t.name, path, GPT2_TOP_TENSORS, GPT2_BLOCK_TENSORS, "h")
        for t in reader.tensors
    }
    _check_types(reader, path)
    weights, source = {}, _gguf.TensorBytes()
    try:
        for tensor in reader.tensors:
            name = names[tensor.name]
            weight = dequantized(tensor, source.rows(tensor))  # (O, I)
            weights[name] = weight.T if name.endswith(GPT2_TRANSPOSED) else weight
    finally:
        source.close()
    # llama.cpp writes GPT-2's tied head as its own `output.weight`: kept tied
    # where it equals the embedding (the same numbers, half the memory),
    # untied where it does not, as transformers unties it.
    head = weights.get("lm_head.weight")
    tied = head is None or np.array_equal(head, weights["wte.weight"])
    return gpt2.build({**config, "tie_word_embeddings": tied}, weights)


def _gemma3_config(metadata, tensor_names, path):
    """The Gemma 3 `config.json` of a `gemma3` file (`gguf_gemma3.py`)."""
    config = gguf_gemma3.config_of(metadata, path)
    return _with_tokens(config, metadata, tensor_names)


def _load_gemma3(reader, config, dtype, path):
    """Our `Gemma3` of a `gemma3` file (`gguf_gemma3.py`)."""
    _check_types(reader, path)
    return gguf_gemma3.load(reader, config, dtype, path)


# Architectures read by their own `(config_of, load)`, by architecture and
# by the `model_type` of their config; the rest are `llama`'s, read by
# `config_of` and `load` above.
GEMMA3 = (_gemma3_config, _load_gemma3)
OWN_READERS = {
    "gpt2": (_gpt2_config, _load_gpt2),
    "gemma3": GEMMA3,
    "gemma3_text": GEMMA3,
}


def _check_types(reader, path):
    """A ValueError naming a tensor of a type we do not read."""
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind not in EXACT + INT8 + DEQUANTIZED:
            raise ValueError(
                f"GGUF tensor type {kind} is not supported (supported: "
                f"{list(EXACT + INT8 + DEQUANTIZED)}). Received: tensor "
                f"{tensor.name!r} of type {kind} in {path!r}"
            )


def _hf_name(name, path, top=TOP_TENSORS, block=BLOCK_TENSORS, layers="model.layers"):
    """The Hugging Face name of a llama.cpp tensor name, or a ValueError."""
    if name in top:
        return top[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
        if parts[2] in block:
            return f"{layers}.{parts[1]}.{block[parts[2]]}"
    raise ValueError(
        f"This GGUF file has a tensor we do not compute: {name!r} (experts "
        f"and other tensors are not supported). Received in {path!r}"
    )


def _permutations(config):
    """Hugging Face name -> the function undoing llama.cpp's permutation
    of its rows (of a float matrix, int8 values or their scales): the
    query and key projections of `llama` files, per head the rows
    `(D/2, 2)` back to `(2, D/2)`, as transformers undoes it."""
    if config["model_type"] not in PERMUTED:
        return {}
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads

    def unpermute(count):
        def apply(w):
            half = w.shape[0] // count // 2
            w = w.reshape(count, half, 2, *w.shape[1:]).swapaxes(1, 2)
            return w.reshape(count * half * 2, *w.shape[3:])

        return apply

    return {
        f"model.layers.{i}.self_attn.{name}.weight": unpermute(count)
        for i in range(config["num_hidden_layers"])
        for name, count in [("q_proj", heads), ("k_proj", kv_heads)]
    }
