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

import numpy as np

from keras_transformer.models.seq2seq import Seq2Seq
from keras_transformer.pretrained import checkpoint
from keras_transformer.pretrained.generation_config import (
    generation_arguments,
    generation_settings,
)

ACTIVATIONS = {
    "swish": "silu",
    "silu": "silu",
    "gelu": "gelu",
    "relu": "relu",
}
ARCHITECTURES = {
    "marian": ("MarianMTModel",),
    "bart": ("BartForConditionalGeneration",),
}
# What we compute exactly: key -> the allowed values (the first is the
# default when the key is missing).
REQUIRED = {
    "marian": {
        "share_encoder_decoder_embeddings": (True,),
        "tie_word_embeddings": (True,),
        "activation_function": tuple(ACTIVATIONS),
    },
    "bart": {
        "tie_word_embeddings": (True,),
        "activation_function": tuple(ACTIVATIONS),
    },
}
NAMES = {"marian": "Marian", "bart": "BART"}


def config_to_arguments(config, generation=None):
    """`Seq2Seq` constructor arguments from a Hugging Face `config.json`
    (and `generation_config.json`), every value checked before any weight
    is built."""
    family = config["model_type"]
    name = NAMES[family]
    checkpoint.check_architecture(config, name, ARCHITECTURES[family])
    checkpoint.check_supported(config, name, REQUIRED[family])
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
    vocabulary = config["vocab_size"]
    if (
        family == "marian"
        and config.get("decoder_vocab_size", vocabulary) != vocabulary
    ):
        raise ValueError(
            "Marian checkpoints with a separate target vocabulary are not "
            f"supported. Received: decoder_vocab_size={config['decoder_vocab_size']!r}"
            f", vocab_size={vocabulary!r}"
        )
    marian = family == "marian"
    start = (generation or {}).get("decoder_start_token_id")
    if start is None:
        start = config.get("decoder_start_token_id")
    if start is None:
        raise ValueError(
            f"This {name} checkpoint has no `decoder_start_token_id`. "
            "Received: decoder_start_token_id=None"
        )
    return dict(
        vocabulary_size=vocabulary + 1,  # + our padding id 0
        num_layers=config["encoder_layers"],
        num_decoder_layers=config["decoder_layers"],
        num_heads=config["encoder_attention_heads"],
        hidden_dim=config["d_model"],
        intermediate_dim=config["encoder_ffn_dim"],
        max_sequence_length=config["max_position_embeddings"],
        dropout=config.get("dropout", 0.1),
        tie_embeddings=True,
        activation=ACTIVATIONS[config.get("activation_function", "gelu")],
        layer_norm_epsilon=1e-5,  # torch.nn.LayerNorm's default, as both use
        position="sinusoidal" if marian else "learned",
        sinusoidal_layout="concatenated",
        position_offset=0 if marian else 2,
        scale_embeddings=bool(config.get("scale_embedding", False)),
        embedding_layer_norm=not marian,
        logits_bias=True,
        decoder_start_token_id=start + 1,
        generation_config=generation_arguments(config, generation, name),
    )


def family_of(model):
    """`"marian"` or `"bart"`: the checkpoint layout a `Seq2Seq` can be
    written in, or a ValueError naming what does not fit either."""
    marian = model.position == "sinusoidal"
    expected = {
        "tie_embeddings": (True, None),
        "target_vocabulary_size": (None,),
        "logits_bias": (True,),
        "decoder_start_token_id": "set",
        "layer_norm_epsilon": (1e-5,),
    }
    if marian:
        expected.update(
            sinusoidal_layout=("concatenated",),
            embedding_layer_norm=(False,),
        )
    else:
        expected.update(position_offset=(2,), embedding_layer_norm=(True,))
    for key, allowed in expected.items():
        value = getattr(model, key)
        if (allowed == "set" and value is None) or (
            allowed != "set" and value not in allowed
        ):
            raise ValueError(
                "save_pretrained writes a Seq2Seq as a Marian or BART checkpoint: "
                "tied shared embeddings, logits_bias=True, a decoder_start_token_id, "
                "layer_norm_epsilon=1e-5, and Marian's concatenated sinusoids or "
                f"BART's offset-2 learned positions with an embedding LayerNorm. "
                f"Received: {key}={value!r}"
            )
    if model.activation not in ACTIVATIONS.values():
        raise ValueError(
            f"`activation` {model.activation!r} has no Hugging Face name "
            f"(supported: {sorted(set(ACTIVATIONS.values()))})."
        )
    return "marian" if marian else "bart"


