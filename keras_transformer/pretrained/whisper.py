"""Hugging Face Whisper checkpoints (`model_type: whisper`,
`WhisperForConditionalGeneration`: tiny ... large-v3) <-> `kt.models.Whisper`.

Loading renames and reshapes tensors:

- torch's `nn.Linear` weights are `(out, in)`; our attention projections
  are `(E, H, D)` (query, key, value) and `(H, D, E)` (output), the
  feed-forward kernels `(in, out)`; torch's `Conv1d` weights `(out, in, k)`
  are Keras' `(k, in, out)`;
- ids: ours are the checkpoint's plus one (id 0 is padding): the token
  table holds exactly the checkpoint's rows, looked up at id - 1;
- `proj_out` is the token table (tied), not a tensor of its own.

`generation_config.json` (or, without one, `config.json`'s legacy keys)
gives `generate`'s settings (end token, `max_length`, `suppress_tokens`,
`begin_suppress_tokens`) and Whisper's own (`lang_to_id`, `task_to_id`,
`no_timestamps_token_id`, `max_initial_timestamp_index` ...), which the
model keeps as `speech_settings`, in our ids. `dtype="bfloat16"` (or
`"float16"`) builds the model under that dtype policy. A config value that
we do not compute exactly is refused by name before any weight is read.

Shape legend: E hidden size, H heads, D head size, M mel bins.
"""

from keras_transformer.models.initializers import (
    global_dtype_policy,
    placeholder_weights,
)
from keras_transformer.models.whisper import Whisper
from keras_transformer.pretrained import checkpoint, keys
from keras_transformer.pretrained.family import Family
from keras_transformer.pretrained.generation_config import (
    generation_arguments,
    generation_settings,
)
from keras_transformer.pretrained.seq2seq import attention_pairs, feedforward_pairs
from keras_transformer.text import hf_whisper

NAME = "Whisper"
ARCHITECTURE = "WhisperForConditionalGeneration"
DTYPES = ("float32", "bfloat16", "float16")
# Config values we compute exactly: key -> the allowed values (the first is
# the default of a missing key).
REQUIRED = {
    "activation_function": ("gelu",),
    "scale_embedding": (False,),
    "tie_word_embeddings": (True,),
    "quantization_config": (None,),
}
# Keys of config.json that must agree with another (we build one size).
EQUAL = {
    "decoder_attention_heads": "encoder_attention_heads",
    "decoder_ffn_dim": "encoder_ffn_dim",
}
SAME = checkpoint.SAME
LINEAR = (lambda w: w.T, lambda w: w.T)
CONVOLUTION = (  # torch (out, in, k) <-> Keras (k, in, out)
    lambda w: w.transpose(2, 1, 0),
    lambda w: w.transpose(2, 1, 0),
)
# Whisper's decoding settings beside generate's: ids shift by one; the
# others are kept as they are.
ID_SETTINGS = ("no_timestamps_token_id", "prev_sot_token_id")
ID_MAPS = ("lang_to_id", "task_to_id")
KEPT_SETTINGS = (
    "max_initial_timestamp_index",
    "is_multilingual",
    "alignment_heads",
    "return_timestamps",
    "forced_decoder_ids",
)


def load(path, dtype=None):
    """Our `Whisper` of a Whisper folder, weights in place, with the
    folder's generation settings. `dtype`: None or `"float32"`,
    `"bfloat16"`, `"float16"` (the model built under that dtype policy)."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(
            f"`dtype` must be None or one of {list(DTYPES)}. Received: dtype={dtype!r}"
        )
    config = checkpoint.read_config(path)
    generation = checkpoint.read_generation_config(path)
    arguments = config_to_arguments(config, generation)  # checks first
    return build(arguments, checkpoint.read_weights(path, dtype=None), dtype)


def save(model, path, tokenizer=None):
    """Writes a `Whisper` (and its `kt.text.WhisperTokenizer`) as a Whisper
    folder; everything is checked before anything is written."""
    if tokenizer is not None:
        hf_whisper.hf_writers.check_savable(tokenizer, hf_whisper.WhisperTokenizer)
        checkpoint.check_tokenizer_size(
            tokenizer.vocabulary_size(), model.vocabulary_size, tokenizer
        )
    config, generation = arguments_to_config(model)
    tensors = checkpoint.tensors(weight_pairs(model))
    path = checkpoint.write_folder(path, config, tensors, generation)
    if tokenizer is not None:
        hf_whisper.save_tokenizer(tokenizer, path)
    return path


def _split_settings(config, generation):
    """`(generate's settings, Whisper's own settings)` of a folder: from
    `generation_config.json`, or `config.json`'s legacy keys without one."""
    source = dict(generation if generation is not None else config)
    speech = {}
    for key in (*ID_SETTINGS, *ID_MAPS, *KEPT_SETTINGS):
        value = source.pop(key, None)
        if value is None:
            continue
        if key in ID_SETTINGS:
            value += 1
        elif key in ID_MAPS:
            value = {name: id + 1 for name, id in value.items()}
        speech[key] = value
    if generation is None:  # generation_arguments reads config.json's keys
        source = {k: v for k, v in source.items() if k not in KEPT_SETTINGS}
        return None, source, speech
    return source, config, speech


