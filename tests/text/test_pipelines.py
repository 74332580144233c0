import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import to_numpy

SENTENCES = [
    "The cat sat on the mat.",
    "A dog barked at the cat!",
    "Where is the red ball?",
    "The ball is under the old table.",
    "Cats and dogs are friends, sometimes.",
    "She reads a book in the garden.",
    "It rained all day long.",
    "The sun came out at last.",
] * 4
TINY = dict(num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0)


@pytest.fixture(scope="module")
def tokenizer():
    return kt.text.WordPieceTokenizer(
        kt.text.build_wordpiece_vocabulary(SENTENCES, 150)
    )


def first(dataset):
    return keras.tree.map_structure(to_numpy, next(iter(dataset)))


def fit_one_step(model, dataset, loss):
    model.compile(optimizer="sgd", loss=loss, jit_compile=False)  # quick to trace
    history = model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_masked_lm_pipeline(tokenizer):
    strings = tf.data.Dataset.from_tensor_slices(SENTENCES)
    dataset = kt.text.masked_lm_dataset(
        strings, tokenizer, 12, 8, mask_selection_length=3
    )
    features, labels, weights = first(dataset)
    assert set(features) == {
        "token_ids",
        "segment_ids",
        "padding_mask",
        "mask_positions",
    }
    assert features["token_ids"].shape == (8, 12) and labels.shape == (8, 3)
    clean = kt.text.pack_segments(tokenizer(SENTENCES[:8]), 12, 2, 3)
    clean_ids = to_numpy(clean["token_ids"])
    np.testing.assert_array_equal(features["padding_mask"], clean["padding_mask"])
    positions, real = features["mask_positions"], weights == 1.0
    np.testing.assert_array_equal(
        labels[real], np.take_along_axis(clean_ids, positions, 1)[real]
    )
    assert labels[real].min() >= 7  # [CLS], [SEP], padding never selected
    unmasked = np.ones_like(clean_ids, bool)
    np.put_along_axis(unmasked, positions, False, axis=1)
    np.testing.assert_array_equal(features["token_ids"][unmasked], clean_ids[unmasked])
    model = kt.models.bert_masked_lm(
        kt.models.bert(tokenizer.vocabulary_size(), max_sequence_length=12, **TINY)
    )
    fit_one_step(
        model, dataset, keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )


def test_masked_lm_masks_follow_the_seed(tokenizer):
    def masks(seed):
        keras.utils.set_random_seed(seed)
        strings = tf.data.Dataset.from_tensor_slices(SENTENCES)
        dataset = kt.text.masked_lm_dataset(strings, tokenizer, 12, 2)
        return [to_numpy(f["mask_positions"]) for f, _, _ in dataset]

    reference = masks(0)
    assert len(reference) == 16
    for _ in range(3):  # masking once ran in parallel and lost the order
        np.testing.assert_array_equal(masks(0), reference)
    assert not np.array_equal(masks(1), reference)


@pytest.mark.parametrize("pair", [False, True], ids=["single", "pair"])
def test_classification_pipeline(tokenizer, pair):
    texts = (SENTENCES, SENTENCES[::-1]) if pair else SENTENCES
    labels = np.arange(len(SENTENCES)) % 3
    strings = tf.data.Dataset.from_tensor_slices((texts, labels))
    dataset = kt.text.classification_dataset(strings, tokenizer, 16, 4)
    features, batch_labels = first(dataset)
    segments = [tokenizer(t[:4]) for t in texts] if pair else tokenizer(texts[:4])
    expected = kt.text.pack_segments(segments, 16, 2, 3)
    for name in ("token_ids", "segment_ids", "padding_mask"):
        np.testing.assert_array_equal(features[name], expected[name])
    assert features["segment_ids"].max() == (1 if pair else 0)
    np.testing.assert_array_equal(batch_labels, labels[:4])
    model = kt.models.bert_classifier(
        kt.models.bert(tokenizer.vocabulary_size(), max_sequence_length=16, **TINY), 3
    )
    fit_one_step(
        model, dataset, keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )


