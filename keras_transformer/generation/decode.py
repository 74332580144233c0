"""`generate`: autoregressive decoding with a compiled, fixed-shape KV cache.

The prompt runs through the model once to fill every block's cache; then a
`tf.while_loop` of one-token steps, compiled with XLA, writes each new
token's keys and values into the cache at its index. The model is asked for
each step through the protocol of `kt.models.CausalLM` / `kt.models.Seq2SeqLM`
(`start_decoding`, `next_logits`), which call the same layers through the
same forward pass as the model itself. `decode_function` builds that loop
for `generate` and for every exporter; `compiled_decode_fn` keeps one
compiled copy per model and sampler, which retraces only for a new batch
size or length bucket.

Shape legend: B batch, P prompt length, L buffer length (a bucket >= P +
max_new_tokens), S source length.
"""

import weakref

import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation.samplers import BeamSampler, get_sampler
from keras_transformer.models.generative import CausalLM, Seq2SeqLM

BUCKET = 32  # buffer and source lengths are rounded up to a multiple of this

_COMPILED = weakref.WeakKeyDictionary()


def generate(
    model,
    inputs,
    max_new_tokens,
    sampler="greedy",
    end_token_id=None,
    use_cache=True,
    seed=None,
    **sampler_args,
):
    """Generates tokens with a `GPT2` or `Seq2Seq` model.

    Every argument is checked before any work: ids outside the model's
    vocabulary raise a ValueError naming the id (an embedding lookup under
    XLA would silently clamp them).

    Args:
        model: a `kt.models.GPT2` or `kt.models.Seq2Seq` (built by
            `kt.models.gpt2` / `seq2seq` or loaded from a `.keras` file), or
            any `kt.models.CausalLM` / `Seq2SeqLM`.
        inputs: GPT: int token ids `(B, P)`, 0-padded on the right (prompts of
            different lengths are fine; each needs at least one token).
            seq2seq: `{"encoder_token_ids": (B, S), "decoder_token_ids":
            (B, P)}`, the decoder ids usually a start token; a model with a
            `decoder_start_token_id` (an imported Marian or BART) may be
            given `encoder_token_ids` alone. An imported model's own
            settings are `**model.generation_config`.
        max_new_tokens: how many tokens to add after the prompt.
        sampler: `"greedy"`, `"temperature"`, `"top_k"`, `"top_p"`, `"beam"`,
            or a `Sampler` instance.
        end_token_id: a sequence stops at this token; later positions are 0.
        use_cache: False recomputes the whole prefix at every step (for
            comparison; same tokens).
        seed: int seed; the same seed gives the same samples.
        **sampler_args: `temperature`, `top_k`, `top_p`, `num_beams`,
            `length_penalty`, `rules`, `early_stopping`, and the options every
            sampler takes: `min_new_tokens`, `no_repeat_ngram_size`,
            `suppressed_token_ids`, `forced_first_token_id`,
            `force_end_token`, `renormalize_logits` (see
            `kt.generation.Sampler`).

    Returns:
        A numpy int32 array `(B, P + max_new_tokens)`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.gpt2(20, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16, max_sequence_length=32)
        >>> kt.generation.generate(model, np.array([[5, 6, 7]]), max_new_tokens=4).shape
        (1, 7)
    """
    check_generative(model, "model")
    sampler = get_sampler(sampler, **sampler_args)
    if isinstance(max_new_tokens, bool) or not isinstance(
        max_new_tokens, int | np.integer
    ):
        raise ValueError(
            f"`max_new_tokens` must be an integer. Received: {max_new_tokens!r}"
        )
    if max_new_tokens < 0:
        raise ValueError(
            f"`max_new_tokens` must be >= 0. Received: max_new_tokens={max_new_tokens}"
        )
    prompt, source = model.generation_inputs(inputs)
    if end_token_id is not None:
        _check_end_token_id(end_token_id, model)
    elif sampler.force_end_token:
        raise ValueError(
            "`force_end_token=True` needs an `end_token_id`. "
            "Received: end_token_id=None"
        )
    for name, token_id in sampler.token_ids():
        _check_token_id(name, token_id, model)
    batch, prompt_length = prompt.shape
    limit = model.max_sequence_length
    total = prompt_length + max_new_tokens
    if total > limit:
        raise ValueError(
            f"The prompt length ({prompt_length}) plus "
            f"`max_new_tokens` ({max_new_tokens}) "
            f"is {total}, beyond the model's max_sequence_length ({limit})."
        )
    if source is not None and source.shape[1] > limit:
        raise ValueError(
            f"`inputs['encoder_token_ids']` has length {source.shape[1]}, beyond "
            f"the model's max_sequence_length ({limit})."
        )
    lengths = np.sum(prompt != 0, axis=1)
    if np.any(lengths == 0):
        raise ValueError(
            "Every prompt needs at least one token. "
            f"Received prompt lengths {lengths.tolist()}"
        )
    if max_new_tokens == 0:
        return prompt
    length = min(limit, -(-total // BUCKET) * BUCKET)
    tokens = np.zeros((batch, length), "int32")
    tokens[:, :prompt_length] = prompt
    if source is not None:
        source = _pad(source, min(limit, -(-source.shape[1] // BUCKET) * BUCKET))
    seed = np.random.default_rng().integers(2**31) if seed is None else seed
    decode = compiled_decode_fn(model, sampler, use_cache)
    output = decode(
        tf.constant(tokens),
        tf.constant(source if source is not None else np.zeros((batch, 1), "int32")),
        tf.constant(int(lengths.min()), tf.int32),
        tf.constant(total, tf.int32),
        tf.constant(-1 if end_token_id is None else end_token_id, tf.int32),
        tf.constant([seed, 0], tf.int32),
    )
    return output.numpy()[:, :total]


def compiled_decode_fn(model, sampler, use_cache=True):
    """`decode_function(model, sampler, use_cache)` as an XLA-compiled
    `tf.function`, built once per model and sampler and reused by `generate`."""
    functions = _COMPILED.setdefault(model, {})
    key = (sampler.config(), use_cache)
    if key not in functions:
        functions[key] = tf.function(
            decode_function(model, sampler, use_cache),
            jit_compile=True,
            reduce_retracing=False,
        )
    return functions[key]


def decode_function(model, sampler, use_cache=True):
    """The decode loop of `model` with `sampler`, as traceable graph code.

    `generate` compiles it (`compiled_decode_fn`); the exporters trace it
    into their SavedModels, with or without XLA.

    Args:
        model: a `kt.models.CausalLM` or `kt.models.Seq2SeqLM` (e.g. `GPT2`,
            `Seq2Seq`).
        sampler: a `kt.generation.Sampler`.
        use_cache: decode with the KV cache (False recomputes the prefix).

    Returns:
        A function `(tokens (B, L), source (B, S), start, stop, end_token_id,
        seed (2,)) -> tokens (B, L)` that fills `tokens[:, start:stop]`;
        `source` is ignored by a decoder-only model, `end_token_id` is -1 for
        none.
    """
    check_generative(model, "model")
    beams = sampler.num_beams if isinstance(sampler, BeamSampler) else 1

    def decode(tokens, source, start, stop, end_token_id, seed):
        if beams > 1:
            tokens = tf.repeat(tokens, beams, axis=0)
            source = tf.repeat(source, beams, axis=0)
        prompt_mask = tokens != 0
        state = model.start_decoding(tokens, source, use_cache)
        # What does not change while decoding (a seq2seq model's encoder
        # output and cross-attention caches) stays out of the loop state:
        # the loop neither carries it nor reorders it for beam search.
        varying, fixed = model.split_decoding_state(state)

        def next_fn(tokens, varying, index):
            logits, state = model.next_logits(
                tokens, model.join_decoding_state(varying, fixed), index, use_cache
            )
            return logits, model.split_decoding_state(state)[0]

        return sampler(
            next_fn, tokens, varying, start, stop, prompt_mask, end_token_id, seed
        )

    return decode


def check_generative(model, name):
    """Raises a ValueError unless `model` can be decoded with."""
    if not isinstance(model, CausalLM | Seq2SeqLM):
        raise ValueError(
            f"`{name}` must be a kt.models.CausalLM (such as kt.models.GPT2) or a "
            f"kt.models.Seq2SeqLM (such as kt.models.Seq2Seq). Received: "
            f"{name}={validation.describe(model)}"
        )


def _check_end_token_id(end_token_id, model):
    _check_token_id("end_token_id", end_token_id, model)


def _check_token_id(name, token_id, model):
    vocabulary_size = (
        model.vocabulary_size
        if isinstance(model, CausalLM)
        else model.decoder_vocabulary_size
    )
    if (
        isinstance(token_id, bool)
        or not isinstance(token_id, int | np.integer)
        or not 0 < token_id < vocabulary_size
    ):
        raise ValueError(
            f"`{name}` must be an integer in [1, {vocabulary_size}) (the "
            "model's vocabulary; 0 is padding). "
            f"Received: {name}={token_id!r}"
        )


def _pad(ids, length):
    padded = np.zeros((ids.shape[0], length), "int32")
    padded[:, : ids.shape[1]] = ids
    return padded
