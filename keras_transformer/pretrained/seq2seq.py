"""Hugging Face Marian and BART checkpoints (`model_type: marian`,
`MarianMTModel`; `model_type: bart`, `BartForConditionalGeneration`) <->
`kt.models.Seq2Seq`.

Both are post-LN encoder-decoders with one token table shared by the
encoder, the decoder and the output projection, plus `final_logits_bias`.
They differ in a few points, each a `Seq2Seq` option:

- positions: Marian's are sinusoidal with the sines first, then the
  cosines (`sinusoidal_layout="concatenated"`); BART's are learned, with
  offset 2 (`position="learned", position_offset=2`);
- the √E embedding scale follows `scale_embedding` (True in opus-mt, False
  in bart-large);
- BART has an embedding LayerNorm (`embedding_layer_norm=True`);
- activation: Marian's swish is `"silu"`, BART's GELU the exact `"gelu"`;
- the decoder starts from Marian's pad token, and from BART's `</s>`.

Ids: id 0 is padding in this library, and neither family has its pad at 0
(Marian's is the last id, BART's is 1), so, as for GPT-2, our ids are the
checkpoint's plus one. Our token table and logits bias have one more row,
row 0, set to zeros on import (the samplers never choose id 0) and dropped
by `save_pretrained`. The checkpoint's own pad token keeps a row (our id
pad + 1): Marian's decoder starts from it.

The checkpoint's generation settings (`generation_config.json`, or the
legacy keys of `config.json`) become the model's `generation_config`, in
our ids: pass `**model.generation_config` to `kt.generation.generate` to
decode as `transformers`' `generate` does by default.

Shape legend: V vocabulary, E hidden size, H heads, D head size, F
feed-forward size.
"""

import functools

import numpy as np

from keras_transformer.models.seq2seq import Seq2Seq
from keras_transformer.pretrained import checkpoint, keys
from keras_transformer.pretrained.family import Family
from keras_transformer.pretrained.generation_config import (
    generation_arguments,
    generation_settings,
)
from keras_transformer.pretrained.seq2seq_families import (
    ACTIVATIONS,
    FAMILIES,
    MAX_LENGTH,
)
from keras_transformer.text import hf_tokenizers

# Options every Marian and BART layout shares: (value on loading, the
# values saving accepts); decoder_start_token_id must be set.
COMMON = {
    "tie_embeddings": (True, (True, None)),
    "target_vocabulary_size": (None, (None,)),
    "logits_bias": (True, (True,)),
    "layer_norm_epsilon": (1e-5, (1e-5,)),  # torch.nn.LayerNorm's default
}


def load(path):
    """Our `Seq2Seq` of a Marian or BART folder, weights in place, with the
    folder's generation settings; the config is checked before any weight
    is read."""
    config = checkpoint.read_config(path)
    generation = checkpoint.read_generation_config(path)
    config_to_arguments(config, generation)  # checks, before reading
    return build(config, checkpoint.read_weights(path), generation)


def save(model, path, tokenizer=None):
    """Writes a Marian- or BART-shaped `Seq2Seq` (and its tokenizer) as the
    family's folder; everything is checked before anything is written."""
    family = layout_of(model)
    config, generation, tensors = export(model)
    if tokenizer is not None:
        size = family.tokenizer_check(tokenizer, family.name)
        checkpoint.check_tokenizer_size(size, model.vocabulary_size, tokenizer)
    path = checkpoint.write_folder(path, config, tensors, generation)
    if tokenizer is not None:
        family.tokenizer_save(
            tokenizer,
            path,
            _tokenizer_config(family, tokenizer, model.max_sequence_length),
        )
    return path


def _tokenizer_config(family, tokenizer, max_length):
    """The family's `tokenizer_config.json` for `tokenizer`."""
    config = {
        key: max_length if value is MAX_LENGTH else value
        for key, value in family.tokenizer_config.items()
    }
    if family.optional_tokens:
        vocabulary = tokenizer.get_vocabulary()
        config.update(
            {k: t for k, t in family.optional_tokens.items() if t in vocabulary}
        )
    return config


