"""Our GPT-2 and BERT against hand-written numpy forward passes
(tests/models/reference.py) on the same random weights."""

import keras
import numpy as np

import keras_transformer as kt
from tests.helpers import to_numpy
from tests.models import reference

SIZES = dict(num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
IDS = np.array([[5, 6, 7, 8, 9], [3, 2, 4, 0, 0]])


def randomize(model, seed):
    # Non-trivial LayerNorm and bias values too (they start at 1 and 0).
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(scale=0.5, size=w.shape).astype("float32"))


def test_gpt2_equals_the_numpy_reference():
    model = kt.models.gpt2(20, **SIZES, max_sequence_length=8, dropout=0.0)
    randomize(model, 0)
    expected = reference.gpt2_logits(model, IDS)
    actual = to_numpy(model(IDS))
    real = IDS != 0  # padded positions' own outputs are not defined
    np.testing.assert_allclose(actual[real], expected[real], rtol=1e-4, atol=1e-4)


def test_bert_equals_the_numpy_reference():
    keras.utils.set_random_seed(0)
    model = kt.models.bert(20, **SIZES, max_sequence_length=8, dropout=0.0)
    randomize(model, 1)
    segment_ids = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]])
    outputs = model(
        {"token_ids": IDS, "segment_ids": segment_ids, "padding_mask": IDS != 0}
    )
    sequence, pooled = reference.bert_outputs(model, IDS, segment_ids)
    real = IDS != 0
    np.testing.assert_allclose(
        to_numpy(outputs["sequence_output"])[real], sequence[real], rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(
        to_numpy(outputs["pooled_output"]), pooled, rtol=1e-4, atol=1e-4
    )
