"""`generate`: autoregressive decoding with a compiled, fixed-shape KV cache.

The prompt runs through the model once to fill every block's cache; then a
`tf.while_loop` of one-token steps, compiled with XLA, writes each new
token's keys and values into the cache at its index. The cached step calls the
same layers through the same forward function as the model itself
(`gpt2_forward`, `seq2seq_decode`). Compiled loops are kept per model and
sampler and retrace only for a new batch size or length bucket.

Shape legend: B batch, P prompt length, L buffer length (a bucket >= P +
max_new_tokens), S source length, H heads, D head size.
"""

import weakref

import numpy as np
import tensorflow as tf

from keras_transformer.generation.samplers import BeamSampler, get_sampler
from keras_transformer.models.gpt import gpt2_forward, gpt2_layers
from keras_transformer.models.seq2seq import (
    seq2seq_decode,
    seq2seq_encode,
    seq2seq_layers,
)

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
    """Generates tokens with a `gpt2` or `seq2seq` model.

    Args:
        model: a model from `kt.models.gpt2` or `kt.models.seq2seq` (or one
            loaded from a `.keras` file).
        inputs: GPT: int token ids `(B, P)`, 0-padded on the right (prompts of
            different lengths are fine; each needs at least one token).
            seq2seq: `{"encoder_token_ids": (B, S), "decoder_token_ids":
            (B, P)}`, the decoder ids usually a start token.
        max_new_tokens: how many tokens to add after the prompt.
        sampler: `"greedy"`, `"temperature"`, `"top_k"`, `"top_p"`, `"beam"`,
            or a `Sampler` instance.
        end_token_id: a sequence stops at this token; later positions are 0.
        use_cache: False recomputes the whole prefix at every step (for
            comparison; same tokens).
        seed: int seed; the same seed gives the same samples.
        **sampler_args: `temperature`, `top_k`, `top_p`, `num_beams`,
            `length_penalty`.

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
    family, layers = _family(model)
    source = None
    if family == "seq2seq":
        if not isinstance(inputs, dict) or set(inputs) != {
            "encoder_token_ids",
            "decoder_token_ids",
        }:
            raise ValueError(
                "For a seq2seq model, `inputs` must be a dict with 'encoder_token_ids' "
                f"and 'decoder_token_ids'. Received: {type(inputs).__name__}"
            )
        source = _as_ids("inputs['encoder_token_ids']", inputs["encoder_token_ids"])
        prompt = _as_ids("inputs['decoder_token_ids']", inputs["decoder_token_ids"])
        embeddings = layers["decoder_embeddings"]
    else:
        prompt = _as_ids("inputs", inputs)
        embeddings = layers["embeddings"]
    batch, prompt_length = prompt.shape
    limit = embeddings.sequence_length
    total = prompt_length + max_new_tokens
    if total > limit:
        raise ValueError(
            f"The prompt length ({prompt_length}) plus "
            f"`max_new_tokens` ({max_new_tokens}) "
            f"is {total}, beyond the model's max_sequence_length ({limit})."
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
    """The XLA-compiled decode function for `model` and `sampler`, built once.

    It takes `(tokens (B, L), source (B, S), start, stop, end_token_id,
    seed (2,))` and returns the filled `(B, L)` tokens; exports reuse it.
    """
    functions = _COMPILED.setdefault(model, {})
    key = (sampler.config(), use_cache)
    if key not in functions:
        functions[key] = tf.function(
            _decode_body(model, sampler, use_cache),
            jit_compile=True,
            reduce_retracing=False,
        )
    return functions[key]


def _decode_body(model, sampler, use_cache):
    family, layers = _family(model)
    beams = sampler.num_beams if isinstance(sampler, BeamSampler) else 1
    blocks = layers["blocks"] if family == "gpt2" else layers["decoder_blocks"]

    def empty_caches(tokens):
        caches = []
        for block in blocks:
            attention = block.self_attention_layer
            shape = (
                tf.shape(tokens)[0],
                2,
                tf.shape(tokens)[1],
                attention.num_heads,
                attention.key_dim,
            )
            caches.append(tf.zeros(shape, attention.compute_dtype))
        return caches

    def decode(tokens, source, start, stop, end_token_id, seed):
        if beams > 1:
            tokens, source = (
                tf.repeat(tokens, beams, axis=0),
                tf.repeat(source, beams, axis=0),
            )
        prompt_mask = tokens != 0
        if family == "gpt2":
            if use_cache:
                _, state = gpt2_forward(
                    layers, tokens, empty_caches(tokens), 0
                )  # prefill

                def next_fn(tokens, caches, index):
                    step = tokens[:, index - 1][:, None]  # (B, 1)
                    logits, caches = gpt2_forward(layers, step, caches, index - 1)
                    return logits[:, 0], caches
            else:
                state = ()

                def next_fn(tokens, state, index):
                    logits, _ = gpt2_forward(layers, tokens)
                    return logits[:, index - 1], state
        else:
            context = seq2seq_encode(layers, source)
            context_mask = source != 0
            if use_cache:
                cross = [
                    block.compute_cross_attention_cache(context) for block in blocks
                ]
                _, caches = seq2seq_decode(
                    layers,
                    tokens,
                    caches=empty_caches(tokens),
                    index=0,
                    cross_caches=cross,
                    context_padding_mask=context_mask,
                )
                state = (caches, cross, context_mask)

                def next_fn(tokens, state, index):
                    caches, cross, context_mask = state
                    logits, caches = seq2seq_decode(
                        layers,
                        tokens[:, index - 1][:, None],
                        caches=caches,
                        index=index - 1,
                        cross_caches=cross,
                        context_padding_mask=context_mask,
                    )
                    return logits[:, 0], (caches, cross, context_mask)
            else:
                state = (context, context_mask)

                def next_fn(tokens, state, index):
                    logits, _ = seq2seq_decode(
                        layers, tokens, state[0], context_padding_mask=state[1]
                    )
                    return logits[:, index - 1], state

        return sampler(
            next_fn, tokens, state, start, stop, prompt_mask, end_token_id, seed
        )

    return decode


def _family(model):
    names = {layer.name for layer in model.layers}
    if "encoder_layer_0" in names:
        return "seq2seq", seq2seq_layers(model)
    if "transformer_layer_0" in names and "final_layer_norm" in names:
        return "gpt2", gpt2_layers(model)
    raise ValueError(
        "`model` must be built by kt.models.gpt2 or kt.models.seq2seq. "
        f"Received: a model named {model.name!r}"
    )


def _as_ids(name, ids):
    ids = np.asarray(ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"`{name}` must be int token ids of shape (batch, length). "
            f"Received: dtype {ids.dtype}, shape {ids.shape}"
        )
    return ids.astype("int32")


def _pad(ids, length):
    padded = np.zeros((ids.shape[0], length), "int32")
    padded[:, : ids.shape[1]] = ids
    return padded
