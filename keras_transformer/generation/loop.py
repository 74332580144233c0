"""Graph helpers every decode loop shares: the samplers' one-token loop,
beam search and speculative decoding.

All take and return fixed-shape tensors, so the loops that use them compile
with XLA and export into a SavedModel.

Shape legend: R rows of the buffer (B, or B * K for beam search), L buffer
length, V vocabulary, T columns written at once.
"""

from typing import NamedTuple

import tensorflow as tf

INF = float("inf")


class DecodeState(NamedTuple):
    """What a decode loop carries from one position to the next (and a
    loop run in pieces from one piece to the next).

    Attributes:
        tokens: int32 `(R, L)`, written before `index`.
        cache: the model's varying decoding state (any nested structure).
        index: int32 scalar, the position to fill next.
        done: bool `(R,)`, rows that ended.
    """

    tokens: object
    cache: object
    index: object
    done: object


class DecodeSpec(NamedTuple):
    """What stays fixed while one request decodes.

    Attributes:
        stop: one past the last position to fill.
        prompt_mask: bool `(R, L)`, True where `tokens` is prompt (kept).
        end_token_id: int32 scalar or vector of end ids; -1 for none.
        seed: int32 `(2,)` seed of the stateless random ops (None: nothing
            is drawn, as in beam search).
    """

    stop: object
    prompt_mask: object
    end_token_id: object
    seed: object = None


def prompt_lengths(prompt_mask):
    """Int32 `(R,)`: each row's prompt length (its True entries)."""
    return tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1)


def never_padding(logits, value):
    """`logits` `(R, V)` with id 0 at `value`: token 0 is padding, and a live
    sequence never emits it."""
    is_padding = tf.range(tf.shape(logits)[-1]) == 0
    return tf.where(is_padding[None], value, logits)


def id_mask(token_ids, vocabulary):
    """Bool `(V,)`: True at `token_ids` (an int32 scalar or vector; an id of
    -1, "none", marks nothing)."""
    hot = tf.one_hot(tf.reshape(token_ids, [-1]), vocabulary)  # (E, V)
    return tf.reduce_any(hot > 0, axis=0)


def is_end(tokens, end_token_id):
    """Bool, the shape of `tokens`: where a token is one of the end ids
    (`end_token_id` an int32 scalar or vector; -1 is none)."""
    ids = tf.reshape(end_token_id, [-1])
    return tf.reduce_any(tf.equal(tokens[..., None], ids), axis=-1)


def forced(token_ids, vocabulary):
    """`(1, V)` scores that force `token_ids` (one id, or several, each
    allowed): 0 there, -inf elsewhere."""
    return tf.where(id_mask(token_ids, vocabulary)[None], 0.0, -INF)


def write(tokens, index, values):
    """`tokens` `(R, L)` with column `index` set to `values` `(R,)`."""
    rows = tf.shape(tokens)[0]
    written = tf.tensor_scatter_nd_update(
        tokens, tf.stack([tf.range(rows), tf.fill([rows], index)], axis=1), values
    )
    written.set_shape(tokens.shape)
    return written


def write_columns(tokens, index, values):
    """`tokens` `(R, L)` with columns `index ..` set to `values` `(R, T)`."""
    rows = tf.shape(values)[0]
    width = tf.shape(values)[1]
    row_ids = tf.broadcast_to(tf.range(rows)[:, None], [rows, width])
    column_ids = tf.broadcast_to(index + tf.range(width)[None], [rows, width])
    written = tf.tensor_scatter_nd_update(
        tokens, tf.stack([row_ids, column_ids], axis=-1), values
    )
    written.set_shape(tokens.shape)
    return written


def seen_tokens(tokens, index, vocabulary):
    """Bool `(R, V)`: the ids in `tokens[:, :index]`, padding (0) excluded
    (the tokens HF's RepetitionPenaltyLogitsProcessor penalizes)."""
    rows = tf.shape(tokens)[0]
    before = tf.range(tf.shape(tokens)[1])[None] < index  # (1, L)
    ids = tf.where(before, tokens, 0)
    positions = tf.stack(
        [tf.broadcast_to(tf.range(rows)[:, None], tf.shape(ids)), ids], axis=-1
    )
    counts = tf.scatter_nd(
        tf.reshape(positions, [-1, 2]),
        tf.ones_like(tf.reshape(ids, [-1])),
        tf.stack([rows, vocabulary]),
    )
    return tf.logical_and(counts > 0, tf.range(vocabulary)[None] > 0)


def repeated_ngrams(tokens, index, n, vocabulary):
    """Bool `(R, V)`: the tokens that would complete an n-gram already in
    `tokens[:, :index]` (HF's NoRepeatNGramLogitsProcessor), fixed shapes.

    The window starting at `j` holds `tokens[:, j : j + n]`; it is complete
    when `j + n <= index`. If its first `n - 1` tokens equal the last `n - 1`
    before `index`, its last token is banned."""
    rows = tf.shape(tokens)[0]
    length = tf.shape(tokens)[1]
    starts = tf.range(length)
    matches = starts[None] <= index - n  # (1, L): complete windows
    for m in range(n - 1):
        window = tf.gather(tokens, tf.minimum(starts + m, length - 1), axis=1)
        before = tf.gather(tokens, tf.maximum(index - n + 1 + m, 0)[None], axis=1)
        matches = tf.logical_and(matches, tf.equal(window, before))
    last = tf.gather(tokens, tf.minimum(starts + n - 1, length - 1), axis=1)
    matches = tf.broadcast_to(matches, tf.shape(last))
    positions = tf.stack(
        [tf.broadcast_to(tf.range(rows)[:, None], tf.shape(last)), last], axis=-1
    )
    counts = tf.scatter_nd(
        tf.reshape(positions, [-1, 2]),
        tf.reshape(tf.cast(matches, tf.int32), [-1]),
        tf.stack([rows, vocabulary]),
    )
    return counts > 0


def reorder(parent):
    """A function that gathers rows by `parent` and keeps the static shape
    (for `tf.while_loop` state, e.g. beam search's caches)."""

    def gather(x):
        gathered = tf.gather(x, parent)
        gathered.set_shape(x.shape)
        return gathered

    return gather