def config_to_arguments(config, generation=None):
    """`Seq2Seq` constructor arguments from a Hugging Face `config.json`
    (and `generation_config.json`), every value checked before any weight
    is built."""
    family = FAMILIES[config["model_type"]]
    name = family.name
    checkpoint.check_architecture(config, name, (family.architecture,))
    checkpoint.check_supported(config, name, family.required)
    for encoder_key, decoder_key in [
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ]:
        if config.get(encoder_key) != config.get(decoder_key):
            raise ValueError(
                f"This {name} checkpoint's encoder and decoder differ in "
                f"`{decoder_key}` (kt.models.Seq2Seq shares it). Received: "
                f"{encoder_key}={config.get(encoder_key)!r}, "
                f"{decoder_key}={config.get(decoder_key)!r}"
            )
    for key, other in family.same_as.items():
        if config.get(key, config.get(other)) != config.get(other):
            raise ValueError(
                f"This {name} checkpoint's `{key}` differs from its `{other}` "
                f"(kt.models.Seq2Seq shares them). Received: {key}={config[key]!r}, "
                f"{other}={config.get(other)!r}"
            )
    start = (generation or {}).get("decoder_start_token_id")
    if start is None:
        start = config.get("decoder_start_token_id")
    if start is None:
        raise ValueError(
            f"This {name} checkpoint has no `decoder_start_token_id`. "
            "Received: decoder_start_token_id=None"
        )
    arguments = dict(
        vocabulary_size=config["vocab_size"] + 1,  # + our padding id 0
        num_layers=config["encoder_layers"],
        num_decoder_layers=config["decoder_layers"],
        num_heads=config["encoder_attention_heads"],
        hidden_dim=config["d_model"],
        intermediate_dim=config["encoder_ffn_dim"],
        max_sequence_length=config["max_position_embeddings"],
        dropout=config.get("dropout", 0.1),
        activation=ACTIVATIONS[config.get("activation_function", "gelu")],
        sinusoidal_layout="concatenated",
        scale_embeddings=bool(config.get("scale_embedding", False)),
        decoder_start_token_id=start + 1,
        generation_config=generation_arguments(config, generation, name),
        **{key: value for key, (value, _) in COMMON.items()},
    )
    return {**arguments, **family.options}


def layout_of(model):
    """The `Layout` whose checkpoint layout a `Seq2Seq` can be written in
    (chosen by its `position`), or a ValueError naming what fits none."""
    matching = [f for f in FAMILIES.values() if f.options["position"] == model.position]
    expected = {key: allowed for key, (_, allowed) in COMMON.items()}
    if matching:
        expected.update({key: (value,) for key, value in matching[0].options.items()})
    else:
        expected["position"] = tuple(f.options["position"] for f in FAMILIES.values())
    expected["decoder_start_token_id"] = None  # any, but set
    for key, allowed in expected.items():
        value = getattr(model, key)
        if value is None if allowed is None else value not in allowed:
            raise ValueError(
                "save_pretrained writes a Seq2Seq as a "
                + " or ".join(f.name for f in FAMILIES.values())
                + " checkpoint: tied shared embeddings, logits_bias=True, a "
                "decoder_start_token_id, layer_norm_epsilon=1e-5, and Marian's "
                "concatenated sinusoids or BART's offset-2 learned positions with "
                f"an embedding LayerNorm. Received: {key}={value!r}"
            )
    if model.activation not in ACTIVATIONS.values():
        raise ValueError(
            f"`activation` {model.activation!r} has no Hugging Face name "
            f"(supported: {sorted(set(ACTIVATIONS.values()))}). "
            f"Received: activation={model.activation!r}"
        )
    return matching[0]


