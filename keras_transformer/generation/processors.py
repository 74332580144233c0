"""Logits processors: the rules that change the scores of one position
before a sampler chooses its token (Hugging Face's `LogitsProcessorList`,
mlx-lm's `logits_processors`), in graph code that compiles with XLA.

A processor is called as `processor(scores, step)` with the float32 `(R, V)`
scores and a `Step` (the tokens written so far, the position, each row's
prompt length, the stop and the end ids), and returns new scores. A
forbidden token gets -inf; a forced token gets 0 and every other -inf.

Per-row parameters: every number a processor takes (a penalty, a minimum
length) may be a Python number, the same for every row and part of the
compiled loop, or a `(R,)` tensor, one value a row, read by the one
compiled step that serves rows with different settings (a server's batch).

The generic processors live here; a family's own rules (Whisper's
timestamps) live in that family's files and are handed to the sampler
(`Sampler(logits_processors=[...])`), so `generation/` never changes for a
family.

Shape legend: R rows of the buffer, L buffer length, V vocabulary.
"""

from typing import NamedTuple

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation import loop, options


class Step(NamedTuple):
    """What a processor may read about the position being chosen.

    Attributes:
        tokens: int32 `(R, L)`, written before `index`.
        index: int32 scalar, the position being chosen.
        prompt_lengths: int32 `(R,)`, each row's prompt length.
        stop: one past the last position to fill.
        end_token_id: int32 scalar or vector of end ids; -1 for none.
    """

    tokens: object
    index: object
    prompt_lengths: object
    stop: object
    end_token_id: object


def per_row(value):
    """`value` ready to broadcast against `(R, V)` scores: a Python number
    as is, a `(R,)` tensor as `(R, 1)`."""
    if isinstance(value, int | float):
        return value
    value = tf.convert_to_tensor(value)
    return value[:, None] if value.shape.rank == 1 else value


def is_tensor(value):
    """Whether `value` is a tensor (a per-row parameter)."""
    return isinstance(value, tf.Tensor | tf.Variable)


def _hashable(value):
    if is_tensor(value):
        return ("tensor", value.dtype.name, tuple(value.shape.as_list()))
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


class LogitsProcessor:
    """Base class: changes the float32 `(R, V)` scores of one position.

    Subclasses implement `__call__(scores, step)`. `config()` (hashable)
    names the compiled loop that the processor is part of: it describes
    everything the graph depends on, a tensor parameter by its dtype and
    shape. `token_ids()` lists the ids the processor names, for `generate`
    to check against the vocabulary; `needs_end_token` says whether it
    needs an `end_token_id`.

    Example:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> class NoDigits(kt.generation.LogitsProcessor):
        ...     def __call__(self, scores, step):
        ...         return kt.generation.processors.forbid(scores, [7, 8, 9])
        >>> model = kt.models.gpt2(20, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16, max_sequence_length=32)
        >>> sampler = kt.generation.GreedySampler(logits_processors=[NoDigits()])
        >>> out = kt.generation.generate(model, np.array([[5, 6]]), 6, sampler)
        >>> bool(np.isin(out[0, 2:], [7, 8, 9]).any())
        False
    """

    needs_end_token = False

    def __call__(self, scores, step):
        raise NotImplementedError

    def config(self):
        return (type(self).__name__,) + tuple(
            (key, _hashable(value)) for key, value in sorted(vars(self).items())
        )

    def token_ids(self):
        return []


def forbid(scores, token_ids, rows=None):
    """`scores` `(R, V)` at -inf on `token_ids` (a list or int32 tensor),
    in every row, or where the bool `(R,)` `rows` is True."""
    mask = loop.id_mask(tf.constant(token_ids, tf.int32), tf.shape(scores)[1])[None]
    if rows is not None:
        mask = tf.logical_and(rows[:, None], mask)
    return tf.where(mask, -loop.INF, scores)


class RepetitionPenalty(LogitsProcessor):
    """Divides the positive scores of every id already in the row (prompt
    included) by `penalty` and multiplies the negative ones (HF
    `RepetitionPenaltyLogitsProcessor`; > 1 discourages repeats).

    Args:
        penalty: a number > 0, or a float32 `(R,)` tensor (1: off).
    """

    def __init__(self, penalty):
        if not is_tensor(penalty):
            validation.check_positive_number("repetition_penalty", penalty)
            penalty = float(penalty)
        self.penalty = penalty

    def __call__(self, scores, step):
        seen = loop.seen_tokens(step.tokens, step.index, tf.shape(scores)[1])
        penalty = per_row(self.penalty)
        penalized = tf.where(scores > 0, scores / penalty, scores * penalty)
        return tf.where(seen, penalized, scores)


class NoRepeatNGram(LogitsProcessor):
    """Forbids a token that would repeat an n-gram already in the row,
    prompt included (HF `no_repeat_ngram_size`).

    Args:
        size: n >= 1 (the graph depends on it: no tensor).
    """

    def __init__(self, size):
        validation.check_positive_int("no_repeat_ngram_size", size)
        self.size = size

    def __call__(self, scores, step):
        vocabulary = tf.shape(scores)[1]
        banned = loop.repeated_ngrams(step.tokens, step.index, self.size, vocabulary)
        return tf.where(banned, -loop.INF, scores)


