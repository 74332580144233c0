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

import functools
import inspect
import logging

import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation.compiled import CompiledFunctions
from keras_transformer.generation.registry import get_sampler
from keras_transformer.generation.speculative import (
    check_speculation,
    speculative_decode_function,
)
from keras_transformer.models.decoding import CausalLM, Seq2SeqLM

BUCKET = 32  # source lengths are rounded up to a multiple of this
# Buffer lengths are powers of two from this one (or the model's limit): a
# one-shot request attends over at most twice the positions it needs (each
# step reads the whole buffer's cache: from 512, a GPT-2's 256 positions at
# batch 8 decoded 3.5x slower).
MIN_BUFFER = 32
# A conversation's buffers start here (`TextGenerator.chat`): its turns,
# growing prompts, then reuse one compiled loop up to this many positions.
CONVERSATION_BUFFER = 512
# End ids reach a loop as an int32 vector of this length (or the next power
# of two), -1 padded: one compiled loop serves one end id or a few.
END_IDS = 4

logger = logging.getLogger(__name__)

_COMPILED = CompiledFunctions()  # per model, until its variables change


def generate(
    model,
    inputs,
    max_new_tokens,
    sampler="greedy",
    end_token_id=None,
    use_cache=True,
    seed=None,
    *,
    draft_model=None,
    num_speculative_tokens=None,
    prompt_lookup_num_tokens=None,
    prompt_lookup_max_ngram_size=3,
    min_buffer_length=None,
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
            (B, P)}` (the source under the model's `source_name`, as its
            `check_source` takes it), the decoder ids usually a start
            token; a model with a `decoder_start_token_id` (an imported
            Marian or BART) may be given `encoder_token_ids` alone. An
            imported model's own settings are `**model.generation_config`.
        max_new_tokens: how many tokens to add after the prompt.
        sampler: `"greedy"`, `"temperature"`, `"top_k"`, `"top_p"`, `"beam"`,
            or a `Sampler` instance.
        end_token_id: a sequence stops at this token (or at any of a list
            of them); later positions are 0.
        use_cache: False recomputes the whole prefix at every step (for
            comparison; same tokens).
        seed: int seed; the same seed gives the same samples.
        draft_model: speculative decoding (GPT only): a smaller
            `kt.models.CausalLM` over the same vocabulary proposes
            `num_speculative_tokens` tokens per step with its own KV cache,
            and `model` checks them all in one pass. Greedy output is plain
            greedy decoding's, token for token; sampled output has the
            target's distribution (see `kt.generation.speculative`).
        num_speculative_tokens: tokens the draft proposes per step (>= 1;
            4 by default with a `draft_model`).
        prompt_lookup_num_tokens: prompt-lookup decoding (GPT only, no
            draft): propose this many tokens (>= 1) that followed the most
            recent earlier occurrence of the last n tokens, with the same
            guarantees as `draft_model`. Helps on text that repeats its
            input (quotes, summaries, code, edits).
        prompt_lookup_max_ngram_size: the longest n tried (n goes down to 1
            until a match is found).
        min_buffer_length: the least length of the decode buffer (the
            prompt and the new tokens, rounded up to a power of two from
            it; 32 by default). Each length is one compiled loop: a caller
            whose prompts keep growing (a conversation; `TextGenerator.chat`
            passes `CONVERSATION_BUFFER`, 512) compiles fewer loops with a
            larger one, at the cost of every step reading a longer cache.
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
    speculation = check_speculation(
        model,
        sampler,
        use_cache,
        draft_model,
        num_speculative_tokens,
        prompt_lookup_num_tokens,
        prompt_lookup_max_ngram_size,
    )
    # Speculative steps write up to K positions past the last one kept.
    room = speculation["num_tokens"] if speculation else 0
    request = check_request(
        model, inputs, max_new_tokens, sampler, end_token_id, seed, room,
        min_buffer_length,
    )  # fmt: skip
    if request is None:  # max_new_tokens == 0
        return model.generation_inputs(inputs)[0]
    if speculation:
        decode = compiled_speculative_fn(
            model, sampler, shapes=request_shapes(request), **speculation
        )
    else:
        decode = compiled_decode_fn(model, sampler, use_cache, request_shapes(request))
    output = decode(
        *(tf.constant(request[key]) for key in REQUEST_KEYS),
    )
    if speculation:
        output, _ = output  # the tokens, without the step counts
    return output.numpy()[:, : request["stop"]]


# The arguments of a decode function, in order (see `decode_function`).
REQUEST_KEYS = ("tokens", "source", "start", "stop", "end_token_id", "seed")


def check_request(
    model, inputs, max_new_tokens, sampler, end_token_id, seed, room=0,
    min_buffer_length=None,
):  # fmt: skip
    """`generate`'s checks of a request, before any work, and the numpy
    arguments of a decode function (a dict keyed by `REQUEST_KEYS`, plus
    `prompt_mask`); None when `max_new_tokens` is 0.

    `end_token_id` (None, an id, or a list of ids) becomes an int32 vector
    of `END_IDS` (or the next power of two) ids, -1 padded; `room` is how
    many positions past the last one a decode loop may write
    (speculation); `min_buffer_length` is `generate`'s."""
    max_new_tokens = validation.check_max_new_tokens(max_new_tokens)
    if min_buffer_length is not None:
        validation.check_positive_int("min_buffer_length", min_buffer_length)
    prompt, source = model.generation_inputs(inputs)
    vocabulary_size = model.output_vocabulary_size
    end_ids = check_end_token_ids(end_token_id, vocabulary_size)
    if end_ids is None and sampler.needs_end_token:
        raise ValueError(
            "`force_end_token=True` (a processor that forces the end) needs an "
            "`end_token_id`. "
            "Received: end_token_id=None"
        )
    for name, token_id in sampler.token_ids():
        validation.check_token_id(name, token_id, vocabulary_size)
    batch, prompt_length = prompt.shape
    limit = model.max_sequence_length
    total = prompt_length + max_new_tokens
    if total > limit:
        raise ValueError(
            f"The prompt length ({prompt_length}) plus "
            f"`max_new_tokens` ({max_new_tokens}) "
            f"is {total}, beyond the model's max_sequence_length ({limit}). "
            f"Received: max_new_tokens={max_new_tokens!r}, prompt of shape "
            f"{tuple(prompt.shape)}"
        )
    lengths = np.sum(prompt != 0, axis=1)
    if np.any(lengths == 0):
        raise ValueError(
            "Every prompt needs at least one token. "
            f"Received prompt lengths {lengths.tolist()}"
        )
    if max_new_tokens == 0:
        return None
    minimum = min_buffer_length or model.min_decode_buffer
    length = buffer_length(total + room, limit, minimum)
    tokens = np.zeros((batch, length), "int32")
    tokens[:, :prompt_length] = prompt
    if source is not None:  # the model pads its own kind of source
        source = np.asarray(
            model.pad_source(source, -(-source.shape[1] // BUCKET) * BUCKET)
        )
    else:
        source = np.zeros((batch, 1), "int32")
    seed = np.random.default_rng().integers(2**31) if seed is None else seed
    return {
        "tokens": tokens,
        "source": source,
        "start": np.int32(lengths.min()),
        "stop": np.int32(total),
        "end_token_id": padded_end_ids(end_ids),
        "seed": np.array([seed, 0], "int32"),
        "prompt_mask": tokens != 0,
    }


def buffer_length(needed, limit, minimum=MIN_BUFFER):
    """The decode buffer's length for `needed` positions: the next power of
    two from `minimum` (a model's `min_decode_buffer`, else `MIN_BUFFER`),
    at most `limit` (the model's `max_sequence_length`). Each length is one
    compiled loop.

    Examples:
        >>> from keras_transformer.generation.decode import buffer_length
        >>> buffer_length(40, 8192), buffer_length(600, 8192), buffer_length(300, 320)
        (64, 1024, 320)
        >>> buffer_length(65, 8192, minimum=512)  # a conversation's
        512
    """
    length = minimum
    while length < needed:
        length *= 2
    return min(limit, length)


def padded_end_ids(end_ids):
    """`check_end_token_ids`' result as a decode loop takes it: an int32
    vector of `END_IDS` ids (or the next power of two), -1 padded, so that
    one compiled loop serves every request with up to `END_IDS` end ids.

    Example:
        >>> from keras_transformer.generation.decode import padded_end_ids
        >>> padded_end_ids(None).tolist(), padded_end_ids(5).tolist()
        ([-1, -1, -1, -1], [5, -1, -1, -1])
        >>> padded_end_ids((1, 2, 3, 4, 5)).tolist()
        [1, 2, 3, 4, 5, -1, -1, -1]
    """
    ids = [] if end_ids is None else np.reshape(end_ids, [-1]).tolist()
    width = END_IDS
    while width < len(ids):
        width *= 2
    return np.array(ids + [-1] * (width - len(ids)), "int32")


def check_end_token_ids(end_token_id, vocabulary_size):
    """None, one end id (an int), or a tuple of several (sorted), checked
    against the vocabulary. Every decode loop stops at any of several."""
    if end_token_id is None:
        return None
    if validation.is_int(end_token_id):
        return validation.check_token_id("end_token_id", end_token_id, vocabulary_size)
    ids = validation.check_token_ids("end_token_id", end_token_id, vocabulary_size)
    return ids[0] if len(ids) == 1 else ids


def compiled_decode_fn(model, sampler, use_cache=True, shapes=None):
    """`decode_function(model, sampler, use_cache)` as an XLA-compiled
    `tf.function`, built once per model, sampler and `shapes` (the request's
    `(batch, buffer length, source length, end ids)`) and reused by `generate`
    (built again once `quantize` or LoRA has changed the model's
    variables). One function per shape: none is ever traced twice, and
    each new one is logged (at debug level, logger
    `keras_transformer.generation.decode`)."""
    return compiled(
        model,
        ("decode", sampler.config(), use_cache, shapes),
        lambda: decode_function(model, sampler, use_cache),
    )


def compiled(owner, key, build, functions=_COMPILED):
    """The XLA-compiled `tf.function` of `build()` kept under `key` for
    `owner` in `functions` (a `CompiledFunctions`), made, and logged at
    debug level, on first use."""
    functions = functions.of(owner)
    if key not in functions:
        logger.debug("Compiling a new function for %s: %s", type(owner).__name__, key)
        # A partial, not the closure itself: TensorFlow counts the traces of
        # functions of one closure's code together, and would warn of
        # "retracing" after five shapes that each trace their own function
        # once.
        functions[key] = tf.function(
            functools.partial(build()),
            jit_compile=True,
            reduce_retracing=False,
            autograph=False,
        )
    return functions[key]


def request_shapes(request):
    """The shapes that make a new compiled function: `(batch, buffer length,
    source length, end ids)`."""
    return request["tokens"].shape + (
        request["source"].shape[1],
        request["end_token_id"].shape[0],
    )


def compiled_speculative_fn(
    model, sampler, num_tokens, draft_model=None, max_ngram_size=3, shapes=None
):
    """`kt.generation.speculative.speculative_decode_function` as an
    XLA-compiled `tf.function`, built once per model, draft and settings.

    The function returns `(tokens, stats)`, `stats` being the int32 `(2,)`
    count of speculative steps and of the proposed tokens they kept. One
    is built per request `shapes`, as by `compiled_decode_fn`."""
    functions = _COMPILED.of(model)
    # The proposer is part of the key: a model may be its own draft, and
    # then draft and prompt lookup both belong to `model`.
    if draft_model is None:
        key = (sampler.config(), "prompt_lookup", num_tokens, max_ngram_size)
    else:
        key = (sampler.config(), "draft", num_tokens)
    drafts = functions.setdefault(key, CompiledFunctions())
    owner = model if draft_model is None else draft_model  # lookup: no draft
    return compiled(
        owner,
        shapes,
        lambda: speculative_decode_function(
            model,
            sampler,
            num_tokens,
            draft_model=draft_model,
            max_ngram_size=max_ngram_size,
        ),
        drafts,
    )


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
        A function `(tokens (B, L), source, start, stop, end_token_id,
        seed (2,)) -> tokens (B, L)` that fills `tokens[:, start:stop]`;
        `source` (`(B, S)` ids, or what the model's `pad_source` gives) is
        ignored by a decoder-only model, `end_token_id` is -1 for none.
    """
    check_generative(model, "model")
    beams = sampler.num_rows  # rows per prompt: beam search's beams

    def decode(tokens, source, start, stop, end_token_id, seed):
        state = read_prompt(model, tokens, source, use_cache, start)
        if beams > 1:
            # Every beam of a row starts from its row's state: the prompt
            # (and an encoder's source) is read once per row, then repeated
            # (each part of a state has the rows first).
            tokens = tf.repeat(tokens, beams, axis=0)
            state = tf.nest.map_structure(
                lambda part: tf.repeat(part, beams, axis=0), state
            )
        prompt_mask = tokens != 0
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


def read_prompt(model, tokens, source, use_cache, start):
    """`model.start_decoding(tokens, source, use_cache, prefill=start)`, or
    without `prefill` for a model whose `start_decoding` does not take it
    (one written before it existed: it reads the whole buffer, as then)."""
    if "prefill" in inspect.signature(model.start_decoding).parameters:
        return model.start_decoding(tokens, source, use_cache, prefill=start)
    return model.start_decoding(tokens, source, use_cache)


def check_generative(model, name):
    """Raises a ValueError unless `model` can be decoded with."""
    if not isinstance(model, CausalLM | Seq2SeqLM):
        raise ValueError(
            f"`{name}` must be a kt.models.CausalLM (such as kt.models.GPT2) or a "
            f"kt.models.Seq2SeqLM (such as kt.models.Seq2Seq). Received: "
            f"{name}={validation.describe(model)}"
        )
