import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import to_numpy

VOCAB, CLS, SEP, MASK = 1000, 2, 3, 4
SPECIAL = [1, CLS, SEP, MASK, 5, 6]


def packed_batch(rng, num, length):
    """[CLS] random tokens [SEP] then padding, with random lengths."""
    ids = rng.integers(7, VOCAB, size=(num, length)).astype("int32")
    lengths = rng.integers(length // 2, length + 1, size=num)
    ids[np.arange(length)[None] >= lengths[:, None]] = 0
    ids[:, 0] = CLS
    ids[np.arange(num), lengths - 1] = SEP
    return ids


def masker(**kwargs):
    args = dict(vocabulary_size=VOCAB, mask_token_id=MASK, mask_selection_length=24,
                unselectable_token_ids=SPECIAL)  # fmt: skip
    args.update(kwargs)
    return kt.text.MaskedLMMaskGenerator(**args)


def test_bert_statistics_over_50k_tokens():
    keras.utils.set_random_seed(0)
    ids = packed_batch(np.random.default_rng(0), 600, 128)
    out = {k: to_numpy(v) for k, v in masker()(ids).items()}
    real = out["mask_weights"] == 1.0
    positions = out["mask_positions"]
    before = np.take_along_axis(ids, positions, 1)[real]
    after = np.take_along_axis(out["token_ids"], positions, 1)[real]
    selectable = int(np.sum(ids >= 7))
    assert selectable >= 50_000
    assert abs(real.sum() / selectable - 0.15) < 0.01
    assert abs(np.mean(after == MASK) - 0.8) < 0.01
    assert abs(np.mean((after != MASK) & (after != before)) - 0.1) < 0.01
    assert abs(np.mean(after == before) - 0.1) < 0.01
    # Labels are the original tokens; nothing special is ever selected or
    # drawn as a random token; everything not selected is unchanged.
    np.testing.assert_array_equal(out["mask_ids"][real], before)
    assert before.min() >= 7 and np.all((after >= 7) | (after == MASK))
    untouched = np.ones_like(ids, bool)
    np.put_along_axis(untouched, np.where(real, positions, 0), False, axis=1)
    untouched[:, 0] = True  # slot padding points at position 0, the [CLS]
    np.testing.assert_array_equal(out["token_ids"][untouched], ids[untouched])
    assert np.all(out["mask_ids"][~real] == 0) and np.all(positions[~real] == 0)


def test_count_is_rounded_up_and_capped_with_fixed_slots():
    ids = np.array([[CLS, 10, 11, 12, SEP, 0], [CLS, 10, 11, 12, 13, 14]], "int32")
    out = masker(mask_selection_length=2, mask_selection_rate=0.5)(ids)
    # Row 0: ceil(0.5 * 3) = 2; row 1: ceil(0.5 * 5) = 3, capped at 2.
    np.testing.assert_array_equal(out["mask_weights"], [[1, 1], [1, 1]])
    # Exactly 15% of 100 and 200 tokens (float32 rounding once made it 16, 31).
    for length, expected in [(100, 15), (200, 30), (7, 2)]:
        row = np.arange(7, 7 + length, dtype="int32")[None]
        out = masker(mask_selection_length=40)(row)
        assert int(np.sum(to_numpy(out["mask_weights"]))) == expected, length
    none = masker(mask_selection_length=3, mask_selection_rate=0.0)(ids)
    np.testing.assert_array_equal(none["mask_weights"], np.zeros((2, 3)))
    np.testing.assert_array_equal(none["token_ids"], ids)


def test_unbatched_ragged_and_tf_data():
    one = masker(mask_selection_length=4)(np.array([CLS, 10, 11, SEP]))
    assert tuple(one["token_ids"].shape) == (4,) and tuple(one["mask_ids"].shape) == (
        4,
    )
    ragged = masker(
        mask_selection_rate=1.0, mask_token_rate=1.0, random_token_rate=0.0
    )(tf.ragged.constant([[CLS, 10, SEP], [CLS, 20, 21, SEP]]))
    assert ragged["token_ids"].to_list() == [[CLS, MASK, SEP], [CLS, MASK, MASK, SEP]]
    np.testing.assert_array_equal(ragged["mask_positions"][:, :2], [[1, 0], [1, 2]])
    np.testing.assert_array_equal(ragged["mask_ids"][:, :2], [[10, 0], [20, 21]])
    layer = masker(mask_selection_length=2)
    dataset = tf.data.Dataset.from_tensor_slices(np.full((4, 6), 9, "int32")).batch(2)
    for batch in dataset.map(layer):
        assert batch["mask_positions"].shape == (2, 2)
        # ceil(0.15 * 6) = 1 prediction in each row's 2 slots
        np.testing.assert_array_equal(batch["mask_weights"], [[1, 0], [1, 0]])


def test_config_round_trip():
    layer = masker(mask_selection_rate=0.2)
    clone = kt.text.MaskedLMMaskGenerator.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert clone.unselectable_token_ids == [0, 1, CLS, SEP, MASK, 5, 6]


def test_bad_arguments():
    with pytest.raises(ValueError, match="mask_token_id=1000"):
        masker(mask_token_id=VOCAB)
    with pytest.raises(ValueError, match="mask_selection_length=0"):
        masker(mask_selection_length=0)
    with pytest.raises(ValueError, match="mask_selection_rate=1.5"):
        masker(mask_selection_rate=1.5)
    with pytest.raises(ValueError, match="random_token_rate=0.3"):
        masker(mask_token_rate=0.8, random_token_rate=0.3)
    with pytest.raises(ValueError, match="leave no token"):
        kt.text.MaskedLMMaskGenerator(3, 2, 1, unselectable_token_ids=[1])
    with pytest.raises(ValueError, match="dtype float32"):
        masker()(np.zeros((2, 3), "float32"))
