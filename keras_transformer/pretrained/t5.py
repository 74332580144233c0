"""Hugging Face T5 checkpoints (`model_type: t5`, `T5ForConditionalGeneration`:
t5-small/base, T5 v1.1, FLAN-T5) <-> `kt.models.T5`.

Loading renames and reshapes tensors:

- torch's `nn.Linear` weights are `(out, in)`; our attention projections
  are `(E, H, D)` (query, key, value) and `(H, D, E)` (output), the
  feed-forward kernels `(in, out)`;
- ids: ours are the checkpoint's plus one (id 0 is padding), as for Llama:
  the token table holds exactly the checkpoint's rows, looked up at id - 1;
  T5's pad, which starts the decoder, is our 1;
- the relative position table lives in the first block of each stack
  (`block.0.layer.0.SelfAttention.relative_attention_bias`); ours is one
  layer per stack that every block reads.

`dtype="bfloat16"` (or `"float16"`) builds the model under that dtype
policy. A config value that we do not compute exactly (another
`feed_forward_proj`, a `d_ff` per stack ...) is refused by name before any
weight is read. `task_specific_params` (t5-small's prefixes and settings
per task) become the model's `task_settings`, in `generate`'s arguments.

Shape legend: V the checkpoint's vocabulary size, E hidden size, H heads,
D head size, F feed-forward size.
"""

from keras_transformer.models.initializers import (
    global_dtype_policy,
    placeholder_weights,
)
from keras_transformer.models.t5 import T5
from keras_transformer.pretrained import checkpoint, keys
from keras_transformer.pretrained.family import Family
from keras_transformer.pretrained.generation_config import (
    generation_arguments,
    generation_settings,
)
from keras_transformer.text import hf_t5

