"""The options every sampler takes (`kt.generation.Sampler`'s keyword
arguments): their checks, and `process`, which applies them to the scores
of one position as Hugging Face's logits processors do.

Shape legend: R rows of the buffer, L buffer length, V vocabulary.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation import loop


def check_temperature(temperature):
    """A number > 0."""
    number = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if not number or temperature <= 0:
        raise ValueError(
            f"`temperature` must be a number > 0. Received: temperature={temperature!r}"
        )
    return temperature


def check_count(name, value):
    """A non-negative int (0 turns the option off)."""
    if not validation.is_int(value) or value < 0:
        raise ValueError(
            f"`{name}` must be an integer >= 0. Received: {name}={value!r}"
        )
    return int(value)


def check_id_list(name, value):
    """A list of token ids, possibly empty (the option off)."""
    if validation.is_int(value):  # one id, which the shared check would take
        raise ValueError(
            f"`{name}` must be a list of token ids > 0. Received: {name}={value!r}"
        )
    if not isinstance(value, str | bytes) and getattr(value, "__len__", None):
        if len(value) == 0:
            return ()
    return validation.check_token_ids(name, value)


def process(sampler, scores, tokens, index, prompt_lengths, stop, end_token_id):
    """`sampler`'s options applied to the float32 `(R, V)` scores of
    position `index` (see `kt.generation.Sampler.process`)."""
    vocabulary = tf.shape(scores)[1]
    if sampler.repetition_penalty is not None:
        # Dividing by the temperature first does not change the sign.
        seen = loop.seen_tokens(tokens, index, vocabulary)
        penalty = sampler.repetition_penalty
        penalized = tf.where(scores > 0, scores / penalty, scores * penalty)
        scores = tf.where(seen, penalized, scores)
    banned = []  # bool masks broadcasting to (R, V)
    if sampler.no_repeat_ngram_size:
        n = sampler.no_repeat_ngram_size
        banned.append(loop.repeated_ngrams(tokens, index, n, vocabulary))
    if sampler.suppressed_token_ids:
        ids = tf.constant(sampler.suppressed_token_ids, tf.int32)
        banned.append(loop.id_mask(ids, vocabulary)[None])
    if sampler.min_new_tokens:
        short = index - prompt_lengths < sampler.min_new_tokens  # (R,)
        # An id of -1 (no end token) forbids nothing.
        is_end = loop.id_mask(end_token_id, vocabulary)
        banned.append(tf.logical_and(short[:, None], is_end[None]))
    for mask in banned:
        scores = tf.where(mask, -loop.INF, scores)
    if sampler.forced_first_token_id is not None:
        first = index == prompt_lengths
        scores = tf.where(
            first[:, None],
            loop.forced(sampler.forced_first_token_id, vocabulary),
            scores,
        )
    if sampler.force_end_token:
        # Every end id at 0 (HF's ForcedEOSTokenLogitsProcessor).
        last = tf.logical_and(index == stop - 1, tf.reduce_max(end_token_id) >= 0)
        scores = tf.where(last, loop.forced(end_token_id, vocabulary), scores)
    if sampler.renormalize_logits:
        scores = tf.nn.log_softmax(scores, axis=-1)
    return scores