def arguments_to_config(model, family):
    """The Hugging Face `config.json` and `generation_config.json` of a
    `Seq2Seq` in `family`'s layout."""
    generation = generation_settings(model)
    end = generation.setdefault("eos_token_id", family.eos_token_id)
    special = family.token_ids(generation["decoder_start_token_id"])
    generation.update(special)
    activation = {"silu": "swish"}.get(model.activation, model.activation)
    config = {
        "architectures": [family.architecture],
        "model_type": family.model_type,
        "vocab_size": model.vocabulary_size - 1,
        "d_model": model.hidden_dim,
        "encoder_layers": model.num_layers,
        "decoder_layers": model.num_decoder_layers or model.num_layers,
        "encoder_attention_heads": model.num_heads,
        "decoder_attention_heads": model.num_heads,
        "encoder_ffn_dim": model.intermediate_dim,
        "decoder_ffn_dim": model.intermediate_dim,
        "max_position_embeddings": model.max_sequence_length,
        "activation_function": activation,
        "scale_embedding": model.scale_embeddings,
        "dropout": model.dropout,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "decoder_start_token_id": generation["decoder_start_token_id"],
        # config.json names one end token; generation_config.json all.
        "eos_token_id": end[0] if isinstance(end, list) else end,
        "forced_eos_token_id": generation.get("forced_eos_token_id"),
        "init_std": 0.02,
        **special,
        **family.config,
    }
    config.update({key: config[other] for key, other in family.same_as.items()})
    config.update(
        {k: generation[k] for k in family.generation_in_config if k in generation}
    )
    return config, generation


SAME = checkpoint.SAME
LINEAR = (lambda w: w.T, lambda w: w.T)
# Our row 0 is padding: the checkpoint's token t is our row t + 1.
SHIFT = (
    lambda w: np.concatenate([np.zeros_like(w[:1]), w]),
    lambda w: w[1:],
)
LOGITS_BIAS = (  # (1, V) <-> (V + 1,)
    lambda b: np.concatenate([[0.0], b.reshape(-1)]).astype("float32"),
    lambda b: b[None, 1:],
)


def attention_pairs(prefix, attention, heads, size):
    """The tensors of an attention named `q_proj`, `k_proj`, `v_proj` and
    `out_proj` (BART's, Marian's, Whisper's: whose key has no bias)."""
    project, project_bias, output = checkpoint.head_converters(heads, size)
    pairs = []
    for name, layer in [
        ("q_proj", attention.query_dense),
        ("k_proj", attention.key_dense),
        ("v_proj", attention.value_dense),
    ]:
        pairs.append((f"{prefix}.{name}.weight", layer.kernel, project))
        if layer.bias is not None:
            pairs.append((f"{prefix}.{name}.bias", layer.bias, project_bias))
    return pairs + [
        (f"{prefix}.out_proj.weight", attention.output_dense.kernel, output),
        (f"{prefix}.out_proj.bias", attention.output_dense.bias, SAME),
    ]


def feedforward_pairs(prefix, block):
    """The tensors of a block's `fc1`, `fc2` and `final_layer_norm`."""
    return [
        (f"{prefix}.fc1.weight", block.feedforward_intermediate_dense.kernel, LINEAR),
        (f"{prefix}.fc1.bias", block.feedforward_intermediate_dense.bias, SAME),
        (f"{prefix}.fc2.weight", block.feedforward_output_dense.kernel, LINEAR),
        (f"{prefix}.fc2.bias", block.feedforward_output_dense.bias, SAME),
        *checkpoint.norm_pairs(
            f"{prefix}.final_layer_norm", block.feedforward_layer_norm
        ),
    ]