NAME = "T5"
ARCHITECTURE = "T5ForConditionalGeneration"
DTYPES = ("float32", "bfloat16", "float16")
# `feed_forward_proj` -> `kt.models.T5`'s `feedforward`, and the activation
# transformers reads for it (`dense_act_fn`).
FEEDFORWARDS = {"relu": ("relu", "relu"), "gated-gelu": ("gated-gelu", "gelu_new")}
# Config values we compute exactly: key -> the allowed values (the first is
# the default of a missing key).
REQUIRED = {
    "feed_forward_proj": tuple(FEEDFORWARDS),
    "quantization_config": (None,),
}
SAME = checkpoint.SAME
TRANSPOSE = (lambda w: w.T, lambda w: w.T)  # torch (out, in) <-> Keras (in, out)
# T5's attention projections -> our `MultiHeadAttention`'s sublayers.
PROJECTIONS = {
    "q": "query_dense",
    "k": "key_dense",
    "v": "value_dense",
    "o": "output_dense",
}
# Tied copies of the shared table; transformers writes `shared.weight` only.
COPIES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def load(path, dtype=None):
    """Our `T5` of a T5 folder, weights in place, with the folder's
    generation settings. `dtype`: None or `"float32"`, `"bfloat16"`,
    `"float16"` (the model built under that dtype policy)."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(
            f"`dtype` must be None or one of {list(DTYPES)}. Received: dtype={dtype!r}"
        )
    config = checkpoint.read_config(path)
    generation = checkpoint.read_generation_config(path)
    arguments = config_to_arguments(config, generation)  # checks first
    return build(arguments, checkpoint.read_weights(path, dtype=None), dtype)


def save(model, path, tokenizer=None):
    """Writes a `T5` (and its `kt.text.T5Tokenizer`) as a T5 folder;
    everything is checked before anything is written."""
    if tokenizer is not None:
        hf_t5.check_tokenizer(tokenizer, model.vocabulary_size)
    config, generation = arguments_to_config(model)
    tensors = checkpoint.tensors(weight_pairs(model))
    path = checkpoint.write_folder(path, config, tensors, generation)
    if tokenizer is not None:
        hf_t5.save_tokenizer(tokenizer, path, model.max_sequence_length)
    return path


def config_to_arguments(config, generation=None):
    """`T5` constructor arguments from a Hugging Face `config.json` (and
    `generation_config.json`), every value checked."""
    checkpoint.check_architecture(config, NAME, (ARCHITECTURE,))
    checkpoint.check_supported(config, NAME, REQUIRED)
    projection = config.get("feed_forward_proj", "relu")
    feedforward, activation = FEEDFORWARDS[projection]
    gated = config.get("is_gated_act")
    received_act = config.get("dense_act_fn", activation)
    if received_act != activation or gated not in (None, projection != "relu"):
        raise ValueError(
            f"This T5 checkpoint's feed-forward is not supported: "
            f'feed_forward_proj="{projection}" is computed with dense_act_fn='
            f"{activation!r}. Received: dense_act_fn={received_act!r}, "
            f"is_gated_act={gated!r}"
        )
    start = (generation or {}).get("decoder_start_token_id")
    if start is None:
        start = config.get("decoder_start_token_id", config.get("pad_token_id", 0))
    settings = generation_arguments(config, generation, NAME)
    tasks = {}
    for task, params in (config.get("task_specific_params") or {}).items():
        params = dict(params)
        prefix = params.pop("prefix", "") or ""
        params.setdefault("eos_token_id", config.get("eos_token_id", 1))
        tasks[task] = {"prefix": prefix, **generation_arguments(config, params, NAME)}
    return dict(
        vocabulary_size=config["vocab_size"] + 1,  # + our padding id 0
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["d_model"],
        intermediate_dim=config["d_ff"],
        key_dim=config["d_kv"],
        num_decoder_layers=config.get("num_decoder_layers") or config["num_layers"],
        feedforward=feedforward,
        num_buckets=config.get("relative_attention_num_buckets", 32),
        max_distance=config.get("relative_attention_max_distance", 128),
        # transformers 5 writes `tie_word_embeddings: true` for every T5 and
        # says in `scale_decoder_outputs` whether the head is the rescaled
        # table; the hub's files have only `tie_word_embeddings`.
        tie_embeddings=bool(
            config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True))
        ),
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
        dropout=config.get("dropout_rate", 0.1),
        max_sequence_length=config.get("n_positions") or 512,
        decoder_start_token_id=start + 1,
        generation_config=settings,
        task_settings=tasks or None,
    )


def arguments_to_config(model):
    """The Hugging Face `config.json` and `generation_config.json` of a
    `T5`."""
    generation = generation_settings(model)
    end = generation.setdefault("eos_token_id", 1)
    generation.update(pad_token_id=0)
    projection = model.feedforward
    config = {
        "architectures": [ARCHITECTURE],
        "model_type": "t5",
        "vocab_size": model.vocabulary_size - 1,
        "d_model": model.hidden_dim,
        "d_kv": model.key_dim or model.hidden_dim // model.num_heads,
        "d_ff": model.intermediate_dim,
        "num_layers": model.num_layers,
        "num_decoder_layers": model.num_decoder_layers or model.num_layers,
        "num_heads": model.num_heads,
        "relative_attention_num_buckets": model.num_buckets,
        "relative_attention_max_distance": model.max_distance,
        "dropout_rate": model.dropout,
        "layer_norm_epsilon": model.layer_norm_epsilon,
        "initializer_factor": 1.0,
        "feed_forward_proj": projection,
        "dense_act_fn": FEEDFORWARDS[projection][1],
        "is_gated_act": projection != "relu",
        "tie_word_embeddings": bool(model.tie_embeddings),
        "scale_decoder_outputs": bool(model.tie_embeddings),  # transformers 5
        "is_encoder_decoder": True,
        "use_cache": True,
        "n_positions": model.max_sequence_length,
        "pad_token_id": 0,
        "eos_token_id": end[0] if isinstance(end, list) else end,
        "decoder_start_token_id": generation["decoder_start_token_id"],
        "dtype": str(model.token_embedding.embeddings.dtype),
    }
    if model.task_settings:
        config["task_specific_params"] = {
            task: _task_params(settings)
            for task, settings in model.task_settings.items()
        }
    return config, generation


def _task_params(settings):
    """A `task_specific_params` entry of a `task_settings` entry."""
    arguments = dict(settings)
    prefix = arguments.pop("prefix", "")
    params = generation_settings(_Settings(arguments))
    params.pop("decoder_start_token_id")
    params.pop("eos_token_id", None)
    return {**params, "prefix": prefix}


class _Settings:
    """What `generation_settings` reads of a model: its settings only."""

    decoder_start_token_id = 1

    def __init__(self, arguments):
        self.generation_config = arguments


def _attention_pairs(prefix, attention):
    split, _, merge = checkpoint.head_converters(attention.num_heads, attention.key_dim)
    return [
        (f"{prefix}.{short}.weight", getattr(attention, attribute).kernel, layout)
        for (short, attribute), layout in zip(
            PROJECTIONS.items(), (split, split, split, merge), strict=True
        )
    ]


def block_projections(block, side):
    """`(name, layer)` of a block's projections (attention: its
    `MultiHeadAttention`), in the names that the weight table and PEFT
    share."""
    cross = side == "decoder"
    layers = [("layer.0.SelfAttention", block.self_attention_layer)]
    if cross:
        layers.append(("layer.1.EncDecAttention", block.cross_attention_layer))
    ff = f"layer.{2 if cross else 1}.DenseReluDense"
    if block.feedforward_kind == "gated":
        feedforward = block.feedforward
        layers += [
            (f"{ff}.wi_0", feedforward.gate),
            (f"{ff}.wi_1", feedforward.up),
            (f"{ff}.wo", feedforward.down),
        ]
    else:
        layers += [
            (f"{ff}.wi", block.feedforward_intermediate_dense),
            (f"{ff}.wo", block.feedforward_output_dense),
        ]
    return layers


def _norms(block, side):
    cross = side == "decoder"
    norms = [("layer.0.layer_norm", block.self_attention_layer_norm)]
    if cross:
        norms.append(("layer.1.layer_norm", block.cross_attention_layer_norm))
    norms.append(
        (f"layer.{2 if cross else 1}.layer_norm", block.feedforward_layer_norm)
    )
    return norms


def weight_pairs(model):
    """`(Hugging Face name, our variable, (to ours, to theirs))` for every
    tensor of a `T5`, in transformers' order."""
    pairs = [("shared.weight", model.token_embedding.embeddings, SAME)]
    for side in ("encoder", "decoder"):
        for i, block in enumerate(getattr(model, f"{side}_blocks")):
            prefix = f"{side}.block.{i}"
            for name, layer in block_projections(block, side):
                if name.endswith("Attention"):
                    pairs += _attention_pairs(f"{prefix}.{name}", layer)
                else:
                    pairs.append((f"{prefix}.{name}.weight", layer.kernel, TRANSPOSE))
            if i == 0:
                bias = getattr(model, f"{side}_position_bias")
                pairs.append(
                    (
                        f"{prefix}.layer.0.SelfAttention.relative_attention_bias.weight",
                        bias.embeddings,
                        SAME,
                    )
                )
            pairs += [
                (f"{prefix}.{name}.weight", norm.scale, SAME)
                for name, norm in _norms(block, side)
            ]
        pairs.append(
            (
                f"{side}.final_layer_norm.weight",
                getattr(model, f"{side}_norm").scale,
                SAME,
            )
        )
    if model.lm_head is not None:
        pairs.append(("lm_head.weight", model.lm_head.kernel, TRANSPOSE))
    return pairs


