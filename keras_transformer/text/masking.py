"""BERT's masked-LM input corruption, in-graph with tensorflow-text.

Shape legend: B batch, T sequence length, P predictions per sequence.
"""

import functools

import keras
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text import checks
from keras_transformer.text._lazy import tf_text


@functools.cache
def _tf_text_subclasses():
    """The two tensorflow-text subclasses below, defined on first use (their
    bases come from tensorflow-text, which is imported lazily)."""

    class _RandomTokenChooser(tf_text.MaskValuesChooser):
        """tensorflow-text's chooser, with random tokens drawn from `candidate_ids`.

        The stock chooser returns, per selected token, the mask token, a random
        value in `[0, len(candidate_ids))`, or its input unchanged. Shifting the
        inputs up by `len(candidate_ids)` and using -1 as the mask token keeps the
        three outcomes apart, so a random value can be mapped to a candidate id:
        never padding nor another special token.
        """

        def __init__(
            self, candidate_ids, mask_token_id, mask_token_rate, random_token_rate
        ):
            super().__init__(len(candidate_ids), -1, mask_token_rate, random_token_rate)
            self._candidate_ids = candidate_ids
            self._mask_token_id = mask_token_id

        def get_mask_values(self, masked_lm_ids):
            count = len(self._candidate_ids)
            values = super().get_mask_values(masked_lm_ids + count)

            def decode(v):
                random_ids = tf.gather(
                    self._candidate_ids, tf.clip_by_value(v, 0, count - 1)
                )
                kept = tf.where(v < count, tf.cast(random_ids, v.dtype), v - count)
                return tf.where(v < 0, tf.cast(self._mask_token_id, v.dtype), kept)

            return tf.ragged.map_flat_values(decode, values)

    class _RandomItemSelector(tf_text.RandomItemSelector):
        """tensorflow-text's selector, with one random draw per batch.

        The stock selector shuffles each row inside a `tf.map_fn` whose iterations
        run in parallel, so which row gets which random numbers (and so the
        selections) varies from run to run even with a fixed seed; and it rounds
        `rate * n` up in float32, so 15% of 100 tokens selects 16. Here every
        selectable token gets a uniform score from a single op and each row keeps
        its `ceil(rate * n)` (at most `max_selections_per_batch`) highest scores.
        """

        def get_selection_mask(self, input_ids, axis=1):
            if axis != 1 or input_ids.ragged_rank != 1:
                return super().get_selection_mask(input_ids, axis)
            selectable = self.get_selectable(input_ids, axis)
            counts = tf.reduce_sum(tf.cast(selectable, tf.float64), axis=1)
            # The tolerance keeps 15% of 100 (15.000000000000002 in float64) at 15.
            wanted = tf.math.ceil(counts * self.selection_rate - 1e-9)
            wanted = tf.minimum(
                tf.cast(wanted, tf.int32), self.max_selections_per_batch
            )
            scores = tf.random.uniform(tf.shape(selectable.flat_values))
            scores = selectable.with_flat_values(
                tf.where(selectable.flat_values, scores, -1.0)
            ).to_tensor(default_value=-1.0)
            ranks = tf.argsort(
                tf.argsort(scores, axis=1, direction="DESCENDING"), axis=1
            )
            chosen = (ranks < wanted[:, None]) & (scores >= 0.0)
            return tf.RaggedTensor.from_tensor(chosen, lengths=input_ids.row_lengths())

    return _RandomTokenChooser, _RandomItemSelector


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLMMaskGenerator(keras.layers.Layer):
    """Selects and corrupts tokens for masked-LM pretraining, as BERT does.

    In each sequence, `mask_selection_rate` of the selectable tokens (rounded
    up, at most `mask_selection_length`) are chosen at random with
    tensorflow-text's `RandomItemSelector`; padding and the
    `unselectable_token_ids` (`[CLS]`, `[SEP]` ...) are never chosen. Of the
    chosen tokens, `mask_token_rate` become `mask_token_id`, `random_token_rate`
    a random token (never an unselectable id), and the rest stay unchanged
    (tensorflow-text's `MaskValuesChooser`). Randomness follows
    `tf.random.set_seed` / `keras.utils.set_random_seed`: the same seed gives
    the same masks, batch after batch.

    Args:
        vocabulary_size: number of token ids; random tokens are below it.
        mask_token_id: the `[MASK]` id.
        mask_selection_length: P, the fixed number of predictions per
            sequence; outputs are padded to it.
        mask_selection_rate: share of selectable tokens to predict.
        unselectable_token_ids: ids never selected nor drawn as random tokens;
            0 (padding) is always added.
        mask_token_rate: share of the selected tokens replaced by the mask.
        random_token_rate: share replaced by a random token.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: int token ids, dense `(B, T)` (0-padded), ragged `(B, None)`
            or one sequence `(T,)`.

    Returns:
        A dict: `"token_ids"` the corrupted ids (same shape as `inputs`),
        `"mask_positions"` `(B, P)` int32 positions of the selected tokens,
        `"mask_ids"` `(B, P)` int32 their original ids (the labels) and
        `"mask_weights"` `(B, P)` float32, 1 for a real prediction and 0 for
        padding (positions and ids are 0 there).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> masker = kt.text.MaskedLMMaskGenerator(
        ...     vocabulary_size=100, mask_token_id=4, mask_selection_length=3,
        ...     mask_selection_rate=0.5, unselectable_token_ids=[2, 3])
        >>> out = masker(np.array([[2, 10, 11, 12, 13, 3, 0, 0]]))
        >>> out["mask_weights"].numpy().tolist()  # ceil(0.5 * 4) = 2 of 3 slots
        [[1.0, 1.0, 0.0]]
        >>> set(out["mask_positions"].numpy()[0, :2].tolist()) <= {1, 2, 3, 4}
        True

    References:
        Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers
        for Language Understanding", 2019 (section 3.1, "Masked LM").
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        mask_selection_length,
        mask_selection_rate=0.15,
        unselectable_token_ids=(0,),
        mask_token_rate=0.8,
        random_token_rate=0.1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("vocabulary_size", vocabulary_size)
        validation.check_positive_int("mask_selection_length", mask_selection_length)
        if (
            isinstance(mask_token_id, bool)
            or not isinstance(mask_token_id, int)
            or not 0 < mask_token_id < vocabulary_size
        ):
            raise ValueError(
                f"`mask_token_id` must be an integer in [1, {vocabulary_size}). "
                f"Received: mask_token_id={mask_token_id!r}"
            )
        for name, rate in (
            ("mask_selection_rate", mask_selection_rate),
            ("mask_token_rate", mask_token_rate),
            ("random_token_rate", random_token_rate),
        ):
            if isinstance(rate, bool) or not isinstance(rate, int | float):
                raise ValueError(f"`{name}` must be a float. Received: {name}={rate!r}")
            if not 0.0 <= rate <= 1.0:
                raise ValueError(
                    f"`{name}` must be in [0, 1]. Received: {name}={rate!r}"
                )
        if mask_token_rate + random_token_rate > 1.0:
            raise ValueError(
                "`mask_token_rate + random_token_rate` must be at most 1. "
                f"Received: mask_token_rate={mask_token_rate!r}, "
                f"random_token_rate={random_token_rate!r}"
            )
        unselectable = sorted(
            {0, mask_token_id, *[int(i) for i in unselectable_token_ids]}
        )
        excluded = set(unselectable)
        candidates = [i for i in range(vocabulary_size) if i not in excluded]
        if not candidates:
            raise ValueError(
                "`unselectable_token_ids` leave no token to select. "
                f"Received: unselectable_token_ids={unselectable_token_ids!r}"
            )
        self.vocabulary_size = vocabulary_size
        self.mask_token_id = mask_token_id
        self.mask_selection_length = mask_selection_length
        self.mask_selection_rate = mask_selection_rate
        self.unselectable_token_ids = unselectable
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate
        chooser_class, selector_class = _tf_text_subclasses()
        self._selector = selector_class(
            max_selections_per_batch=mask_selection_length,
            selection_rate=mask_selection_rate,
            unselectable_ids=unselectable,
        )
        self._chooser = chooser_class(
            tf.constant(candidates, tf.int32),
            mask_token_id,
            mask_token_rate,
            random_token_rate,
        )

    def call(self, inputs):
        ids = checks.as_token_ids(inputs)
        rank, dense = ids.shape.rank, not isinstance(ids, tf.RaggedTensor)
        batch = tf.cast(ids if rank == 2 else ids[None], tf.int32)
        if dense:
            dense_batch = batch
            batch = tf.RaggedTensor.from_tensor(batch)  # padding is unselectable
        token_ids, positions, mask_ids = tf_text.mask_language_model(
            batch, self._selector, self._chooser
        )
        if dense:  # every row kept its full width: refold the flat values
            token_ids = tf.reshape(token_ids.flat_values, tf.shape(dense_batch))
            token_ids.set_shape(dense_batch.shape)
        shape = [None, self.mask_selection_length]
        outputs = {
            "token_ids": token_ids,
            "mask_positions": tf.cast(positions, tf.int32).to_tensor(shape=shape),
            "mask_ids": mask_ids.to_tensor(shape=shape),
            "mask_weights": tf.ones_like(mask_ids, tf.float32).to_tensor(shape=shape),
        }
        if rank == 1:
            outputs = {name: value[0] for name, value in outputs.items()}
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "mask_token_id": self.mask_token_id,
                "mask_selection_length": self.mask_selection_length,
                "mask_selection_rate": self.mask_selection_rate,
                "unselectable_token_ids": self.unselectable_token_ids,
                "mask_token_rate": self.mask_token_rate,
                "random_token_rate": self.random_token_rate,
            }
        )
        return config