def config_to_arguments(config, generation=None):
    """`Whisper` constructor arguments from a Hugging Face `config.json`
    (and `generation_config.json`), every value checked."""
    checkpoint.check_architecture(config, NAME, (ARCHITECTURE,))
    checkpoint.check_supported(config, NAME, REQUIRED)
    for key, other in EQUAL.items():
        if config.get(key, config[other]) != config[other]:
            raise ValueError(
                f"This {NAME} checkpoint's `{key}` must equal its `{other}` "
                f"({config[other]}). Received: {key}={config[key]!r}"
            )
    generation, legacy, speech = _split_settings(config, generation)
    start = (generation or legacy).get(
        "decoder_start_token_id", config.get("decoder_start_token_id", 50257)
    )
    return dict(
        vocabulary_size=config["vocab_size"] + 1,  # + our padding id 0
        num_layers=config["encoder_layers"],
        num_heads=config["encoder_attention_heads"],
        hidden_dim=config["d_model"],
        intermediate_dim=config["encoder_ffn_dim"],
        num_mel_bins=config.get("num_mel_bins", 80),
        num_decoder_layers=config.get("decoder_layers") or config["encoder_layers"],
        max_source_positions=config.get("max_source_positions", 1500),
        max_sequence_length=config.get("max_target_positions", 448),
        dropout=config.get("dropout", 0.0),
        decoder_start_token_id=start + 1,
        generation_config=generation_arguments(legacy, generation, NAME),
        speech_settings=speech or None,
    )


def arguments_to_config(model):
    """The Hugging Face `config.json` and `generation_config.json` of a
    `Whisper`."""
    generation = generation_settings(model)
    end = generation.setdefault("eos_token_id", 50257)
    end = end[0] if isinstance(end, list) else end
    generation.update(pad_token_id=end, bos_token_id=end)
    suppressed = generation.pop("bad_words_ids", None)  # Whisper's name for them
    if suppressed:
        generation["suppress_tokens"] = [t for [t] in suppressed]
    for key, value in (model.speech_settings or {}).items():
        if key in ID_SETTINGS:
            value -= 1
        elif key in ID_MAPS:
            value = {name: id - 1 for name, id in value.items()}
        generation[key] = value
    config = {
        "architectures": [ARCHITECTURE],
        "model_type": "whisper",
        "vocab_size": model.vocabulary_size - 1,
        "num_mel_bins": model.num_mel_bins,
        "d_model": model.hidden_dim,
        "encoder_layers": model.num_layers,
        "decoder_layers": model.num_decoder_layers or model.num_layers,
        "encoder_attention_heads": model.num_heads,
        "decoder_attention_heads": model.num_heads,
        "encoder_ffn_dim": model.intermediate_dim,
        "decoder_ffn_dim": model.intermediate_dim,
        "max_source_positions": model.max_source_positions,
        "max_target_positions": model.max_sequence_length,
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "dropout": model.dropout,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "is_encoder_decoder": True,
        "use_cache": True,
        "bos_token_id": end,
        "eos_token_id": end,
        "pad_token_id": end,
        "decoder_start_token_id": generation["decoder_start_token_id"],
        "dtype": str(model.token_embedding.embeddings.dtype),
    }
    return config, generation


