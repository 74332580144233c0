import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_model_saving_test, to_numpy

VOCAB, CLS, SEP, MASK = 20, 1, 2, 3


def tiny_bert(**kwargs):
    args = dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
                max_sequence_length=12, dropout=0.0)  # fmt: skip
    args.update(kwargs)
    return kt.models.bert(VOCAB, **args)


def inputs_for(ids, segments=None):
    ids = np.asarray(ids, "int32")
    return {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids) if segments is None else np.asarray(segments),
        "padding_mask": ids != 0,
    }


@pytest.mark.slow
def test_masked_lm_recovers_masked_tokens_of_a_pattern():
    """Sequences count up by one; a masked token is its left neighbour + 1."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    num, length = 2048, 8
    start = rng.integers(4, VOCAB - length, num)
    ids = (start[:, None] + np.arange(length)).astype("int32")
    positions = np.sort(
        np.stack(
            [rng.choice(np.arange(1, length), 2, replace=False) for _ in range(num)]
        ),
        axis=1,
    ).astype("int32")
    labels = np.take_along_axis(ids, positions, axis=1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, MASK, axis=1)
    model = kt.models.bert_masked_lm(tiny_bert())
    model.compile(
        optimizer=keras.optimizers.Adam(5e-3),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        metrics=[kt.training.MaskedAccuracy()],
    )
    features = {**inputs_for(masked), "mask_positions": positions}
    model.fit(features, labels, batch_size=64, epochs=16, verbose=0)
    predictions = np.argmax(to_numpy(model(features)), axis=-1)
    assert np.mean(predictions == labels) > 0.95


def test_classifier_handles_sentence_pairs_and_round_trips(tmp_path):
    backbone = tiny_bert()
    model = kt.models.bert_classifier(backbone, num_classes=3)
    pair = inputs_for([[CLS, 5, 6, SEP, 7, 8, SEP, 0]], [[0, 0, 0, 0, 1, 1, 1, 0]])
    logits = to_numpy(model(pair))
    assert logits.shape == (1, 3) and logits.dtype == np.float32
    swapped = {**pair, "segment_ids": np.zeros((1, 8), "int32")}
    assert not np.allclose(to_numpy(model(swapped)), logits)  # segments matter
    run_model_saving_test(model, pair, tmp_path)


def test_padding_never_changes_real_positions():
    model = tiny_bert(dropout=0.1)
    short = to_numpy(model(inputs_for([[CLS, 5, 6, SEP, 0, 0]]))["sequence_output"])
    other = inputs_for([[CLS, 5, 6, SEP, 9, 9]])
    other["padding_mask"] = np.array([[1, 1, 1, 1, 0, 0]], bool)
    changed = to_numpy(model(other)["sequence_output"])
    np.testing.assert_allclose(changed[:, :4], short[:, :4], atol=1e-5)


def test_feature_extractor_mean_pools_real_tokens_only():
    backbone = tiny_bert()
    extractor = kt.models.bert_feature_extractor(backbone)
    features = inputs_for([[CLS, 5, 6, SEP, 0, 0]])
    out = extractor(features)
    sequence = to_numpy(backbone(features)["sequence_output"])
    np.testing.assert_allclose(
        to_numpy(out["mean_pooled_output"]), sequence[:, :4].mean(axis=1), atol=1e-5
    )
    np.testing.assert_allclose(
        to_numpy(out["pooled_output"]), to_numpy(backbone(features)["pooled_output"])
    )


def test_masked_lm_ties_embeddings_through_save_and_load(tmp_path):
    model = kt.models.bert_masked_lm(tiny_bert())
    features = {**inputs_for([[CLS, MASK, 6, SEP]]), "mask_positions": np.array([[1]])}
    restored = run_model_saving_test(model, features, tmp_path)
    assert len(restored.weights) == len(model.weights)
    embedding = restored.get_layer("embeddings").token_embedding.embeddings
    embedding.assign(embedding * 0.0)  # logits go through the same matrix
    np.testing.assert_allclose(to_numpy(restored(features)), 0.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Known presets: bert_base, bert_tiny"):
        kt.models.bert("bert_huge")
    with pytest.raises(ValueError, match="num_classes=1"):
        kt.models.bert_classifier(tiny_bert(), num_classes=1)
    with pytest.raises(ValueError, match="dropout=2"):
        tiny_bert(dropout=2)
