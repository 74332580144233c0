"""export_classifier: served without keras_transformer, it gives the model's
own probabilities for single texts and pairs."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import run_export_test, spread_weights

LENGTH = 16  # max_sequence_length
WORDS = "the cat dog sat ran on a mat good bad film movie".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s", ",", ".", "!"]
CLASSES = ["negative", "neutral", "positive"]


def make_texts(count, seed):
    """Empty, unknown words, accents and case, longer than the model, and
    random sentences."""
    rng = np.random.default_rng(seed)
    long = " ".join(rng.choice(WORDS, 3 * LENGTH))
    texts = ["", "the zebra sat", "THÉ Cats, Dogs!", long, " ".join(long.split()[:14])]
    while len(texts) < count:
        texts.append(" ".join(rng.choice(WORDS + ["!", "films"], rng.integers(0, 9))))
    return texts


TEXTS, PAIRS = make_texts(64, seed=0), make_texts(64, seed=1)


def make_classifier():
    keras.utils.set_random_seed(0)
    backbone = kt.models.bert(
        len(VOCAB),
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=LENGTH,
        dropout=0,
    )
    model = kt.models.bert_classifier(backbone, num_classes=3, dropout=0)
    return spread_weights(model, scale=1.0, layer_norms=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    model = make_classifier()
    folder = tmp_path_factory.mktemp("classifier")
    path = kt.export.export_classifier(
        model, tokenizer, folder / "classifier", class_names=CLASSES
    )
    requests = [
        ("classify", {"text": TEXTS}),
        ("classify", {"text": ["a good film"]}),
        ("classify_pair", {"text": TEXTS, "text_pair": PAIRS}),
    ]
    names, results = run_export_test(path, requests, folder)
    return model, tokenizer, names, results


def expected(model, tokenizer, *segments, length=LENGTH):
    """Probabilities `(B, 3)` of the model on `pack_segments` inputs."""
    packed = kt.text.pack_segments(
        [tokenizer(list(texts)) for texts in segments], length, 2, 3
    )
    return tf.nn.softmax(model(packed), axis=-1).numpy()


def check(out, probabilities):
    np.testing.assert_allclose(out["probabilities"], probabilities, atol=1e-6)
    labels = [CLASSES[i] for i in probabilities.argmax(-1)]
    assert out["label"].astype(str).tolist() == labels


def test_signatures(served):
    assert served[2] == ["classify", "classify_pair", "serving_default"]


def test_batch_of_64_with_empty_unknown_and_too_long_texts(served):
    model, tokenizer, _, (out, _, _) = served
    probabilities = expected(model, tokenizer, TEXTS)
    check(out, probabilities)
    assert np.all(np.bincount(probabilities.argmax(-1)) > 5)  # not degenerate
    # A text longer than the model keeps its first LENGTH - 2 tokens.
    np.testing.assert_allclose(out["probabilities"][3], out["probabilities"][4])
    assert not np.allclose(out["probabilities"][0], out["probabilities"][3])


def test_batch_of_1(served):
    model, tokenizer, _, (_, out, _) = served
    check(out, expected(model, tokenizer, ["a good film"]))


def test_pairs_are_packed_and_trimmed_round_robin(served):
    model, tokenizer, _, (single, _, out) = served
    check(out, expected(model, tokenizer, TEXTS, PAIRS))
    assert not np.allclose(out["probabilities"], single["probabilities"])


def test_a_shorter_sequence_length_packs_and_trims_to_it(served, tmp_path):
    model, tokenizer, _, (full, _, _) = served
    path = kt.export.export_classifier(
        model, tokenizer, tmp_path / "short", class_names=CLASSES, sequence_length=5
    )
    out = tf.saved_model.load(path).signatures["classify"](text=tf.constant(TEXTS))
    short = expected(model, tokenizer, TEXTS, length=5)
    np.testing.assert_allclose(out["probabilities"], short, atol=1e-6)
    assert not np.allclose(short, full["probabilities"], atol=1e-3)  # it trims


@pytest.mark.slow
def test_without_class_names_labels_are_class_indices(tmp_path):
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    model = make_classifier()
    # The exporter truncates itself: a tokenizer's own sequence_length is ignored.
    short = kt.text.WordPieceTokenizer(VOCAB, sequence_length=5)
    path = kt.export.export_classifier(model, short, tmp_path / "ints")
    out = tf.saved_model.load(path).signatures["serving_default"](
        text=tf.constant(TEXTS[:16])
    )
    probabilities = expected(model, tokenizer, TEXTS[:16])
    assert out["label"].dtype == tf.int32
    np.testing.assert_array_equal(out["label"], probabilities.argmax(-1))
    np.testing.assert_allclose(out["probabilities"], probabilities, atol=1e-6)


def test_bad_arguments(tmp_path):
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    model = make_classifier()
    export = kt.export.export_classifier
    backbone = kt.models.bert(
        len(VOCAB),
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=LENGTH,
    )
    with pytest.raises(ValueError, match="BERTClassifier.*model=.*'bert'"):
        export(backbone, tokenizer, tmp_path / "a")
    with pytest.raises(ValueError, match=r"class_names=\['a', 'b'\]"):
        export(model, tokenizer, tmp_path / "a", class_names=["a", "b"])
    with pytest.raises(ValueError, match="class_names='abc'"):
        export(model, tokenizer, tmp_path / "a", class_names="abc")
    for bad in (2, LENGTH + 1, 8.0):
        with pytest.raises(ValueError, match=f"sequence_length={bad!r}"):
            export(model, tokenizer, tmp_path / "a", sequence_length=bad)
    no_cls = kt.text.WordPieceTokenizer(["[PAD]", "[UNK]", "[SEP]", "cat"])
    with pytest.raises(ValueError, match=r"no '\[CLS\]' token"):
        export(model, no_cls, tmp_path / "a")
    assert not (tmp_path / "a").exists()
