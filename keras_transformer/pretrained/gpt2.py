"""Hugging Face GPT-2 checkpoints (`model_type: gpt2`, `GPT2LMHeadModel` or
`GPT2Model`) <-> `kt.models.GPT2`.

Our GPT2 computes what Hugging Face's computes (pre-LN blocks, learned
positions, the tanh GELU `gelu_new` with `activation="gelu_approximate"`,
LayerNorm epsilon 1e-5, logits through the tied token embedding), so loading
is a renaming and re-shaping of tensors:

- GPT-2's `Conv1D` weights are already `(in, out)`, as Keras kernels are;
- `c_attn` holds query, key and value side by side, `(E, 3E)`: it is split
  into three `(E, H, D)` kernels, and `c_proj` becomes `(H, D, E)`;
- ids: id 0 is padding in this library and GPT-2 has none, so our ids are
  GPT-2's plus one. Our token embedding has one more row, row 0, which
  loading sets to zeros; the samplers never choose id 0, and
  `save_pretrained` drops the row again.

Shape legend: V GPT-2's vocabulary size, E hidden size, H heads, D head size.
"""

import re

import numpy as np

from keras_transformer.models.gpt import GPT2
from keras_transformer.models.initializers import placeholder_weights
from keras_transformer.pretrained import checkpoint, keys
from keras_transformer.pretrained.family import Family
from keras_transformer.text import hf_tokenizers, hf_writers
from keras_transformer.text.bpe import BytePairTokenizer

ACTIVATIONS = {
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu": "gelu",
}
# Hugging Face config values we compute exactly: key -> the allowed values.
REQUIRED = {
    "scale_attn_weights": (True,),
    "scale_attn_by_inverse_layer_idx": (False,),
    "add_cross_attention": (False,),
    "tie_word_embeddings": (True, False),
}
ARCHITECTURES = ("GPT2LMHeadModel", "GPT2Model")
HEAD = "lm_head.weight"  # an untied head's (never prefixed `transformer.`)
# The causal-mask buffers of older checkpoints carry no weights.
BUFFER = re.compile(r"(^|\.)h\.\d+\.attn\.(bias|masked_bias)$")


def load(path):
    """Our `GPT2` of a GPT-2 folder, weights in place."""
    config = checkpoint.read_config(path)
    return build(config, checkpoint.read_weights(path))


def save(model, path, tokenizer=None):
    """Writes a `GPT2` (and its `BytePairTokenizer`) as a Hugging Face
    folder; the tokenizer's `<|endoftext|>` becomes the end token."""
    end = None
    if tokenizer is not None:
        hf_writers.check_savable(tokenizer, BytePairTokenizer)
        checkpoint.check_tokenizer_size(
            tokenizer.vocabulary_size(), model.vocabulary_size, tokenizer
        )
        if hf_tokenizers.END in tokenizer.get_vocabulary():
            end = tokenizer.token_to_id(hf_tokenizers.END)
    path = checkpoint.write_folder(path, *export(model, end))
    if tokenizer is not None:
        hf_writers.save_byte_pair(tokenizer, path)
    return path


def config_to_arguments(config):
    """`GPT2` constructor arguments from a Hugging Face `config.json`."""
    checkpoint.check_architecture(config, "GPT-2", ARCHITECTURES)
    checkpoint.check_supported(
        config, "GPT-2", {**REQUIRED, "activation_function": tuple(ACTIVATIONS)}
    )
    activation = config.get("activation_function", "gelu_new")
    hidden = config["n_embd"]
    return dict(
        vocabulary_size=config["vocab_size"] + 1,  # + our padding id 0
        num_layers=config["n_layer"],
        num_heads=config["n_head"],
        hidden_dim=hidden,
        intermediate_dim=config.get("n_inner") or 4 * hidden,
        max_sequence_length=config["n_positions"],
        dropout=config.get("resid_pdrop", 0.1),
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
        tie_word_embeddings=config.get("tie_word_embeddings", True),
    )


def arguments_to_config(model, end_token_id=None):
    """The Hugging Face `config.json` of a `GPT2` (`end_token_id` in our
    ids, or None)."""
    end = None if end_token_id is None else end_token_id - 1
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": model.vocabulary_size - 1,
        "n_layer": model.num_layers,
        "n_head": model.num_heads,
        "n_embd": model.hidden_dim,
        "n_inner": model.intermediate_dim,
        "n_positions": model.max_sequence_length,
        "resid_pdrop": model.dropout,
        "embd_pdrop": model.dropout,
        "attn_pdrop": model.dropout,
        "activation_function": {"gelu_approximate": "gelu_new"}.get(
            model.activation, "gelu"
        ),
        "layer_norm_epsilon": model.layer_norm_epsilon,
        "tie_word_embeddings": model.tie_word_embeddings,
        "bos_token_id": end,
        "eos_token_id": end,
        "initializer_range": 0.02,
    }


SAME = checkpoint.SAME
# Our row 0 is padding: GPT-2's token t is our row t + 1.
SHIFT = (
    lambda w: np.concatenate([np.zeros_like(w[:1]), w]),
    lambda w: w[1:],
)


def block_projections(block):
    """`(name, our layers)` of a block's projections, in the names that
    the weight table and PEFT share: `c_attn` holds the query, key and
    value side by side."""
    attention = block.self_attention_layer
    return [
        (
            "attn.c_attn",
            [attention.query_dense, attention.key_dense, attention.value_dense],
        ),
        ("attn.c_proj", [attention.output_dense]),
        ("mlp.c_fc", [block.feedforward_intermediate_dense]),
        ("mlp.c_proj", [block.feedforward_output_dense]),
    ]


