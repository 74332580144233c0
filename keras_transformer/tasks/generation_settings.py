"""A `TextGenerator`'s generation settings: the keys of a folder's
`generation_config.json` that `generate` and `chat` take as their defaults
(as transformers' `generate` and `pipeline` take them), and how a call's own
arguments win over them."""

import os

from keras_transformer import _validation as validation

# The generation_config.json settings `generate` takes as its defaults, as
# transformers' `generate` and `pipeline` do, with transformers' values for
# those a folder that samples leaves out.
GENERATION_KEYS = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty")
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}


def of_call(generation_config, sampler, repetition_penalty, sampler_args):
    """`(sampler, repetition_penalty, sampler_args)` of a call: its own,
    with the task's `generation_config` where the call leaves them out (a
    `sampler` of None: the config's where it samples, else greedy, as the
    seq2seq tasks read None)."""
    settings = generation_config
    if repetition_penalty is None and settings.get("repetition_penalty", 1.0) != 1:
        repetition_penalty = settings["repetition_penalty"]
    if sampler is not None or not settings.get("do_sample"):
        return sampler or "greedy", repetition_penalty, sampler_args
    arguments = {k: settings.get(k, v) for k, v in SAMPLING_DEFAULTS.items()}
    return "top_p", repetition_penalty, {**arguments, **sampler_args}


def read(path, config):
    """`(end ids, settings)` of a folder (`path`, its `config.json` as
    `config`): the end id(s) in our ids (the checkpoint's plus one) or None,
    and the `GENERATION_KEYS` its `generation_config.json` sets.
    transformers reads generation_config.json first."""
    generation = os.path.join(path, "generation_config.json")
    generation = validation.read_json(generation, missing_ok=True) or {}
    end = generation.get("eos_token_id", config.get("eos_token_id"))
    found = {k: generation[k] for k in GENERATION_KEYS if generation.get(k) is not None}
    if end is None or end == []:
        return None, found
    return ([e + 1 for e in end] if isinstance(end, list) else end + 1), found


def check(settings):
    """`settings` as a dict of `GENERATION_KEYS`, or a ValueError naming
    the argument."""
    if settings is None:
        return {}
    if not isinstance(settings, dict) or set(settings) - set(GENERATION_KEYS):
        raise ValueError(
            f"`generation_config` must be None or a dict with some of "
            f"{list(GENERATION_KEYS)}. Received: generation_config={settings!r}"
        )
    return dict(settings)
