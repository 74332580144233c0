import json
import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_model_saving_test, to_numpy

VOCAB = 12
FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")


def tiny_gpt(**kwargs):
    args = dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
                max_sequence_length=16, dropout=0.0)  # fmt: skip
    args.update(kwargs)
    return kt.models.gpt2(VOCAB, **args)


def cycle_data(num, length=9, seed=0):
    """Windows of the cycle 1, 2, ..., 11, 1, 2, ...: fully predictable."""
    start = np.random.default_rng(seed).integers(0, VOCAB - 1, num)
    tokens = (start[:, None] + np.arange(length)) % (VOCAB - 1) + 1
    return tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32")


def compile_gpt(model, jit_compile=False):
    model.compile(
        optimizer=kt.training.AdamW(5e-3, weight_decay=0.0),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        metrics=[kt.training.MaskedAccuracy()],
        jit_compile=jit_compile,
    )


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_gpt_learns_a_deterministic_sequence(jit_compile):
    keras.utils.set_random_seed(0)
    model = tiny_gpt()
    compile_gpt(model, jit_compile)
    x, y = cycle_data(1024)
    history = model.fit(x, y, batch_size=32, epochs=6, verbose=0).history
    assert history["loss"][-1] < 0.05, history["loss"]
    assert history["masked_accuracy"][-1] > 0.99


def test_future_tokens_and_padding_never_change_earlier_logits():
    model = tiny_gpt(dropout=0.1)
    ids = np.array([[3, 4, 5, 6, 7, 8]])
    logits = to_numpy(model(ids))
    changed = to_numpy(model(np.array([[3, 4, 5, 9, 10, 11]])))
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-5)
    padded = to_numpy(model(np.array([[3, 4, 5, 0, 0, 0]])))
    np.testing.assert_allclose(padded[:, :3], logits[:, :3], atol=1e-5)


def test_save_load_identical_logits(tmp_path):
    model = tiny_gpt()
    run_model_saving_test(model, np.array([[1, 2, 3, 0]]), tmp_path)


def test_logits_are_float32_and_tied_to_the_token_embedding():
    model = tiny_gpt()
    ids = np.array([[1, 2, 3]])
    probe = keras.Model(model.input, [model.final_layer_norm.output, model.output])
    hidden, logits = (to_numpy(t) for t in probe(ids))
    assert logits.dtype == "float32"
    # Tied: logits = h · Eᵀ with the token embedding table, by value.
    table = to_numpy(model.embeddings.token_embedding.embeddings)
    np.testing.assert_allclose(
        logits[..., 1:], hidden @ table[1:].T, rtol=1e-4, atol=1e-5
    )
    # Padding (row 0) is no token: its logit is excluded from the softmax.
    np.testing.assert_array_equal(logits[..., 0], -1e9)
    assert not any(tuple(w.shape) == (32, VOCAB) for w in model.weights)


def test_resuming_from_a_saved_model_equals_not_stopping(tmp_path):
    x, y = cycle_data(128)
    keras.utils.set_random_seed(3)
    straight = tiny_gpt()
    initial = straight.get_weights()
    compile_gpt(straight)
    straight.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)

    resumed = tiny_gpt()
    resumed.set_weights(initial)
    compile_gpt(resumed)
    resumed.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    resumed.save(tmp_path / "mid.keras")
    resumed = keras.saving.load_model(tmp_path / "mid.keras")
    resumed.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(resumed.get_weights(), straight.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Unknown gpt2 preset 'gpt3'.*gpt2_small"):
        kt.models.gpt2("gpt3")
    with pytest.raises(ValueError, match="vocabulary_size=1"):
        kt.models.gpt2(1, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    with pytest.raises(ValueError, match="hidden_dim=10, num_heads=4"):
        kt.models.gpt2(
            10, num_layers=1, num_heads=4, hidden_dim=10, intermediate_dim=16
        )
    with pytest.raises(ValueError, match="num_layers=None"):
        kt.models.gpt2(10)
    model = tiny_gpt()
    with pytest.raises(ValueError, match="sequence_length=16"):
        model(np.ones((1, 17), "int32"))


def test_fit_traces_the_training_step_once_with_keras_updates():
    # `fit` builds the optimizer first (kt.models FitMixin), so TensorFlow
    # traces the training step once instead of twice; the updates are
    # exactly those of `keras.Model.fit`, which builds it inside the trace.
    x, y = cycle_data(16)
    models = []
    for fit in (kt.models.GPT2.fit, keras.Model.fit):
        keras.utils.set_random_seed(3)
        model = tiny_gpt()
        compile_gpt(model)
        traces = []
        train_step = model.train_step
        model.train_step = lambda data, f=train_step, t=traces: t.append(1) or f(data)
        fit(model, x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        models.append((model, len(traces)))
    (ours, our_traces), (reference, _) = models
    assert our_traces == 1
    for a, b in zip(ours.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_fine_tuning_loss_equals_transformers_and_never_moves_the_padding_row():
    # transformers' GPT2LMHeadModel loss on a right-padded batch (labels -100
    # at padding), made by tests/fixtures/make_gpt2_loss_fixture.py. Our ids
    # are GPT-2's plus one with 0 as padding, and the documented recipe is
    # inputs ids[:, :-1], labels ids[:, 1:] and the masked loss.
    with open(os.path.join(FIXTURES, "gpt2_tiny_loss.json")) as file:
        ref = json.load(file)
    ids = np.array(ref["ids"]) + 1
    ids[np.arange(ids.shape[1])[None] >= np.array(ref["lengths"])[:, None]] = 0
    x, y = ids[:, :-1], ids[:, 1:]
    model = kt.models.from_pretrained(os.path.join(FIXTURES, "hf", "gpt2_tiny"))
    loss = kt.training.MaskedSparseCategoricalCrossentropy()
    assert float(loss(y, model(x))) == pytest.approx(ref["loss"], rel=1e-6)

    table = model.embeddings.token_embedding.embeddings
    before = to_numpy(table)
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    model.train_on_batch(x, y)
    after = to_numpy(table)
    np.testing.assert_array_equal(after[0], before[0])  # padding: no gradient
    assert np.abs(after[1:] - before[1:]).max() > 1e-4  # real tokens learn
