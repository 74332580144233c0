"""A checkpoint's generation settings (`generation_config.json`, or the
legacy keys of `config.json`) <-> `kt.generation.generate` keyword
arguments in our ids (the checkpoint's plus one), for the encoder-decoders
of `keras_transformer.pretrained.seq2seq`.

transformers reads `generation_config.json` alone when a folder has one,
and the legacy keys of `config.json` otherwise; so do we. A setting we do
not reproduce is refused with a ValueError naming it.
"""

# Keys of generation_config.json (or legacy config.json keys) we follow.
GENERATION_KEYS = (
    "max_length",
    "max_new_tokens",
    "min_length",
    "min_new_tokens",
    "num_beams",
    "length_penalty",
    "early_stopping",
    "no_repeat_ngram_size",
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "renormalize_logits",
    "eos_token_id",
    "decoder_start_token_id",
    "do_sample",
    "num_beam_groups",
    "repetition_penalty",
    "force_bos_token_to_be_generated",
    "bos_token_id",
)
# Settings that change what transformers generates and that we do not
# reproduce: refused unless they hold their default (the value here).
REFUSED = {
    "num_beam_groups": 1,
    "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0,
    "exponential_decay_length_penalty": None,
    "sequence_bias": None,
    "force_words_ids": None,
    "constraints": None,
    "forced_decoder_ids": None,
    "num_return_sequences": 1,
    "diversity_penalty": 0.0,
    "penalty_alpha": None,
    "max_time": None,
    "stop_strings": None,
}
MAX_LENGTH = (
    20  # transformers' default when neither max_length nor max_new_tokens is set
)


def generation_arguments(config, generation, name):
    """`kt.generation.generate` keyword arguments (our ids) of a
    checkpoint's generation settings; a ValueError names a setting we do
    not reproduce."""
    # transformers reads generation_config.json alone when there is one, and
    # the legacy keys of config.json otherwise.
    if generation is not None:
        settings = {k: v for k, v in generation.items() if v is not None}
    else:
        keys = (*GENERATION_KEYS, *REFUSED)
        settings = {k: config[k] for k in keys if config.get(k) is not None}
        if settings.pop("force_bos_token_to_be_generated", False):  # legacy BART
            settings.setdefault("forced_bos_token_id", config.get("bos_token_id", 0))

    def unsupported(key, why):
        raise ValueError(
            f"This {name} checkpoint's generation setting `{key}` is not "
            f"supported ({why}). Received: {key}={settings[key]!r}"
        )

    if settings.get("do_sample"):
        unsupported("do_sample", "greedy and beam search are reproduced")
    for key, default in REFUSED.items():
        if key in settings and settings[key] not in (default, [], {}):
            unsupported(key, "not implemented")
    end = settings.get("eos_token_id", config.get("eos_token_id"))
    # One id, or several (any of them ends a sequence, as in transformers).
    ends = list(dict.fromkeys(end)) if isinstance(end, list) else [end]
    if end is None or not ends:
        raise ValueError(
            f"This {name} checkpoint has no `eos_token_id`. "
            f"Received: eos_token_id={end!r}"
        )
    if not all(isinstance(e, int) and not isinstance(e, bool) for e in ends):
        raise ValueError(
            f"This {name} checkpoint's `eos_token_id` must be an id or a list "
            f"of ids. Received: eos_token_id={end!r}"
        )
    ours = [e + 1 for e in ends]
    arguments = {"end_token_id": ours[0] if len(ours) == 1 else ours}
    if "max_new_tokens" in settings:
        arguments["max_new_tokens"] = settings["max_new_tokens"]
    else:  # max_length counts the decoder start token
        arguments["max_new_tokens"] = settings.get("max_length", MAX_LENGTH) - 1
    beams = settings.get("num_beams", 1)
    if beams > 1:
        arguments.update(
            sampler="beam",
            rules="transformers",
            num_beams=beams,
            length_penalty=float(settings.get("length_penalty", 1.0)),
            early_stopping=settings.get("early_stopping", False),
        )
    else:
        arguments["sampler"] = "greedy"
    # min_length counts the start token; with both, both hold.
    least = max(settings.get("min_new_tokens", 0), settings.get("min_length", 0) - 1)
    if least > 0:
        arguments["min_new_tokens"] = least
    if settings.get("no_repeat_ngram_size"):
        arguments["no_repeat_ngram_size"] = settings["no_repeat_ngram_size"]
    suppressed = list(settings.get("suppress_tokens") or [])
    for words in settings.get("bad_words_ids") or []:
        if len(words) == 1 and words[0] in ends:  # transformers drops end ids
            continue
        if len(words) != 1:
            unsupported("bad_words_ids", "single-token entries only")
        suppressed.append(words[0])
    if suppressed:
        arguments["suppressed_token_ids"] = sorted({t + 1 for t in suppressed})
    if settings.get("begin_suppress_tokens"):
        begin = settings["begin_suppress_tokens"]
        arguments["begin_suppressed_token_ids"] = [t + 1 for t in begin]
    if settings.get("forced_bos_token_id") is not None:
        arguments["forced_first_token_id"] = settings["forced_bos_token_id"] + 1
    forced_end = settings.get("forced_eos_token_id")
    if forced_end is not None:
        forced_ends = forced_end if isinstance(forced_end, list) else [forced_end]
        if set(forced_ends) != set(ends):
            unsupported("forced_eos_token_id", "it must be the eos_token_id")
        arguments["force_end_token"] = True
    if settings.get("renormalize_logits"):
        arguments["renormalize_logits"] = True
    if settings.get("repetition_penalty", 1.0) != 1.0:
        arguments["repetition_penalty"] = float(settings["repetition_penalty"])
    return arguments