def peft_modules(model):
    """`{PEFT module name: [(our layer, None)]}` of a `T5`: the attention
    projections (`q`, `k`, `v`, `o`) and the feed-forward's (`wi`, `wo` ...)."""
    modules = {}
    for side in ("encoder", "decoder"):
        for i, block in enumerate(getattr(model, f"{side}_blocks")):
            for name, layer in block_projections(block, side):
                prefix = f"{side}.block.{i}.{name}"
                if name.endswith("Attention"):
                    for short, attribute in PROJECTIONS.items():
                        modules[f"{prefix}.{short}"] = [
                            (getattr(layer, attribute), None)
                        ]
                else:
                    modules[prefix] = [(layer, None)]
    return modules


def _key(weights, name):
    # Some exports keep only a tied copy of the shared table.
    copies = COPIES if name == "shared.weight" else ()
    return keys.find_key(weights, name, (name, *copies))


def build(arguments, weights, dtype=None):
    """Our `T5` of checked constructor `arguments` and a checkpoint's
    tensors, built under `dtype` (None: float32)."""
    with global_dtype_policy(dtype or "float32"), placeholder_weights():
        model = T5(**arguments)
    shared = weights[_key(weights, "shared.weight")]
    if model.lm_head is not None and "lm_head.weight" not in weights:
        # An untied head that transformers 5 saved as the table itself.
        weights = {**weights, "lm_head.weight": shared}
    ignored = list(COPIES)
    for copy in COPIES + (("lm_head.weight",) if model.lm_head is None else ()):
        keys.check_tied(
            weights, copy, shared,
            f"The checkpoint's {copy!r} differs from its shared token table, "
            "which its config.json ties to it.",
        )  # fmt: skip
        if copy in weights:
            ignored.append(copy)
    pairs = checkpoint.in_variable_dtype(weight_pairs(model))
    checkpoint.assign(pairs, weights, _key, tuple(ignored))
    return model


FAMILY = Family(
    name=NAME,
    model_types=("t5",),
    classes=(T5,),
    architectures={ARCHITECTURE: (T5, "Text2Text")},
    load=load,
    save=save,
    default_architectures={"t5": ARCHITECTURE},
    also_served_by={ARCHITECTURE: ("Summarizer", "Translator")},
    dtypes=DTYPES,
    tokenizers={"t5": hf_t5.from_folder},
    peft_modules=peft_modules,
    peft_task_type="SEQ_2_SEQ_LM",
)
