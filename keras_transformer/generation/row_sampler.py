"""`RowSampler`: one compiled step for rows that each carry their own
temperature, top-k, top-p, seed and length (a server's batch).

Every setting is a tensor with one value a row, an input of the traced
loop rather than part of it, so changing them never compiles again. A row's
token depends only on its own logits, settings, seed and position, never on
the other rows: a request decodes the same alone or in any batch.

Shape legend: R rows, V vocabulary.
"""

import tensorflow as tf

from keras_transformer.generation.samplers import Sampler


class RowSampler(Sampler):
    """Greedy or sampled, top-k and top-p, per row, from tensors.

    The logits processors run first (their own per-row tensors included:
    `processors.RepetitionPenalty(penalty)` with a `(R,)` penalty); then
    each row's logits are divided by its temperature, cut to its `top_k`
    most likely ids and to its nucleus of mass `top_p` (Hugging Face's
    order), and a token is drawn with the row's seed (Gumbel-max: the
    argmax of the scores plus Gumbel noise). A row whose temperature is
    <= 0 takes the argmax, as `GreedySampler`. A decode loop's `stop` may
    be a `(R,)` tensor too: each row's own length.

    Args:
        temperature: float32 `(R,)`; <= 0 is greedy.
        top_k: int32 `(R,)`, 0 for no cut; None: no cut for any row.
        top_p: float32 `(R,)` in (0, 1], 1 for no cut; None: no cut.
        seeds: int32 `(R, 2)`, each row's seed; None: every row draws with
            the loop's `seed`, row r as `seed + (r, 0)`.
        **options: the logits processors and options of `Sampler`.

    Example:
        >>> import numpy as np
        >>> import tensorflow as tf
        >>> import keras_transformer as kt
        >>> sampler = kt.generation.RowSampler(
        ...     temperature=tf.constant([0.0, 0.7]), top_k=tf.constant([0, 2]))
        >>> logits = tf.constant([[0.0, 3.0, 1.0, 2.0]] * 2)
        >>> tokens = sampler.next_token(logits, tf.constant([1, 2]))
        >>> int(tokens[0]), int(tokens[1]) in (1, 3)  # greedy; one of the top 2
        (1, True)
    """

    def __init__(self, temperature, top_k=None, top_p=None, seeds=None, **options):
        super().__init__(**options)
        self.row_temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.seeds = seeds

    def config(self):
        # The settings are tensors: the graph depends on which are given.
        given = tuple(
            name
            for name in ("row_temperature", "top_k", "top_p", "seeds")
            if getattr(self, name) is not None
        )
        return (type(self).__name__, given) + super().config()[2:]

    def warped(self, scores):
        """The float32 `(R, V)` scores each row draws from: divided by its
        temperature (1 for greedy rows), outside its top-k and nucleus at
        the float32 floor."""
        temperature = tf.cast(self.row_temperature, tf.float32)[:, None]
        scores = scores / tf.where(temperature > 0, temperature, 1.0)
        if self.top_k is None and self.top_p is None:
            return scores
        vocabulary = tf.shape(scores)[1]
        ordered = tf.sort(scores, axis=-1, direction="DESCENDING")
        if self.top_k is not None:
            k = tf.minimum(tf.cast(self.top_k, tf.int32), vocabulary)
            kth = tf.gather(ordered, tf.maximum(k - 1, 0)[:, None], batch_dims=1)
            scores = tf.where((k[:, None] > 0) & (scores < kth), tf.float32.min, scores)
            ordered = tf.sort(scores, axis=-1, direction="DESCENDING")
        if self.top_p is not None:
            # The nucleus: ids before which the mass is still below p.
            before = tf.cumsum(tf.nn.softmax(ordered), axis=-1, exclusive=True)
            top_p = tf.cast(self.top_p, tf.float32)[:, None]
            kept = tf.reduce_sum(tf.cast(before < top_p, tf.int32), axis=-1)
            least = tf.gather(ordered, tf.maximum(kept - 1, 0)[:, None], batch_dims=1)
            scores = tf.where(scores < least, tf.float32.min, scores)
        return scores

    def next_token(self, logits, seed):
        greedy = tf.argmax(logits, axis=-1, output_type=tf.int32)
        scores = self.warped(logits)
        rows, vocabulary = tf.shape(scores)[0], tf.shape(scores)[1]
        if self.seeds is None:
            seeds = tf.stack([seed[0] + tf.range(rows), tf.fill([rows], seed[1])], 1)
        else:  # each row's seed, moved on by the position like `seed`
            seeds = tf.cast(self.seeds, tf.int32) + tf.stack(
                [tf.zeros([rows], tf.int32), tf.fill([rows], seed[1])], 1
            )
        uniform = tf.map_fn(
            lambda row_seed: tf.random.stateless_uniform(
                [vocabulary], row_seed, minval=1e-20, maxval=1.0
            ),
            seeds,
            fn_output_signature=tf.float32,
        )
        gumbel = -tf.math.log(-tf.math.log(uniform))
        drawn = tf.argmax(scores + gumbel, axis=-1, output_type=tf.int32)
        temperature = tf.cast(self.row_temperature, tf.float32)
        return tf.where(temperature > 0, drawn, greedy)

    def distribution(self, logits):
        raise NotImplementedError("RowSampler has no per-token distribution.")
