"""Token ids of the examples, and the batches of every step.

Batches are a function of the step number alone (a seeded permutation of
the examples per epoch; seeded random windows of the token stream for GPT),
so a resumed run sees exactly the batches an uninterrupted one would.
"""

import numpy as np
import tensorflow as tf


def epoch_order(count, steps, batch_size, seed):
    """The example indices of every step, `(steps, batch_size)`: epoch e is
    the permutation `default_rng([seed, e])` of `range(count)`."""
    needed = steps * batch_size
    epochs = -(-needed // count)
    order = np.concatenate(
        [np.random.default_rng([seed, e]).permutation(count) for e in range(epochs)]
    )
    return order[:needed].reshape(steps, batch_size)


def step_batches(arrays, order, start):
    """A dataset of `tuple(array[order[s]] for array in arrays)`, s >= start."""
    arrays = tuple(tf.constant(a) for a in arrays)
    dataset = tf.data.Dataset.from_tensor_slices(order[start:])
    return dataset.map(lambda i: tuple(tf.gather(a, i) for a in arrays)).prefetch(
        tf.data.AUTOTUNE
    )


def pad_rows(rows, length):
    """`rows` (lists of ids) cut or 0-padded to `length`, as one int32 array."""
    out = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        row = row[:length]
        out[i, : len(row)] = row
    return out


def token_ids(tokenizer, texts, batch=4096):
    """Ragged token ids of `texts` as a list of numpy arrays."""
    result = []
    for i in range(0, len(texts), batch):
        ids = tokenizer(tf.constant(texts[i : i + batch]))
        result.extend(row for row in ids.numpy())
    return result


def token_stream(tokenizer, corpus):
    """The corpus as one int32 token stream (tokenized in lines, newlines
    kept, so any tokenizer sees text of a bounded length)."""
    lines = corpus.splitlines(keepends=True) or [corpus]
    return np.concatenate(
        [np.asarray(r, np.int32) for r in token_ids(tokenizer, lines)]
    )


def fitted_length(tokenizer, texts, extra, limit):
    """The longest tokenized text plus `extra`, rounded up to 8, capped."""
    longest = max((len(r) for r in token_ids(tokenizer, texts)), default=0) + extra
    return max(8, min(limit, -(-longest // 8) * 8))
