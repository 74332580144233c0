"""export_encoder: served without keras_transformer, it gives the embeddings of
`kt.models.bert_feature_extractor`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.export.test_classifier import LENGTH, VOCAB, make_texts
from tests.helpers import run_export_test, spread_weights

TEXTS = make_texts(64, seed=2)
NAMES = ["mean_pooled_output", "pooled_output"]


def make_backbone(vocabulary_size=None):
    keras.utils.set_random_seed(0)
    vocabulary_size = vocabulary_size or len(VOCAB)
    backbone = kt.models.bert(
        vocabulary_size,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=LENGTH,
        dropout=0,
    )
    return spread_weights(backbone, scale=1.0, layer_norms=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    backbone = make_backbone()
    folder = tmp_path_factory.mktemp("encoder")
    path = kt.export.export_encoder(backbone, tokenizer, folder / "encoder")
    requests = [("encode", {"text": TEXTS}), ("encode", {"text": ["the cat"]})]
    names, results = run_export_test(path, requests, folder)
    return backbone, tokenizer, names, results


def expected(backbone, tokenizer, texts, sequence_length=LENGTH):
    """`bert_feature_extractor` outputs on `[CLS] text [SEP]`."""
    packed = kt.text.pack_segments(tokenizer(list(texts)), sequence_length, 2, 3)
    outputs = kt.models.bert_feature_extractor(backbone)(packed)
    return {name: outputs[name].numpy() for name in NAMES}


def check(out, embeddings):
    assert sorted(out) == NAMES
    for name in NAMES:
        assert out[name].dtype == np.float32
        np.testing.assert_allclose(out[name], embeddings[name], atol=1e-5)


def test_signatures(served):
    assert served[2] == ["encode", "serving_default"]


def test_batch_of_64_with_empty_unknown_and_too_long_texts(served):
    backbone, tokenizer, _, (out, _) = served
    check(out, expected(backbone, tokenizer, TEXTS))
    assert out["mean_pooled_output"].shape == (64, 16)
    # A text longer than the model keeps its first LENGTH - 2 tokens.
    for name in NAMES:
        np.testing.assert_allclose(out[name][3], out[name][4], atol=1e-6)
        assert not np.allclose(out[name][0], out[name][3])  # not degenerate


def test_batch_of_1(served):
    backbone, tokenizer, _, (_, out) = served
    check(out, expected(backbone, tokenizer, ["the cat"]))


@pytest.mark.slow
def test_feature_extractor_sentencepiece_and_shorter_sequences(tmp_path):
    corpus = [" ".join(make_texts(20, seed)) for seed in range(20)]
    proto = kt.text.train_sentencepiece(corpus, 300)
    size = kt.text.SentencePieceTokenizer(proto).vocabulary_size()
    backbone = make_backbone(size)
    # After the seed is set: tf.random.set_seed releases the SentencePiece
    # resources of tokenizers created before it (a tensorflow-text quirk).
    tokenizer = kt.text.SentencePieceTokenizer(proto)
    extractor = kt.models.bert_feature_extractor(backbone)
    path = kt.export.export_encoder(
        extractor, tokenizer, tmp_path / "encoder", sequence_length=6
    )
    encode = tf.saved_model.load(path).signatures["encode"]
    out = encode(text=tf.constant(TEXTS[:8]))
    check(out, expected(backbone, tokenizer, TEXTS[:8], sequence_length=6))


def test_bad_arguments(tmp_path):
    tokenizer = kt.text.WordPieceTokenizer(VOCAB)
    backbone = make_backbone()
    export = kt.export.export_encoder
    classifier = kt.models.bert_classifier(backbone, 2)
    with pytest.raises(ValueError, match="BERTFeatureExtractor.*'bert_classifier'"):
        export(classifier, tokenizer, tmp_path / "a")
    with pytest.raises(ValueError, match="model='bert'"):
        export("bert", tokenizer, tmp_path / "a")
    for bad in (1, LENGTH + 1, "16"):
        with pytest.raises(ValueError, match=f"sequence_length={bad!r}"):
            export(backbone, tokenizer, tmp_path / "a", sequence_length=bad)
    bigger = kt.text.WordPieceTokenizer(VOCAB + ["zebra"])
    with pytest.raises(ValueError, match=r"`tokenizer` has 22 tokens.*\(21\)"):
        export(backbone, bigger, tmp_path / "a")
    assert not (tmp_path / "a").exists()