def test_causal_lm_pipeline(tokenizer):
    strings = tf.data.Dataset.from_tensor_slices(SENTENCES)
    dataset = kt.text.causal_lm_dataset(strings, tokenizer, 8, 2)
    inputs, labels = first(dataset)
    end = tokenizer.token_to_id("[END]")
    stream = [i for row in tokenizer(SENTENCES).to_list() for i in [*row, end]]
    np.testing.assert_array_equal(inputs, [stream[0:8], stream[9:17]])
    np.testing.assert_array_equal(labels, [stream[1:9], stream[10:18]])
    windows = sum(int(x.shape[0]) for x, _ in dataset)
    assert windows == len(stream) // 9
    model = kt.models.gpt2(tokenizer.vocabulary_size(), max_sequence_length=8, **TINY)
    fit_one_step(model, dataset, kt.training.MaskedSparseCategoricalCrossentropy())


def test_translation_pipeline(tokenizer):
    targets = [s.upper() for s in SENTENCES]
    chars = kt.text.CharTokenizer(kt.text.build_char_vocabulary(targets))
    pairs = tf.data.Dataset.from_tensor_slices((SENTENCES, targets))
    dataset = kt.text.translation_dataset(
        pairs, tokenizer, 10, 4, target_tokenizer=chars, target_sequence_length=12
    )
    inputs, labels = first(dataset)
    np.testing.assert_array_equal(
        inputs["encoder_token_ids"],
        tokenizer(SENTENCES[:4]).to_tensor(shape=[None, 10]),
    )
    np.testing.assert_array_equal(inputs["decoder_token_ids"][:, 0], [5] * 4)  # [START]
    np.testing.assert_array_equal(inputs["decoder_token_ids"][:, 1:], labels[:, :-1])
    np.testing.assert_array_equal(labels[:, -1], [6] * 4)  # long targets: [END] last
    assert (
        chars.detokenize(labels[0, :-1]).numpy().decode() == SENTENCES[0].upper()[:11]
    )
    model = kt.models.seq2seq(
        tokenizer.vocabulary_size(), max_sequence_length=12,
        target_vocabulary_size=chars.vocabulary_size(), **TINY,
    )  # fmt: skip
    fit_one_step(model, dataset, kt.training.MaskedSparseCategoricalCrossentropy())


def test_bad_inputs(tokenizer):
    strings = tf.data.Dataset.from_tensor_slices(SENTENCES)
    with pytest.raises(ValueError, match="single strings"):
        kt.text.masked_lm_dataset(strings.batch(2), tokenizer, 8, 2)
    with pytest.raises(ValueError, match="must be a tf.data.Dataset"):
        kt.text.causal_lm_dataset(SENTENCES, tokenizer, 8, 2)
    with pytest.raises(ValueError, match=r"\(text, label\)"):
        kt.text.classification_dataset(strings, tokenizer, 8, 2)
    with pytest.raises(ValueError, match=r"\(source, target\)"):
        kt.text.translation_dataset(strings, tokenizer, 8, 2)
    pairs = tf.data.Dataset.from_tensor_slices((SENTENCES, SENTENCES))
    with pytest.raises(ValueError, match="target_sequence_length=0"):
        kt.text.translation_dataset(pairs, tokenizer, 8, 2, target_sequence_length=0)
    with pytest.raises(ValueError, match="batch_size=0"):
        kt.text.causal_lm_dataset(strings, tokenizer, 8, 0)
    bare = kt.text.WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the"])
    with pytest.raises(ValueError, match=r"no '\[MASK\]' token"):
        kt.text.masked_lm_dataset(strings, bare, 8, 2)
    with pytest.raises(ValueError, match=r"no '\[END\]' token"):
        kt.text.causal_lm_dataset(strings, bare, 8, 2)
    with pytest.raises(ValueError, match="must be a keras_transformer.text tokenizer"):
        kt.text.causal_lm_dataset(strings, lambda x: x, 8, 2)
