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
    if sampler.begin_suppressed_token_ids:
        ids = tf.constant(sampler.begin_suppressed_token_ids, tf.int32)
        first = index == prompt_lengths  # (R,)
        banned.append(tf.logical_and(first[:, None], loop.id_mask(ids, vocabulary)))
    if sampler.min_new_tokens:
        short = index - prompt_lengths < sampler.min_new_tokens  # (R,)
        # An id of -1 (no end token) forbids nothing.
        is_end = loop.id_mask(end_token_id, vocabulary)
        banned.append(tf.logical_and(short[:, None], is_end[None]))
    for mask in banned:
        scores = tf.where(mask, -loop.INF, scores)
    if sampler.timestamp_token_id is not None:
        scores = timestamp_rules(
            sampler, scores, tokens, index, prompt_lengths, end_token_id
        )
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


def timestamp_rules(sampler, scores, tokens, index, prompt_lengths, end_token_id):
    """Whisper's timestamp rules (`kt.generation.Sampler`'s
    `timestamp_token_id`) applied to the `(R, V)` scores of position
    `index`, as HF's `WhisperTimeStampLogitsProcessor`."""
    begin = sampler.timestamp_token_id
    vocabulary = tf.shape(scores)[1]
    ids = tf.range(vocabulary)[None]  # (1, V)
    is_timestamp = ids >= begin
    scores = tf.where(ids == begin - 1, -loop.INF, scores)  # <|notimestamps|>
    new = index - prompt_lengths  # (R,): new tokens so far
    last = tokens[:, tf.maximum(index - 1, 0)]
    penultimate = tokens[:, tf.maximum(index - 2, 0)]
    last_was = tf.logical_and(new >= 1, last >= begin)[:, None]
    penultimate_was = tf.logical_or(new < 2, penultimate >= begin)[:, None]
    # In pairs: after two timestamps text, after one text a timestamp or end
    # (the ids below the end token are text).
    ends = tf.reshape(end_token_id, [-1])
    end = tf.reduce_min(tf.where(ends >= 0, ends, tf.reduce_max(ends)))  # -1: none
    pair_done = tf.logical_and(last_was, penultimate_was)
    scores = tf.where(tf.logical_and(pair_done, is_timestamp), -loop.INF, scores)
    opened = tf.logical_and(last_was, tf.logical_not(penultimate_was))
    scores = tf.where(tf.logical_and(opened, ids < end), -loop.INF, scores)
    # Never decreasing: below the last one (an opened pair may close at it).
    positions = tf.range(tf.shape(tokens)[1])[None]
    written = tf.logical_and(positions >= prompt_lengths[:, None], positions < index)
    stamps = tf.where(tf.logical_and(written, tokens >= begin), tokens, -1)
    latest = tf.reduce_max(stamps, axis=1)[:, None]  # (R, 1), -1: none
    lowest = tf.where(latest < 0, begin, tf.where(opened, latest, latest + 1))
    scores = tf.where(tf.logical_and(is_timestamp, ids < lowest), -loop.INF, scores)
    # The first new token is a timestamp, at most the initial bound.
    first = (new == 0)[:, None]
    scores = tf.where(tf.logical_and(first, ids < begin), -loop.INF, scores)
    if sampler.max_initial_timestamp_index is not None:
        late = ids > begin + sampler.max_initial_timestamp_index
        scores = tf.where(tf.logical_and(first, late), -loop.INF, scores)
    # A timestamp when their total probability beats every text token's.
    logprobs = tf.nn.log_softmax(scores, axis=-1)
    timestamp = tf.reduce_logsumexp(
        tf.where(is_timestamp, logprobs, -loop.INF), axis=-1
    )
    text = tf.reduce_max(tf.where(is_timestamp, -loop.INF, logprobs), axis=-1)
    return tf.where(
        tf.logical_and((timestamp > text)[:, None], tf.logical_not(is_timestamp)),
        -loop.INF,
        scores,
    )