def _pairs(model):
    """`(Hugging Face name, our variable, (to ours, to theirs))` for every
    tensor of a Marian- or BART-shaped `Seq2Seq`."""
    heads = model.num_heads
    size = model.hidden_dim // heads
    pairs = [
        (
            "model.shared.weight",
            model.encoder_embeddings.token_embedding.embeddings,
            SHIFT,
        ),
        ("final_logits_bias", model.output_bias.bias, LOGITS_BIAS),
    ]
    for side in ("encoder", "decoder"):
        embeddings = getattr(model, f"{side}_embeddings")
        if model.position == "learned":
            pairs.append(
                (
                    f"model.{side}.embed_positions.weight",
                    embeddings.position_embeddings,
                    SAME,
                )
            )
        norm = getattr(model, f"{side}_embeddings_layer_norm")
        if norm is not None:
            pairs += checkpoint.norm_pairs(f"model.{side}.layernorm_embedding", norm)
    for side in ("encoder", "decoder"):
        for i, block in enumerate(getattr(model, f"{side}_blocks")):
            prefix = f"model.{side}.layers.{i}"
            # Each sublayer's attention, then its LayerNorm; the feed-forward.
            attentions = [("self_attn", "self_attention")]
            if side == "decoder":
                attentions.append(("encoder_attn", "cross_attention"))
            for theirs, ours in attentions:
                pairs += attention_pairs(
                    f"{prefix}.{theirs}", getattr(block, f"{ours}_layer"), heads, size
                )
                pairs += checkpoint.norm_pairs(
                    f"{prefix}.{theirs}_layer_norm",
                    getattr(block, f"{ours}_layer_norm"),
                )
            pairs += feedforward_pairs(prefix, block)
    return pairs


def _key(weights, name):
    """The checkpoint's key for `name` (`BartModel`-style keys lack the
    `model.` prefix), or None."""
    for candidate in (name, name.removeprefix("model.")):
        if candidate in weights:
            return candidate
    return None


def _find_key(weights, name):
    """`_key`, or a ValueError naming the tensor."""
    key = _key(weights, name)
    return keys.find_key(weights, name) if key is None else key


# Tied copies of the shared table carry no weights of their own.
COPIES = ("embed_tokens.weight", "lm_head.weight")
# fairseq conversions carry `.version` buffers, which transformers ignores.
BUFFERS = (".version",)


def build(config, weights, generation=None):
    """Our `Seq2Seq` of a Marian or BART checkpoint, weights in place."""
    arguments = config_to_arguments(config, generation)
    family = FAMILIES[config["model_type"]]
    if _key(weights, "model.shared.weight") is None:
        for copy in (
            "model.encoder.embed_tokens.weight",
            "encoder.embed_tokens.weight",
        ):
            if copy in weights:  # some exports keep only a tied copy
                weights = {**weights, "model.shared.weight": weights[copy]}
                break
    shared = weights.get(_key(weights, "model.shared.weight"))
    for key in [k for k in weights if k.endswith(COPIES)]:
        if (
            shared is None
            or weights[key].shape != shared.shape
            or not np.array_equal(weights[key], shared)
        ):
            raise ValueError(
                f"The checkpoint's {key!r} differs from its shared token table; "
                "kt.models.Seq2Seq ties them (untied embeddings are not supported). "
                f"Received: {key!r} of shape {weights[key].shape}, shared table of "
                f"shape {None if shared is None else shared.shape}"
            )
    model = Seq2Seq(**arguments)
    if "final_logits_bias" not in weights:  # some exports leave the zeros out
        weights = {**weights, "final_logits_bias": np.zeros((1, config["vocab_size"]))}
    ignored = COPIES + BUFFERS + family.buffers
    checkpoint.assign(_pairs(model), weights, _find_key, ignored)
    return model


def export(model):
    """`(config, generation settings, tensors)` of a Marian- or BART-shaped
    `Seq2Seq`, in Hugging Face's names and layouts."""
    config, generation = arguments_to_config(model, layout_of(model))
    return config, generation, checkpoint.tensors(_pairs(model))


FAMILY = Family(
    name="Marian and BART",
    model_types=tuple(FAMILIES),
    classes=(Seq2Seq,),
    architectures={
        "MarianMTModel": (Seq2Seq, "Translator"),
        "BartForConditionalGeneration": (Seq2Seq, "Summarizer"),
    },
    load=load,
    save=save,
    default_architectures={t: f.architecture for t, f in FAMILIES.items()},
    # BART's `<s> ... </s>` around each text, whatever its files say.
    tokenizers={"bart": functools.partial(hf_tokenizers.read_folder, bart=True)},
)