def arguments_to_config(model, family):
    """The Hugging Face `config.json` and `generation_config.json` of a
    `Seq2Seq` in `family`'s layout."""
    generation = generation_settings(model)
    end = generation.setdefault("eos_token_id", 0 if family == "marian" else 2)
    if family == "marian":  # Marian's pad is its decoder start token
        generation["pad_token_id"] = generation["decoder_start_token_id"]
    else:
        generation.update(pad_token_id=1, bos_token_id=0)
    activation = {"silu": "swish"}.get(model.activation, model.activation)
    vocabulary = model.vocabulary_size - 1
    config = {
        "architectures": list(ARCHITECTURES[family]),
        "model_type": family,
        "vocab_size": vocabulary,
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
        "eos_token_id": end,
        "forced_eos_token_id": generation.get("forced_eos_token_id"),
        "init_std": 0.02,
    }
    if family == "marian":
        # Marian's pad is its decoder start token.
        config.update(
            pad_token_id=generation["decoder_start_token_id"],
            decoder_vocab_size=vocabulary,
            share_encoder_decoder_embeddings=True,
        )
    else:
        config.update(pad_token_id=1, bos_token_id=0)
        if "forced_bos_token_id" in generation:
            config["forced_bos_token_id"] = generation["forced_bos_token_id"]
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


def _attention_pairs(prefix, attention, heads, size):
    project, project_bias, output = checkpoint.head_converters(heads, size)
    pairs = []
    for name, layer in [
        ("q_proj", attention.query_dense),
        ("k_proj", attention.key_dense),
        ("v_proj", attention.value_dense),
    ]:
        pairs += [
            (f"{prefix}.{name}.weight", layer.kernel, project),
            (f"{prefix}.{name}.bias", layer.bias, project_bias),
        ]
    return pairs + [
        (f"{prefix}.out_proj.weight", attention.output_dense.kernel, output),
        (f"{prefix}.out_proj.bias", attention.output_dense.bias, SAME),
    ]


def _feedforward_pairs(prefix, block):
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
    for i, block in enumerate(model.encoder_blocks):
        prefix = f"model.encoder.layers.{i}"
        pairs += _attention_pairs(
            f"{prefix}.self_attn", block.self_attention_layer, heads, size
        )
        pairs += checkpoint.norm_pairs(
            f"{prefix}.self_attn_layer_norm", block.self_attention_layer_norm
        )
        pairs += _feedforward_pairs(prefix, block)
    for i, block in enumerate(model.decoder_blocks):
        prefix = f"model.decoder.layers.{i}"
        pairs += _attention_pairs(
            f"{prefix}.self_attn", block.self_attention_layer, heads, size
        )
        pairs += checkpoint.norm_pairs(
            f"{prefix}.self_attn_layer_norm", block.self_attention_layer_norm
        )
        pairs += _attention_pairs(
            f"{prefix}.encoder_attn", block.cross_attention_layer, heads, size
        )
        pairs += checkpoint.norm_pairs(
            f"{prefix}.encoder_attn_layer_norm", block.cross_attention_layer_norm
        )
        pairs += _feedforward_pairs(prefix, block)
    return pairs


def _key(weights, name):
    """The checkpoint's key for `name` (`BartModel`-style keys lack the
    `model.` prefix)."""
    for candidate in (name, name.removeprefix("model.")):
        if candidate in weights:
            return candidate
    raise ValueError(
        f"The checkpoint has no tensor {name!r}; it does not look like a "
        "checkpoint of its config.json's sizes."
    )


# Tied copies of the shared table, and Marian's sinusoid buffers, carry no
# weights of their own.
COPIES = ("embed_tokens.weight", "lm_head.weight")
# fairseq conversions carry `.version` buffers, which transformers ignores.
BUFFERS = (".version",)


def build(config, weights, generation=None):
    """Our `Seq2Seq` of a Marian or BART checkpoint, weights in place."""
    arguments = config_to_arguments(config, generation)
    if _key_or_none(weights, "model.shared.weight") is None:
        for copy in (
            "model.encoder.embed_tokens.weight",
            "encoder.embed_tokens.weight",
        ):
            if copy in weights:  # some exports keep only a tied copy
                weights = {**weights, "model.shared.weight": weights[copy]}
                break
    shared = weights.get(_key_or_none(weights, "model.shared.weight"))
    for key in [k for k in weights if k.endswith(COPIES)]:
        if (
            shared is None
            or weights[key].shape != shared.shape
            or not np.array_equal(weights[key], shared)
        ):
            raise ValueError(
                f"The checkpoint's {key!r} differs from its shared token table; "
                "kt.models.Seq2Seq ties them (untied embeddings are not supported)."
            )
    ignored = (
        COPIES
        + BUFFERS
        + (("embed_positions.weight",) if config["model_type"] == "marian" else ())
    )
    model = Seq2Seq(**arguments)
    if "final_logits_bias" not in weights:  # some exports leave the zeros out
        weights = {**weights, "final_logits_bias": np.zeros((1, config["vocab_size"]))}
    checkpoint.assign(_pairs(model), weights, _key, ignored)
    return model


def _key_or_none(weights, name):
    try:
        return _key(weights, name)
    except ValueError:
        return None


def export(model):
    """`(config, generation settings, tensors)` of a Marian- or BART-shaped
    `Seq2Seq`, in Hugging Face's names and layouts."""
    family = family_of(model)
    config, generation = arguments_to_config(model, family)
    return config, generation, checkpoint.tensors(_pairs(model))