def generation_settings(model):
    """The `generation_config.json` of a model's `generation_config` (ids
    back to the checkpoint's)."""
    arguments = dict(model.generation_config or {})
    settings = {"decoder_start_token_id": model.decoder_start_token_id - 1}
    end = arguments.get("end_token_id")
    if isinstance(end, list | tuple):
        settings["eos_token_id"] = [e - 1 for e in end]
    elif end is not None:
        settings["eos_token_id"] = end - 1
    if "max_new_tokens" in arguments:
        settings["max_length"] = arguments["max_new_tokens"] + 1
    if arguments.get("sampler") == "beam":
        settings["num_beams"] = arguments.get("num_beams", 4)
        # transformers writes only the settings that differ from its defaults.
        for key, default in [("length_penalty", 1.0), ("early_stopping", False)]:
            if arguments.get(key, default) != default:
                settings[key] = arguments[key]
    if arguments.get("min_new_tokens"):
        settings["min_length"] = arguments["min_new_tokens"] + 1
    if arguments.get("no_repeat_ngram_size"):
        settings["no_repeat_ngram_size"] = arguments["no_repeat_ngram_size"]
    if arguments.get("suppressed_token_ids"):
        settings["bad_words_ids"] = [[t - 1] for t in arguments["suppressed_token_ids"]]
    if arguments.get("begin_suppressed_token_ids"):
        begin = arguments["begin_suppressed_token_ids"]
        settings["begin_suppress_tokens"] = [t - 1 for t in begin]
    if arguments.get("forced_first_token_id") is not None:
        settings["forced_bos_token_id"] = arguments["forced_first_token_id"] - 1
    if arguments.get("force_end_token") and "eos_token_id" in settings:
        settings["forced_eos_token_id"] = settings["eos_token_id"]
    if arguments.get("renormalize_logits"):
        settings["renormalize_logits"] = True
    if arguments.get("repetition_penalty") is not None:
        settings["repetition_penalty"] = arguments["repetition_penalty"]
    return settings
