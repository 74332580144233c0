"""export_fill_mask: served without keras_transformer, each text's answers are
`kt.tasks.FillMask.predict`'s at its first mask; rows it cannot fill say
why; bad arguments write nothing."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.export.test_classifier import LENGTH, VOCAB
from tests.helpers import run_export_test, spread_weights

TEXTS = [
    "the cat [MASK] on a mat",
    "[MASK] dog ran",
    "a good [MASK] , a bad film",
    "THÉ Cats[MASK]!",
    "the [MASK] sat on the [MASK] .",  # the first mask's answers
    "[MASK]",
]
LATE = "the " * (LENGTH - 1) + "[MASK]"  # past [CLS] + 15 words


@pytest.fixture(scope="module")
def fill():
    keras.utils.set_random_seed(0)
    backbone = kt.models.bert(
        len(VOCAB), num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=LENGTH, dropout=0,
    )  # fmt: skip
    model = spread_weights(kt.models.bert_masked_lm(backbone))
    return kt.tasks.FillMask(model, kt.text.WordPieceTokenizer(VOCAB))


def first_masks(answers):
    """Each text's answers at its first mask."""
    return [a[0] if isinstance(a[0], list) else a for a in answers]


def test_served_answers_are_predicts_at_the_first_mask(fill, tmp_path):
    path = kt.export.export_fill_mask(
        fill.model, fill.tokenizer, tmp_path / "f", top_k=4
    )
    texts = TEXTS + ["no mask", "", LATE]
    _, (served,) = run_export_test(path, [("fill_mask", {"text": texts})], tmp_path)
    expected = first_masks(fill.predict(TEXTS, top_k=4))
    assert len({tuple(c["token_id"] for c in a) for a in expected}) > 3  # varied
    for name in ("token", "token_id", "score", "sequence"):
        assert served[name].shape == (len(texts), 4), name
    for row, answer in enumerate(expected):
        assert served["token_id"][row].tolist() == [c["token_id"] for c in answer]
        np.testing.assert_allclose(
            served["score"][row], [c["score"] for c in answer], atol=1e-6
        )
        for key in ("token", "sequence"):
            assert [s.decode() for s in served[key][row]] == [c[key] for c in answer]
    assert served["error"][: len(TEXTS)].tolist() == [b""] * len(TEXTS)
    assert served["score"].dtype == np.float32
    assert served["token_id"].dtype == np.int32
    # Rows it cannot fill say why, and do not fail the others.
    errors = [e.decode() for e in served["error"][len(TEXTS) :]]
    assert errors[:2] == ["no [MASK] in the text"] * 2
    assert "past the model's max_sequence_length (16 tokens" in errors[2]
    unfilled = slice(len(TEXTS), None)
    assert (served["token_id"][unfilled] == -1).all()
    assert (served["score"][unfilled] == 0).all()
    assert (served["token"][unfilled] == b"").all()


def test_bad_arguments_write_nothing(fill, tmp_path):
    export = kt.export.export_fill_mask
    model, tokenizer = fill.model, fill.tokenizer
    path = tmp_path / "fill"
    size = len(VOCAB)
    for arguments, options, message in [
        ((model.backbone, tokenizer, path), {}, "BERTMaskedLM.*'bert'"),
        ((model, "vocab", path), {}, "tokenizer='vocab'"),
        ((model, tokenizer, path), {"top_k": 0}, "top_k=0"),
        ((model, tokenizer, path), {"top_k": size + 1}, f"top_k={size + 1}"),
        ((model, tokenizer, path), {"top_k": 2.0}, "top_k=2.0"),
        ((model, tokenizer, 3), {}, "path=3"),
    ]:
        with pytest.raises(ValueError, match=message):
            export(*arguments, **options)
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        no_mask = [t if t != "[MASK]" else "mask" for t in VOCAB]
        export(model, kt.text.WordPieceTokenizer(no_mask), path)
    with pytest.raises(ValueError, match="eos_token='\\[SEP\\]'"):
        export(model, kt.text.WordPieceTokenizer(VOCAB, eos_token="[SEP]"), path)
    with pytest.raises(ValueError, match="overwrite"):
        os.makedirs(tmp_path / "taken")
        (tmp_path / "taken" / "file").write_text("x")
        export(model, tokenizer, tmp_path / "taken")
    assert sorted(os.listdir(tmp_path)) == ["taken"]


def test_a_failed_export_leaves_nothing(fill, tmp_path, monkeypatch):
    def fail(module, path, signatures=None):
        os.makedirs(path)
        raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", fail)
    with pytest.raises(OSError, match="disk full"):
        fill.export(tmp_path / "fill")
    assert os.listdir(tmp_path) == []
