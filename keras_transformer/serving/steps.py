"""The engine's compiled functions over its `tf.Variable` caches: the
decode step (each row at its own position) and the prompt piece.

Shape legend: R rows of the step, C a prompt piece, V vocabulary.
"""

import tensorflow as tf

from keras_transformer.generation import RowSampler
from keras_transformer.models.decoding import PREFILL_CHUNK


def step_function(model, caches, rows, sampled):
    """The decode step of the first `rows` slots of `caches` (greedy, or
    `RowSampler`'s per-row draw if `sampled`), compiled with XLA."""

    def step(tokens, positions, temperature, top_k, top_p, seeds):
        logits, updated = model.chunk_logits(
            tokens[:, None], [c[:rows] for c in caches], positions
        )
        for cache, value in zip(caches, updated, strict=True):
            cache[:rows].assign(value)
        logits = tf.cast(logits[:, 0], tf.float32)  # (rows, V)
        if not sampled:
            return tf.argmax(logits, axis=-1, output_type=tf.int32)
        sampler = RowSampler(temperature, top_k=top_k, top_p=top_p, seeds=seeds)
        return sampler.next_token(logits, tf.zeros([2], tf.int32))

    signature = [
        tf.TensorSpec([rows], tf.int32),  # tokens
        tf.TensorSpec([rows], tf.int32),  # positions
        tf.TensorSpec([rows], tf.float32),  # temperature
        tf.TensorSpec([rows], tf.int32),  # top_k
        tf.TensorSpec([rows], tf.float32),  # top_p
        tf.TensorSpec([rows, 2], tf.int32),  # seeds
    ]
    return tf.function(step, input_signature=signature, jit_compile=True)


def prefill_function(model, caches):
    """Reads one prompt piece into one slot of `caches`, compiled with XLA."""

    def prefill(piece, start, slot):
        # A gather: a dynamic slot index (slicing would compile per slot).
        rows = [tf.gather(c, slot[None]) for c in caches]  # (1, 2, L, K, D)
        _, updated = model.chunk_logits(piece, rows, start)
        for cache, value in zip(caches, updated, strict=True):
            cache.scatter_nd_update(slot[None, None], value)

    signature = [
        tf.TensorSpec([1, PREFILL_CHUNK], tf.int32),  # piece
        tf.TensorSpec([], tf.int32),  # start
        tf.TensorSpec([], tf.int32),  # slot
    ]
    return tf.function(prefill, input_signature=signature, jit_compile=True)
