import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import to_numpy

CLS, SEP, START, END = 2, 3, 5, 6


def as_lists(packed):
    return {name: to_numpy(value).tolist() for name, value in packed.items()}


def test_single_segments_are_padded_and_truncated_exactly():
    ids = tf.ragged.constant([[10, 11], [10, 11, 12, 13, 14, 15], []])
    packed = as_lists(kt.text.pack_segments(ids, 6, CLS, SEP))
    assert packed["token_ids"] == [
        [CLS, 10, 11, SEP, 0, 0],
        [CLS, 10, 11, 12, 13, SEP],
        [CLS, SEP, 0, 0, 0, 0],
    ]
    assert packed["segment_ids"] == [[0] * 6] * 3
    assert packed["padding_mask"] == [
        [True] * 4 + [False] * 2,
        [True] * 6,
        [True] * 2 + [False] * 4,
    ]


def test_pairs_are_trimmed_round_robin():
    a = tf.ragged.constant([[10, 11, 12, 13, 14], [10], [10, 11, 12, 13, 14]])
    b = tf.ragged.constant([[20, 21, 22, 23, 24], [20, 21, 22, 23, 24], [20]])
    packed = as_lists(kt.text.pack_segments([a, b], 8, CLS, SEP))
    # 5 places: 3 + 2 when both are long; a short segment keeps all of it.
    assert packed["token_ids"] == [
        [CLS, 10, 11, 12, SEP, 20, 21, SEP],
        [CLS, 10, SEP, 20, 21, 22, 23, SEP],
        [CLS, 10, 11, 12, 13, SEP, 20, SEP],
    ]
    assert packed["segment_ids"] == [
        [0, 0, 0, 0, 0, 1, 1, 1],
        [0, 0, 0, 1, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 1, 1],
    ]
    short = as_lists(kt.text.pack_segments([[10], [20]], 7, CLS, SEP))
    assert short["token_ids"] == [CLS, 10, SEP, 20, SEP, 0, 0]
    assert short["segment_ids"] == [0, 0, 0, 1, 1, 0, 0]


def test_dense_padded_inputs_and_tf_function():
    dense = np.array([[10, 11, 0, 0], [12, 13, 14, 15]], "int32")
    packed = tf.function(lambda x: kt.text.pack_segments(x, 5, CLS, SEP))(dense)
    np.testing.assert_array_equal(
        packed["token_ids"], [[CLS, 10, 11, SEP, 0], [CLS, 12, 13, 14, SEP]]
    )
    assert packed["padding_mask"].dtype == tf.bool


def test_seq2seq_start_end_packing():
    source = tf.ragged.constant([[10, 11, 12, 13, 14], [10]])
    target = tf.ragged.constant([[20, 21], [20, 21, 22, 23, 24, 25]])
    inputs, labels = kt.text.pack_seq2seq(source, target, 4, 5, START, END)
    np.testing.assert_array_equal(
        inputs["encoder_token_ids"], [[10, 11, 12, 13], [10, 0, 0, 0]]
    )
    np.testing.assert_array_equal(
        inputs["decoder_token_ids"], [[START, 20, 21, 0, 0], [START, 20, 21, 22, 23]]
    )
    np.testing.assert_array_equal(labels, [[20, 21, END, 0, 0], [20, 21, 22, 23, END]])
    empty_inputs, empty_labels = kt.text.pack_seq2seq(
        [10], np.zeros(0, "int32"), 2, 3, START, END
    )
    np.testing.assert_array_equal(empty_inputs["decoder_token_ids"], [START, 0, 0])
    np.testing.assert_array_equal(empty_labels, [END, 0, 0])


def test_causal_lm_windows_shift_by_one():
    inputs, labels = kt.text.causal_lm_windows(np.arange(1, 12), 4)
    np.testing.assert_array_equal(inputs, [[1, 2, 3, 4], [5, 6, 7, 8]])
    np.testing.assert_array_equal(labels, [[2, 3, 4, 5], [6, 7, 8, 9]])
    none, _ = kt.text.causal_lm_windows([1, 2, 3], 4)
    assert tuple(none.shape) == (0, 4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="sequence_length=2"):
        kt.text.pack_segments([[1], [2]], 2, CLS, SEP)
    with pytest.raises(ValueError, match="cls_id=0"):
        kt.text.pack_segments([1], 4, 0, SEP)
    with pytest.raises(ValueError, match="dtype float32"):
        kt.text.pack_segments(np.zeros((1, 2), "float32"), 4, CLS, SEP)
    with pytest.raises(ValueError, match="target_length=1"):
        kt.text.pack_seq2seq([1], [2], 4, 1, START, END)
    with pytest.raises(ValueError, match="1-D stream"):
        kt.text.causal_lm_windows(np.zeros((2, 2), "int32"), 1)
