import numpy as np
import pytest

import keras_transformer as kt


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
    per_token = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
    expected = per_token[labels != 0].mean()
    assert float(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    config = loss.get_config()
    assert (
        kt.training.MaskedSparseCategoricalCrossentropy.from_config(
            config
        ).label_smoothing
        == smoothing
    )


def test_masked_accuracy_ignores_padding():
    metric = kt.training.MaskedAccuracy()
    labels = np.array([[1, 2, 0], [2, 0, 0]])
    predictions = np.eye(3)[[[1, 1, 2], [2, 1, 1]]]
    metric.update_state(labels, predictions)
    assert float(metric.result()) == pytest.approx(2 / 3)
    metric.reset_state()
    assert float(metric.result()) == 0.0