def _block_pairs(prefix, block, cross):
    heads = block.num_heads
    size = block.self_attention_layer.key_dim
    attentions = [("self_attn", "self_attention")]
    if cross:
        attentions.append(("encoder_attn", "cross_attention"))
    pairs = []
    for theirs, ours in attentions:
        pairs += attention_pairs(
            f"{prefix}.{theirs}", getattr(block, f"{ours}_layer"), heads, size
        )
        pairs += checkpoint.norm_pairs(
            f"{prefix}.{theirs}_layer_norm", getattr(block, f"{ours}_layer_norm")
        )
    return pairs + feedforward_pairs(prefix, block)


def weight_pairs(model):
    """`(Hugging Face name, our variable, (to ours, to theirs))` for every
    tensor of a `Whisper`."""
    pairs = []
    for conv in ("conv1", "conv2"):
        layer = getattr(model, conv)
        pairs += [
            (f"model.encoder.{conv}.weight", layer.kernel, CONVOLUTION),
            (f"model.encoder.{conv}.bias", layer.bias, SAME),
        ]
    pairs.append(
        (
            "model.encoder.embed_positions.weight",
            model.encoder_position_embedding.embeddings,
            SAME,
        )
    )
    for i, block in enumerate(model.encoder_blocks):
        pairs += _block_pairs(f"model.encoder.layers.{i}", block, cross=False)
    pairs += checkpoint.norm_pairs("model.encoder.layer_norm", model.encoder_norm)
    pairs += [
        (
            "model.decoder.embed_tokens.weight",
            model.token_embedding.embeddings,
            SAME,
        ),
        (
            "model.decoder.embed_positions.weight",
            model.decoder_position_embedding.embeddings,
            SAME,
        ),
    ]
    for i, block in enumerate(model.decoder_blocks):
        pairs += _block_pairs(f"model.decoder.layers.{i}", block, cross=True)
    pairs += checkpoint.norm_pairs("model.decoder.layer_norm", model.decoder_norm)
    return pairs


def peft_modules(model):
    """`{PEFT module name: [(our layer, None)]}` of a `Whisper`: the
    attention projections (`q_proj`, `k_proj`, `v_proj`, `out_proj`) and
    the feed-forward's (`fc1`, `fc2`), in `weight_pairs`' names."""
    modules = {}
    for side in ("encoder", "decoder"):
        for i, block in enumerate(getattr(model, f"{side}_blocks")):
            prefix = f"model.{side}.layers.{i}"
            attentions = [("self_attn", block.self_attention_layer)]
            if side == "decoder":
                attentions.append(("encoder_attn", block.cross_attention_layer))
            for name, attention in attentions:
                for short, layer in [
                    ("q_proj", attention.query_dense),
                    ("k_proj", attention.key_dense),
                    ("v_proj", attention.value_dense),
                    ("out_proj", attention.output_dense),
                ]:
                    modules[f"{prefix}.{name}.{short}"] = [(layer, None)]
            modules[f"{prefix}.fc1"] = [(block.feedforward_intermediate_dense, None)]
            modules[f"{prefix}.fc2"] = [(block.feedforward_output_dense, None)]
    return modules


def _key(weights, name):
    # `WhisperModel`-style keys lack the `model.` prefix.
    return keys.find_key(weights, name, (name, name.removeprefix("model.")))


def build(arguments, weights, dtype=None):
    """Our `Whisper` of checked constructor `arguments` and a checkpoint's
    tensors, built under `dtype` (None: float32)."""
    with global_dtype_policy(dtype or "float32"), placeholder_weights():
        model = Whisper(**arguments)
    table = weights[_key(weights, "model.decoder.embed_tokens.weight")]
    keys.check_tied(
        weights, "proj_out.weight", table,
        "The checkpoint's 'proj_out.weight' differs from its token table, "
        "which kt.models.Whisper ties to it.",
    )  # fmt: skip
    pairs = checkpoint.in_variable_dtype(weight_pairs(model))
    checkpoint.assign(pairs, weights, _key, ("proj_out.weight",))
    return model


FAMILY = Family(
    name=NAME,
    model_types=("whisper",),
    classes=(Whisper,),
    architectures={ARCHITECTURE: (Whisper, "SpeechRecognizer")},
    load=load,
    save=save,
    default_architectures={"whisper": ARCHITECTURE},
    dtypes=DTYPES,
    tokenizers={"whisper": hf_whisper.from_folder},
    peft_modules=peft_modules,
    # peft's causal and seq2seq wrappers pass `input_ids`, which
    # WhisperForConditionalGeneration does not take: the plain PeftModel.
    peft_task_type=None,
)
