"""kt.tasks.TextClassifier: the hand-wired path's probabilities, transformers'
on the tiny classifier fixture, round trips, and its export served."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.export.test_classifier import (
    CLASSES,
    LENGTH,
    PAIRS,
    TEXTS,
    VOCAB,
    make_classifier,
)
from tests.helpers import run_export_test, to_numpy

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")


@pytest.fixture(scope="module")
def classifier():
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    return kt.tasks.TextClassifier(make_classifier(), tokenizer, class_names=CLASSES)


def expected(task, *segments, length=LENGTH):
    """Probabilities `(B, C)` of the task's model on inputs packed by hand."""
    tokenizer = task.tokenizer
    packed = kt.text.pack_segments(
        [tokenizer(list(texts)) for texts in segments], length, 2, 3
    )
    return tf.nn.softmax(task.model(packed), axis=-1).numpy()


def test_predict_is_the_hand_wired_model_for_texts_and_pairs(classifier):
    # Batches of 16: each is cut to its own longest text, ids are the same
    # (the shorter sums differ by 1.4e-6 at most, measured).
    out = classifier.predict(TEXTS, batch_size=16)
    probabilities = expected(classifier, TEXTS)
    np.testing.assert_allclose(out["probabilities"], probabilities, atol=1e-5)
    assert out["probabilities"].dtype == np.float32
    assert out["labels"] == [CLASSES[i] for i in probabilities.argmax(-1)]
    assert len(set(out["labels"])) == 3  # not degenerate
    pairs = classifier.predict(list(zip(TEXTS, PAIRS, strict=True)))
    probabilities = expected(classifier, TEXTS, PAIRS)
    np.testing.assert_allclose(pairs["probabilities"], probabilities, atol=1e-5)
    assert not np.allclose(pairs["probabilities"], out["probabilities"], atol=1e-3)
    single = classifier.predict("a good film")
    assert sorted(single) == ["label", "probabilities"]
    np.testing.assert_allclose(
        single["probabilities"], expected(classifier, ["a good film"])[0], atol=1e-5
    )
    assert single["label"] == CLASSES[single["probabilities"].argmax()]


def test_sequence_length_trims_as_the_exporter(classifier):
    short = kt.tasks.TextClassifier(
        classifier.model, classifier.tokenizer, sequence_length=5
    )
    out = short.predict(TEXTS[:16])
    probabilities = expected(classifier, TEXTS[:16], length=5)
    np.testing.assert_allclose(out["probabilities"], probabilities, atol=1e-5)
    assert out["labels"] == probabilities.argmax(-1).tolist()  # ints, no names


def test_export_served_without_the_library_gives_predict(classifier, tmp_path):
    path = classifier.export(tmp_path / "classifier")
    requests = [
        ("classify", {"text": TEXTS}),
        ("classify_pair", {"text": TEXTS, "text_pair": PAIRS}),
    ]
    _, (single, pairs) = run_export_test(path, requests, tmp_path)
    pairs_texts = list(zip(TEXTS, PAIRS, strict=True))
    for served, texts in [(single, TEXTS), (pairs, pairs_texts)]:
        out = classifier.predict(texts)
        np.testing.assert_allclose(
            served["probabilities"], out["probabilities"], atol=1e-5
        )
        assert served["label"].astype(str).tolist() == out["labels"]


def test_save_and_load_give_identical_outputs(classifier, tmp_path):
    path = classifier.save(tmp_path / "classifier.keras")
    out = classifier.predict(TEXTS)
    for restored in (kt.tasks.load(path), keras.saving.load_model(path)):
        assert type(restored) is kt.tasks.TextClassifier
        assert restored.class_names == CLASSES
        assert restored.sequence_length == LENGTH
        again = restored.predict(TEXTS)
        np.testing.assert_array_equal(again["probabilities"], out["probabilities"])
        assert again["labels"] == out["labels"]


def test_from_pretrained_gives_transformers_probabilities():
    task = kt.tasks.from_pretrained(os.path.join(HF, "bert_tiny_classifier"))
    assert type(task) is kt.tasks.TextClassifier
    assert task.class_names == ["LABEL_0", "LABEL_1", "LABEL_2"]
    # The texts and pairs tests/fixtures/make_hf_fixtures.py gave transformers.
    texts = ["the quick brown fox", "hello world !", "lazy dogs jumped ."]
    pairs = ["a dog", "the fox", "hello"]
    logits = np.load(os.path.join(HF, "bert_tiny_heads.npz"))["classifier"]
    out = task.predict(list(zip(texts, pairs, strict=True)))
    np.testing.assert_allclose(
        out["probabilities"], to_numpy(tf.nn.softmax(logits)), atol=1e-5
    )
    assert out["labels"] == [f"LABEL_{i}" for i in logits.argmax(-1)]


