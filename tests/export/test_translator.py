"""export_translator: served without keras_transformer, it translates as
`kt.generation.generate` decodes."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import keras_transformer as kt
from tests.helpers import run_export_test, spread_weights

LIMIT = 32  # max_sequence_length: one decode bucket, as in generate
SOURCE = "the cat sat on the mat. a dog ran!"
TARGET = "le chat était assis sur le tapis. un chien a couru!"


def make_sentences(count, seed=0):
    """Empty, unknown characters, longer than the model, and random slices."""
    texts = ["", "the ☃ cat", SOURCE * 2, (SOURCE * 2)[:LIMIT], "a"]
    rng = np.random.default_rng(seed)
    while len(texts) < count:
        start, length = rng.integers(len(SOURCE)), rng.integers(0, 30)
        texts.append(SOURCE[start : start + length])
    return texts


SENTENCES = make_sentences(64)


def tokenizers():
    return (
        kt.text.CharTokenizer(kt.text.build_char_vocabulary([SOURCE])),
        kt.text.CharTokenizer(kt.text.build_char_vocabulary([TARGET])),
    )


def make_model(source, target, model_class=kt.models.Seq2Seq):
    keras.utils.set_random_seed(0)
    model = model_class(
        source.vocabulary_size(),
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=LIMIT,
        dropout=0,
        target_vocabulary_size=target.vocabulary_size(),
        # Tied, so spread random weights give varied translations (a random
        # untied output layer makes one token win everywhere); the paper's
        # embedding, whose spread weights give translations without near-ties.
        tie_embeddings=True,
        position="sinusoidal",
        scale_embeddings=True,
    )
    return spread_weights(model, scale=0.5, layer_norms=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    source, target = tokenizers()
    model = make_model(source, target)
    folder = tmp_path_factory.mktemp("translator")
    path = kt.export.export_translator(model, source, target, folder / "translator")
    requests = [
        ("translate", {"sentences": SENTENCES}),
        ("translate", {"sentences": ["the mat"]}),
    ]
    names, (batch, single) = run_export_test(path, requests, folder)
    return model, source, target, names, batch, single


def expected(
    model,
    source,
    target,
    sentences,
    max_new_tokens=LIMIT - 1,
    start_token="[START]",
    end_token="[END]",
    **sampler,
):
    """Translations from `generate` on the first LIMIT source tokens."""
    rows = [row[:LIMIT] for row in source.tokenize(sentences).to_list()]
    encoder_ids = np.zeros((len(rows), LIMIT), "int32")
    for i, row in enumerate(rows):
        encoder_ids[i, : len(row)] = row
    start, end = target.token_to_id(start_token), target.token_to_id(end_token)
    inputs = {
        "encoder_token_ids": encoder_ids,
        "decoder_token_ids": np.full((len(rows), 1), start, "int32"),
    }
    out = kt.generation.generate(
        model, inputs, max_new_tokens, end_token_id=end, **sampler
    )[:, 1:]
    out = np.where(out == end, 0, out)
    out[[not row for row in rows]] = 0  # an empty sentence translates to ""
    return target.detokenize(out).numpy().tolist()


def test_signatures(served):
    assert served[3] == ["serving_default", "translate"]


def test_batch_of_64_with_empty_unknown_and_too_long_sentences_equals_generate(
    served,
):
    model, source, target, _, batch, _ = served
    translations = batch["translation"].tolist()
    assert translations == expected(model, source, target, SENTENCES)
    assert translations[0] == b""
    assert len(set(translations)) > 20  # not degenerate
    # A sentence longer than the model is cut to its first LIMIT characters.
    assert translations[2] == translations[3]


def test_batch_of_1_equals_generate(served):
    model, source, target, _, _, single = served
    assert single["translation"].tolist() == expected(
        model, source, target, ["the mat"]
    )


@pytest.mark.slow
def test_beam_search_export_equals_generate_with_beams(tmp_path):
    source, target = tokenizers()
    model = make_model(source, target)
    path = kt.export.export_translator(
        model, source, target, tmp_path / "beam", max_new_tokens=10, num_beams=3
    )
    translate = tf.saved_model.load(path).signatures["translate"]
    sentences = SENTENCES[:6]
    out = translate(sentences=tf.constant(sentences))["translation"].numpy().tolist()
    beams = expected(model, source, target, sentences, 10, sampler="beam", num_beams=3)
    assert out == beams
    assert beams != expected(model, source, target, sentences, 10)  # not greedy


class AttendsToPadding(kt.models.Seq2Seq):
    """A source hook the exporter must ask: no source position is padding."""

    def source_mask(self, source):
        return ops.ones_like(source, "bool")


@pytest.mark.slow
def test_the_export_asks_the_model_for_its_source_mask(tmp_path):
    source, target = tokenizers()
    model = make_model(source, target, AttendsToPadding)
    path = kt.export.export_translator(
        model, source, target, tmp_path / "mask", max_new_tokens=10
    )
    translate = tf.saved_model.load(path).signatures["translate"]
    sentences = SENTENCES[:8]
    out = translate(sentences=tf.constant(sentences))["translation"].numpy().tolist()
    assert out[1:] == expected(model, source, target, sentences, 10)[1:]
    plain = expected(make_model(source, target), source, target, sentences, 10)
    assert out[1:] != plain[1:]  # it attends to the padding
    assert out[0] != b""  # "" has no padding to this model: it is translated


def test_custom_start_and_end_tokens(tmp_path):
    source, target = tokenizers()
    model = make_model(source, target)
    path = kt.export.export_translator(
        model, source, target, tmp_path / "custom", start_token="l", end_token=" "
    )
    translate = tf.saved_model.load(path).signatures["translate"]
    sentences = SENTENCES[:16]
    out = translate(sentences=tf.constant(sentences))["translation"].numpy().tolist()
    custom = expected(model, source, target, sentences, start_token="l", end_token=" ")
    assert out == custom
    assert custom != expected(model, source, target, sentences)  # tokens matter
    assert not any(b" " in text for text in out)  # stopped at the end token


def test_bad_arguments(tmp_path):
    source, target = tokenizers()
    model = make_model(source, target)
    export = kt.export.export_translator
    gpt = kt.models.gpt2(
        40,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
    )
    with pytest.raises(ValueError, match="kt.models.Seq2SeqLM.*model=.*'gpt2'"):
        export(gpt, source, target, tmp_path / "a")
    for bad in (0, LIMIT, "5"):
        with pytest.raises(ValueError, match=f"max_new_tokens={bad!r}"):
            export(model, source, target, tmp_path / "a", max_new_tokens=bad)
    with pytest.raises(ValueError, match="length_penalty='long'"):
        export(model, source, target, tmp_path / "a", length_penalty="long")
    with pytest.raises(ValueError, match="num_beams=0"):
        export(model, source, target, tmp_path / "a", num_beams=0)
    with pytest.raises(ValueError, match=r"start_token='\[CLS\]x'"):
        export(model, source, target, tmp_path / "a", start_token="[CLS]x")
    bigger = kt.text.CharTokenizer(kt.text.build_char_vocabulary([TARGET + "0123"]))
    with pytest.raises(ValueError, match=r"`target_tokenizer` has \d+ tokens"):
        export(model, source, bigger, tmp_path / "a")
    assert not (tmp_path / "a").exists()