class SuppressTokens(LogitsProcessor):
    """Ids that are never generated (HF `suppress_tokens`), or, with
    `at_begin=True`, not as a row's first new token (HF
    `begin_suppress_tokens`: Whisper's blank and end of text).

    Args:
        token_ids: a non-empty list of ids.
        at_begin: only at the first new position.
    """

    def __init__(self, token_ids, at_begin=False):
        name = "begin_suppressed_token_ids" if at_begin else "suppressed_token_ids"
        self.ids = options.check_id_list(name, token_ids)
        validation.check_bool("at_begin", at_begin)
        self.at_begin = at_begin

    def __call__(self, scores, step):
        rows = (step.index == step.prompt_lengths) if self.at_begin else None
        return forbid(scores, self.ids, rows)

    def token_ids(self):
        name = "begin_suppressed_token_ids" if self.at_begin else "suppressed_token_ids"
        return [(name, i) for i in self.ids]


class MinNewTokens(LogitsProcessor):
    """Forbids the end ids while a row has fewer new tokens than `count`
    (HF `min_new_tokens`; HF's `min_length` counts the prompt).

    Args:
        count: an int >= 0, or an int32 `(R,)` tensor.
    """

    def __init__(self, count):
        if not is_tensor(count):
            count = options.check_count("min_new_tokens", count)
        self.count = count

    def __call__(self, scores, step):
        short = step.index - step.prompt_lengths < self.count  # (R,)
        # An id of -1 (no end token) forbids nothing.
        is_end = loop.id_mask(step.end_token_id, tf.shape(scores)[1])
        return tf.where(tf.logical_and(short[:, None], is_end[None]), -loop.INF, scores)


class ForcedFirstToken(LogitsProcessor):
    """The first new token of every row (HF `forced_bos_token_id` with a
    one-token decoder prompt).

    Args:
        token_id: the id.
    """

    def __init__(self, token_id):
        self.token_id = validation.check_token_id("forced_first_token_id", token_id)

    def __call__(self, scores, step):
        first = step.index == step.prompt_lengths
        forced = loop.forced(self.token_id, tf.shape(scores)[1])
        return tf.where(first[:, None], forced, scores)

    def token_ids(self):
        return [("forced_first_token_id", self.token_id)]


class ForcedEndToken(LogitsProcessor):
    """The end token at the last position filled (`stop - 1`; HF
    `ForcedEOSTokenLogitsProcessor`: every end id at 0)."""

    needs_end_token = True

    def __call__(self, scores, step):
        # `(1, 1)`, or `(R, 1)` for a `(R,)` stop (each row's own length).
        last = tf.logical_and(
            tf.reshape(step.index == step.stop - 1, [-1, 1]),
            tf.reduce_max(step.end_token_id) >= 0,
        )
        forced = loop.forced(step.end_token_id, tf.shape(scores)[1])
        return tf.where(last, forced, scores)


class Renormalize(LogitsProcessor):
    """A log-softmax of the processed scores (HF `renormalize_logits`; it
    changes beam search scores, not greedy or sampled choices)."""

    def __call__(self, scores, step):
        return tf.nn.log_softmax(scores, axis=-1)


def from_options(
    min_new_tokens=0,
    no_repeat_ngram_size=0,
    suppressed_token_ids=(),
    begin_suppressed_token_ids=(),
    forced_first_token_id=None,
    force_end_token=False,
    renormalize_logits=False,
    repetition_penalty=None,
    logits_processors=(),
):
    """The processors of `kt.generation.Sampler`'s keyword options, in
    Hugging Face's order: the repetition penalty, n-grams, suppressed ids,
    ids suppressed at the first new position, the minimum length, then
    `logits_processors` (a family's rules, as Whisper's timestamps), the
    forced first token, the forced end token, renormalisation."""
    first = []
    if repetition_penalty is not None:
        first.append(RepetitionPenalty(repetition_penalty))
    if options.check_count("no_repeat_ngram_size", no_repeat_ngram_size):
        first.append(NoRepeatNGram(no_repeat_ngram_size))
    if options.check_id_list("suppressed_token_ids", suppressed_token_ids):
        first.append(SuppressTokens(suppressed_token_ids))
    if options.check_id_list("begin_suppressed_token_ids", begin_suppressed_token_ids):
        first.append(SuppressTokens(begin_suppressed_token_ids, at_begin=True))
    if is_tensor(min_new_tokens) or options.check_count(
        "min_new_tokens", min_new_tokens
    ):
        first.append(MinNewTokens(min_new_tokens))
    last = []
    if forced_first_token_id is not None:
        last.append(ForcedFirstToken(forced_first_token_id))
    validation.check_bool("force_end_token", force_end_token)
    if force_end_token:
        last.append(ForcedEndToken())
    validation.check_bool("renormalize_logits", renormalize_logits)
    if renormalize_logits:
        last.append(Renormalize())
    return tuple(first) + check_processors(logits_processors) + tuple(last)


def check_processors(processors):
    """A tuple of `LogitsProcessor`s, or a ValueError naming what was
    received."""
    if isinstance(processors, LogitsProcessor) or not isinstance(
        processors, list | tuple
    ):
        raise ValueError(
            "`logits_processors` must be a list of kt.generation.LogitsProcessor. "
            f"Received: logits_processors={processors!r}"
        )
    for processor in processors:
        if not isinstance(processor, LogitsProcessor):
            raise ValueError(
                "`logits_processors` must hold kt.generation.LogitsProcessor "
                f"instances. Received: {validation.describe(processor)} in "
                f"logits_processors={processors!r}"
            )
    return tuple(processors)


def apply(processors, scores, step):
    """`scores` through each of `processors` in order."""
    for processor in processors:
        scores = processor(scores, step)
    return scores