def peft_modules(model):
    """`{PEFT module name: [(our layer, rows of lora_B or None)]}` of a
    `GPT2`: `c_attn`'s `lora_B` rows are the query's, key's and value's."""
    width = model.hidden_dim
    table = {}
    for i, block in enumerate(model.blocks):
        for name, layers in block_projections(block):
            rows = [slice(j * width, (j + 1) * width) for j in range(len(layers))]
            table[f"transformer.h.{i}.{name}"] = [
                (layer, rows[j] if len(layers) > 1 else None)
                for j, layer in enumerate(layers)
            ]
    return table


def _pairs(model):
    """`(Hugging Face name, our variable(s), (to ours, to theirs))` for every
    tensor of a `GPT2`."""
    heads, size = model.num_heads, model.hidden_dim // model.num_heads
    hidden = model.hidden_dim
    fused = (  # (E, 3E) <-> 3 x (E, H, D)
        lambda w: tuple(
            w[:, j * hidden : (j + 1) * hidden].reshape(-1, heads, size)
            for j in range(3)
        ),
        lambda ws: np.concatenate([w.reshape(w.shape[0], -1) for w in ws], 1),
    )
    fused_bias = (  # (3E,) <-> 3 x (H, D)
        lambda b: tuple(
            b[j * hidden : (j + 1) * hidden].reshape(heads, size) for j in range(3)
        ),
        lambda bs: np.concatenate([b.reshape(-1) for b in bs]),
    )
    merge = (lambda w: w.reshape(heads, size, -1), lambda w: w.reshape(-1, hidden))
    converters = {  # (kernel, bias) converters of each projection
        "attn.c_attn": (fused, fused_bias),
        "attn.c_proj": (merge, SAME),
        "mlp.c_fc": (SAME, SAME),
        "mlp.c_proj": (SAME, SAME),
    }
    tables = model.embeddings
    pairs = [
        ("wte.weight", tables.token_embedding.embeddings, SHIFT),
        ("wpe.weight", tables.position_embeddings, SAME),
    ]
    for i, block in enumerate(model.blocks):
        prefix = f"h.{i}"
        norms = {
            "attn": checkpoint.norm_pairs(
                f"{prefix}.ln_1", block.self_attention_layer_norm
            ),
            "mlp": checkpoint.norm_pairs(
                f"{prefix}.ln_2", block.feedforward_layer_norm
            ),
        }
        for name, layers in block_projections(block):
            pairs += norms.pop(name.split(".")[0], [])  # each norm before its part
            kernel, bias = converters[name]
            kernels = tuple(layer.kernel for layer in layers)
            biases = tuple(layer.bias for layer in layers)
            if len(layers) == 1:
                kernels, biases = kernels[0], biases[0]
            pairs += [
                (f"{prefix}.{name}.weight", kernels, kernel),
                (f"{prefix}.{name}.bias", biases, bias),
            ]
    pairs += checkpoint.norm_pairs("ln_f", model.final_layer_norm)
    if model.lm_head is not None:  # torch (V, E) <-> Keras (E, V)
        pairs.append((HEAD, model.lm_head.kernel, (lambda w: w.T, lambda w: w.T)))
    return pairs


def _key(weights, name):
    """The checkpoint's key for `name`: `GPT2LMHeadModel` checkpoints
    written by `transformers` prefix `transformer.` (not the head's);
    OpenAI's do not."""
    return keys.find_key(weights, name, (f"transformer.{name}", name), "GPT-2 ")


def build(config, weights):
    """Our `GPT2` of a checkpoint, weights in place."""
    with placeholder_weights():  # every weight is assigned below
        model = GPT2(**config_to_arguments(config))
    if model.tie_word_embeddings and HEAD in weights:  # a tied copy of wte
        head, embedding = (
            weights["lm_head.weight"],
            weights[_key(weights, "wte.weight")],
        )
        if head.shape != embedding.shape or not np.array_equal(head, embedding):
            raise ValueError(
                "The checkpoint's 'lm_head.weight' differs from its token "
                "embedding, but its config.json ties them "
                "(tie_word_embeddings=True). Received: 'lm_head.weight' of shape "
                f"{head.shape}, token embedding of shape {embedding.shape}"
            )
    buffers = [key for key in weights if BUFFER.search(key)]
    buffers += [HEAD] if model.tie_word_embeddings else []
    checkpoint.assign(_pairs(model), weights, _key, tuple(buffers))
    return model


def export(model, end_token_id=None):
    """`(config, tensors)` of a `GPT2` in Hugging Face's names and layouts."""
    tensors = checkpoint.tensors(
        [
            (name if name == HEAD else f"transformer.{name}", v, c)
            for name, v, c in _pairs(model)
        ]
    )
    return arguments_to_config(model, end_token_id), tensors


FAMILY = Family(
    name="GPT-2",
    model_types=("gpt2",),
    classes=(GPT2,),
    architectures={
        "GPT2LMHeadModel": (GPT2, "TextGenerator"),
        "GPT2Model": (GPT2, None),
    },
    load=load,
    save=save,
    default_architectures={"gpt2": "GPT2LMHeadModel"},
    peft_modules=peft_modules,
    peft_fan_in_fan_out=True,  # Conv1D weights are (in, out)
)