def tiny_classifier(class_names=("fox", "hello")):
    keras.utils.set_random_seed(0)
    backbone = kt.models.bert(
        len(VOCAB), num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=LENGTH, dropout=0,
    )  # fmt: skip
    model = kt.models.bert_classifier(backbone, len(class_names), dropout=0)
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    return kt.tasks.TextClassifier(model, tokenizer, class_names=list(class_names))


@pytest.mark.slow
def test_fit_on_raw_texts_with_class_names_learns_them():
    task = tiny_classifier(("cat", "dog"))
    texts = ["the cat sat", "a dog ran", "cat on a mat", "the dog , the film"]
    labels = ["cat", "dog", "cat", "dog"]
    task.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = task.fit(texts * 4, labels * 4, batch_size=8, epochs=15, verbose=0)
    assert history.history["loss"][-1] < 0.1, history.history["loss"]
    assert task.predict(texts)["labels"] == labels
    # Labels as indices train the same way, and pairs train too.
    pairs = [(t, "good film") for t in texts]
    task.fit(pairs, [0, 1, 0, 1], epochs=1, verbose=0)


def test_fit_compiles_with_defaults_when_not_compiled():
    task = tiny_classifier()
    texts = ["the cat sat", "a dog ran"]
    history = task.fit(texts, ["fox", 1], validation_data=(texts, [0, 1]), verbose=0)
    assert isinstance(task.optimizer, keras.optimizers.Adam)
    np.testing.assert_allclose(float(task.optimizer.learning_rate), 5e-5)
    assert sorted(history.history) == [
        "accuracy", "loss", "val_accuracy", "val_loss"
    ]  # fmt: skip


def test_bad_input_is_refused_before_any_work(classifier):
    predict = classifier.predict
    for texts, message in [
        ([], r"`texts` must not be empty. Received: texts=\[\]"),
        (
            ["good", 3],
            r"`texts` must hold strings; item 1 is not. Received: texts\[1\]=3",
        ),
        (b"good", "texts=b'good'"),
        ([("a", "b"), ("a", "b", "c")], r"texts\[1\]=\('a', 'b', 'c'\)"),
        ([("a", "b"), "c"], r"pair.*texts\[1\]='c'"),
        (["a", ("b", "c")], r"texts\[1\]=\('b', 'c'\)"),
        ([("a", 1)], r"texts\[0\]=\('a', 1\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            predict(texts)
    with pytest.raises(ValueError, match="batch_size=0"):
        predict(["good"], batch_size=0)
    fit = classifier.fit
    with pytest.raises(ValueError, match=r"labels\[1\]='great'"):
        fit(["good", "bad"], ["positive", "great"])
    with pytest.raises(ValueError, match=r"labels\[0\]=3"):
        fit(["good"], [3])
    with pytest.raises(ValueError, match="one label per text"):
        fit(["good", "bad"], [0])
    with pytest.raises(ValueError, match="texts='good'"):
        fit("good", [0])
    with pytest.raises(ValueError, match=r"validation_data\[1\]\[0\]='x'"):
        fit(["good"], [0], validation_data=(["bad"], ["x"]))
    assert not classifier.compiled  # nothing was trained
    make = kt.tasks.TextClassifier
    model, tokenizer = classifier.model, classifier.tokenizer
    with pytest.raises(ValueError, match=r"class_names=\['a', 'b'\]"):
        make(model, tokenizer, class_names=["a", "b"])
    with pytest.raises(ValueError, match=r"class_names=\['a', 'a', 'b'\]"):
        make(model, tokenizer, class_names=["a", "a", "b"])
    with pytest.raises(ValueError, match="sequence_length=17"):
        make(model, tokenizer, sequence_length=17)
    with pytest.raises(ValueError, match="BERTClassifier.*'bert'"):
        make(model.backbone, tokenizer)
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        make(model, kt.text.WordPieceTokenizer(["[PAD]", "[UNK]", "[SEP]", "a"]))
    # The head has no vocabulary_size: Task checks against its backbone's.
    size = model.backbone.vocabulary_size
    message = rf"{size + 1} tokens.*vocabulary_size \({size}\)"
    with pytest.raises(ValueError, match=message):
        make(model, kt.text.WordPieceTokenizer([*VOCAB[:size], "extra"]))
