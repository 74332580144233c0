import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import to_numpy


def test_transformer_schedule_is_the_paper_formula():
    schedule = kt.training.TransformerSchedule(512, warmup_steps=4000)
    for step in [0, 1, 99, 3999, 4000, 10_000, 100_000]:
        n = step + 1
        expected = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5)
    restored = kt.training.TransformerSchedule.from_config(schedule.get_config())
    assert float(restored(10)) == float(schedule(10))


def test_warmup_cosine_decay_values():
    schedule = kt.training.warmup_cosine_decay(1e-3, 100, 2000, 1e-4)
    assert float(schedule(0)) == pytest.approx(0.0)
    assert float(schedule(50)) == pytest.approx(5e-4, rel=1e-5)
    assert float(schedule(100)) == pytest.approx(1e-3, rel=1e-5)
    # Half-way through the decay the cosine is at the middle of its range.
    assert float(schedule(1050)) == pytest.approx(1e-4 + 0.5 * 9e-4, rel=1e-4)
    assert float(schedule(2000)) == pytest.approx(1e-4, rel=1e-4)
    with pytest.raises(ValueError, match="warmup_steps=2000, total_steps=2000"):
        kt.training.warmup_cosine_decay(1e-3, 2000, 2000)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_masked_loss_matches_numpy(smoothing):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 5)).astype("float32")
    labels = np.array([[1, 2, 0, 0], [3, 4, 1, 0]])
    loss = kt.training.MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    # Smoothing spreads over the real tokens 1..4, not over padding (id 0).
    per_token = (1 - smoothing) * nll - smoothing * log_probs[..., 1:].mean(-1)
    expected = per_token[labels != 0].mean()
    assert float(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    config = loss.get_config()
    assert (
        kt.training.MaskedSparseCategoricalCrossentropy.from_config(
            config
        ).label_smoothing
        == smoothing
    )


def test_masked_loss_gradient_is_softmax_minus_one_hot_without_a_log_softmax():
    """The gradient with respect to the logits is `(softmax - one_hot) /
    real tokens` on real tokens and 0 on padding. Without label smoothing
    it comes from one fused op: no vocabulary-wide log-softmax (nor its
    gradient) is kept, which is most of a language model's LoRA step."""
    rng = np.random.default_rng(1)
    logits = tf.constant(rng.normal(size=(2, 3, 6)).astype("float32"))
    labels = np.array([[1, 5, 0], [2, 0, 0]])
    loss = kt.training.MaskedSparseCategoricalCrossentropy()

    @tf.function
    def gradient(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(labels, logits)
        return tape.gradient(value, logits)

    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = (probs - np.eye(6)[labels]) * (labels != 0)[..., None] / 3
    np.testing.assert_allclose(to_numpy(gradient(logits)), expected, atol=1e-6)
    graph = gradient.get_concrete_function(logits).graph
    kinds = {op.type for op in graph.get_operations()}
    assert "SparseSoftmaxCrossEntropyWithLogits" in kinds, kinds
    assert "LogSoftmax" not in kinds, kinds


def test_masked_loss_from_probabilities():
    probs = np.array([[[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]], "float32")
    labels = np.array([[1, 2, 0]])
    loss = kt.training.MaskedSparseCategoricalCrossentropy(from_logits=False)
    # -(log 0.25 + log 0.3) / 2: the padded third position is not counted.
    expected = -(np.log(0.25) + np.log(0.3)) / 2  # 1.29515
    assert float(loss(labels, probs)) == pytest.approx(expected, rel=1e-5)


def test_masked_loss_with_another_ignore_id():
    # ignore_id=2: label 0 is a real class here and label 2 is the padding.
    logits = np.log(np.array([[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.6, 0.1]]]))
    labels = np.array([[0, 2, 1]])
    loss = kt.training.MaskedSparseCategoricalCrossentropy(ignore_id=2)
    expected = -(np.log(0.7) + np.log(0.6)) / 2  # 0.43375
    assert float(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    assert loss.get_config()["ignore_id"] == 2


def test_masked_loss_of_an_all_padding_batch_is_zero():
    # No real token: nothing contributes and the count is clamped to 1, so
    # the loss is 0 (not 0 / 0 = NaN) and its gradients are 0.
    logits = tf.Variable(
        np.random.default_rng(0).normal(size=(2, 3, 5)).astype("float32")
    )
    loss = kt.training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    with tf.GradientTape() as tape:
        value = loss(np.zeros((2, 3), "int32"), logits)
    assert float(value) == 0.0
    np.testing.assert_array_equal(tape.gradient(value, logits), np.zeros((2, 3, 5)))


def test_label_smoothing_stays_finite_with_an_excluded_padding_logit():
    # Our language models give padding the logit -1e9; smoothing must not
    # spread onto it (that would add ~1e8 per token).
    logits = np.random.default_rng(1).normal(size=(1, 3, 5)).astype("float32")
    labels = np.array([[2, 4, 1]])
    loss = kt.training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    excluded = to_numpy(kt.layers.exclude_padding_logit(logits))
    log_probs = logits[..., 1:] - np.log(np.exp(logits[..., 1:]).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, labels[..., None] - 1, -1)[..., 0]
    expected = (0.9 * nll - 0.1 * log_probs.mean(-1)).mean()
    assert float(loss(labels, excluded)) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("smoothing", [1.0, -0.1, 1.5])
def test_masked_loss_rejects_bad_label_smoothing(smoothing):
    with pytest.raises(ValueError, match=f"label_smoothing={smoothing}"):
        kt.training.MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)


def test_masked_accuracy_with_sample_weight():
    metric = kt.training.MaskedAccuracy()
    labels = np.array([[1, 2, 0], [2, 1, 0]])
    predictions = np.eye(3)[[[1, 1, 2], [2, 1, 1]]]  # arg-max 1 1 2, 2 1 1
    weights = np.array([[0.5, 2.0, 3.0], [1.0, 0.0, 4.0]])
    metric.update_state(labels, predictions, sample_weight=weights)
    # Real tokens and their weights: hit 0.5, miss 2.0, hit 1.0, hit 0.0;
    # padding (weights 3 and 4) does not count: 1.5 / 3.5.
    assert float(metric.result()) == pytest.approx(3 / 7)
    # A second batch without weights adds 1 hit out of 2 real tokens.
    metric.update_state(np.array([[1, 2]]), np.eye(3)[[[1, 0]]])
    assert float(metric.result()) == pytest.approx(2.5 / 5.5)


def test_masked_accuracy_with_one_weight_per_sequence():
    metric = kt.training.MaskedAccuracy()
    labels = np.array([[1, 2], [2, 1]])
    predictions = np.eye(3)[[[1, 1], [2, 2]]]  # row 0: 1 hit of 2; row 1: 1 of 2
    metric.update_state(labels, predictions, sample_weight=np.array([1.0, 0.0]))
    # Only row 0 counts, as with keras.metrics.SparseCategoricalAccuracy.
    assert float(metric.result()) == pytest.approx(0.5)


def test_masked_accuracy_ignores_padding():
    metric = kt.training.MaskedAccuracy()
    labels = np.array([[1, 2, 0], [2, 0, 0]])
    predictions = np.eye(3)[[[1, 1, 2], [2, 1, 1]]]
    metric.update_state(labels, predictions)
    assert float(metric.result()) == pytest.approx(2 / 3)
    metric.reset_state()
    assert float(metric.result()) == 0.0
