"""kt.tasks.Translator and Summarizer: the hand-wired path's text,
transformers' text on the Marian and BART fixtures, the export's text
served without the library, save/load round trips and fit."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.export.test_translator import (
    LIMIT,
    SENTENCES,
    TARGET,
    expected,
    make_model,
    tokenizers,
)
from tests.helpers import run_export_test

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")
TEXTS = [s for s in SENTENCES if s][:16]  # the tasks refuse empty texts
LONG = SENTENCES[2]  # longer than the model: cut to its first LIMIT tokens


def reference(name):
    """transformers' rows of the fixture, without the empty text."""
    path = os.path.join(HF, f"{name}_generation.json")
    with open(path, encoding="utf-8") as f:
        return [row for row in json.load(f) if row["text"]]


def decoded(texts):
    return [text.decode() for text in texts]


@pytest.fixture(scope="module")
def translator():
    source, target = tokenizers()
    return kt.tasks.Translator(make_model(source, target), source, target)


@pytest.fixture(scope="module")
def pretrained():
    return {
        name: kt.tasks.from_pretrained(os.path.join(HF, name))
        for name in ("marian_tiny", "bart_tiny")
    }


def hand_wired(task, texts, *args, **kwargs):
    return decoded(
        expected(task.model, task.source_tokenizer, task.target_tokenizer, texts, *args,
                 **kwargs)
    )  # fmt: skip


def test_translate_is_the_hand_wired_generate(translator):
    """tokenize, cut to LIMIT, generate from [START], cut at [END],
    detokenize: by hand in tests/export/test_translator.py."""
    texts = translator.translate(TEXTS)
    assert texts == hand_wired(translator, TEXTS)
    assert len(set(texts)) > 8  # not degenerate
    assert translator.translate(TEXTS[3]) == texts[3]  # a str for a str
    assert LONG in TEXTS and len(LONG) > LIMIT
    assert translator.translate(LONG) == translator.translate(LONG[:LIMIT])


def test_sampler_options_reach_generate(translator):
    texts = TEXTS[:6]
    short = translator.translate(texts, max_new_tokens=5)
    assert short == hand_wired(translator, texts, 5)
    beams = translator.translate(texts, max_new_tokens=10, sampler="beam", num_beams=3)
    assert beams == hand_wired(translator, texts, 10, sampler="beam", num_beams=3)
    assert beams != translator.translate(texts, max_new_tokens=10)  # not greedy
    options = {"max_new_tokens": 8, "sampler": "top_k", "top_k": 5}
    sampled = translator.translate(texts, seed=7, **options)
    assert sampled == hand_wired(translator, texts, 8, sampler="top_k", top_k=5, seed=7)
    assert sampled != translator.translate(texts, seed=8, **options)


def test_export_serves_translate_without_the_library(translator, tmp_path):
    path = translator.export(tmp_path / "translator")
    requests = [("translate", {"sentences": TEXTS})]
    names, (served,) = run_export_test(path, requests, tmp_path)
    assert names == ["serving_default", "translate"]
    assert decoded(served["translation"]) == translator.translate(TEXTS)


def test_from_pretrained_picks_the_task_and_its_tokenizers(pretrained):
    marian, bart = pretrained["marian_tiny"], pretrained["bart_tiny"]
    assert type(marian) is kt.tasks.Translator
    assert type(bart) is kt.tasks.Summarizer
    # Marian's two SentencePiece models; BART's one tokenizer.
    assert marian.source_tokenizer is not marian.target_tokenizer
    assert marian.source_tokenizer is marian.tokenizer
    assert bart.source_tokenizer is bart.target_tokenizer is bart.tokenizer
    with pytest.raises(ValueError, match="BartForConditionalGeneration"):
        kt.tasks.Translator.from_pretrained(os.path.join(HF, "bart_tiny"))
    with pytest.raises(ValueError, match="MarianMTModel"):
        kt.tasks.Summarizer.from_pretrained(os.path.join(HF, "marian_tiny"))


@pytest.mark.parametrize("name", ["marian_tiny", "bart_tiny"])
def test_text_is_transformers_beam_and_greedy(pretrained, name):
    """The checkpoint's own beam search by default, greedy when asked; the
    texts include one longer than the model and accented ones."""
    task, rows = pretrained[name], reference(name)
    run = task.translate if name == "marian_tiny" else task.summarize
    texts = [row["text"] for row in rows]
    assert run(texts) == [row["beam_text"] for row in rows]
    assert run(texts, sampler="greedy") == [row["greedy_text"] for row in rows]
    assert run(texts[1]) == rows[1]["beam_text"]


@pytest.mark.parametrize("name", ["marian_tiny", "bart_tiny"])
def test_a_blank_line_is_translated_as_transformers_translates_it(pretrained, name):
    # A file translated line by line has blank lines: transformers
    # translates "" (its ids are the end token alone), and so do we.
    task = pretrained[name]
    run = task.translate if name == "marian_tiny" else task.summarize
    path = os.path.join(HF, f"{name}_generation.json")
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)
    blank = [i for i, row in enumerate(rows) if not row["text"]]
    assert blank  # the fixture has one
    texts = [row["text"] for row in rows][: blank[0] + 2]
    assert run(texts) == [row["beam_text"] for row in rows][: blank[0] + 2]
    assert run("") == rows[blank[0]]["beam_text"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, signature, argument, output",
    [
        # BART's summarizer export is served against transformers in
        # tests/pretrained/test_seq2seq.py; Marian covers the task's wiring.
        ("marian_tiny", "translate", "sentences", "translation"),
    ],
)
def test_pretrained_export_serves_the_tasks_text(
    pretrained, tmp_path, name, signature, argument, output
):
    """Beam search with the checkpoint's settings, served without the
    library, gives the task's text (and so transformers')."""
    task, rows = pretrained[name], reference(name)
    texts = [row["text"] for row in rows]
    path = task.export(tmp_path / "saved")
    names, (served,) = run_export_test(path, [(signature, {argument: texts})], tmp_path)
    assert names == ["serving_default", signature]
    run = task.translate if name == "marian_tiny" else task.summarize
    assert decoded(served[output]) == run(texts) == [r["beam_text"] for r in rows]


def test_save_and_load_give_the_same_text(pretrained, translator, tmp_path):
    marian = pretrained["marian_tiny"]
    texts = [row["text"] for row in reference("marian_tiny")][:4]
    options = {"max_new_tokens": 6, "sampler": "greedy"}
    path = marian.save(tmp_path / "marian.keras")
    # kt.tasks.load is keras.saving.load_model plus checks (tests/tasks/test_base.py).
    for loaded in (kt.tasks.load(path),):
        assert type(loaded) is kt.tasks.Translator
        assert loaded.model.generation_config == marian.model.generation_config
        assert loaded.translate(texts, **options) == marian.translate(texts, **options)
    # One tokenizer for both sides is saved once and loads as one object.
    source = translator.source_tokenizer
    shared = kt.tasks.Translator(translator.model, source)
    assert shared.get_config()["target_tokenizer"] is None
    loaded = kt.tasks.load(shared.save(tmp_path / "shared.keras"))
    assert loaded.target_tokenizer is loaded.source_tokenizer
    assert loaded.get_config() == shared.get_config()


def test_summarizer_save_and_load_give_the_same_summary(pretrained, tmp_path):
    bart = pretrained["bart_tiny"]
    texts = [row["text"] for row in reference("bart_tiny")][:3]
    path = bart.save(tmp_path / "bart.keras")
    for loaded in (kt.tasks.load(path),):
        assert type(loaded) is kt.tasks.Summarizer
        assert loaded.summarize(texts, sampler="greedy") == bart.summarize(
            texts, sampler="greedy"
        )


def test_fit_is_the_hand_wired_fit():
    """fit(pairs) trains as model.fit on kt.text.translation_dataset; an
    uncompiled task compiles itself and learns."""
    source, target = tokenizers()
    pairs = [(text, text[::-1]) for text in TEXTS[:8]]

    def compiled(model):
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        )
        return model

    task = compiled(kt.tasks.Translator(make_model(source, target), source, target))
    task.fit(pairs, batch_size=4, epochs=2, verbose=0)
    model = compiled(make_model(source, target))
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    data = tf.data.Dataset.from_tensor_slices((sources, targets))
    model.fit(
        kt.text.translation_dataset(data, source, LIMIT, 4, target_tokenizer=target),
        epochs=2,
        verbose=0,
    )
    for ours, theirs in zip(task.model.weights, model.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    untrained = make_model(source, target).weights
    assert not np.array_equal(task.model.weights[0].numpy(), untrained[0].numpy())
    fresh = kt.tasks.Translator(make_model(source, target), source, target)
    history = fresh.fit(data, batch_size=4, epochs=4, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]


def test_fit_trains_a_checkpoint_as_transformers_does():
    """Marian's labels are the target's ids with their </s>, its decoder
    inputs the decoder start token and the labels but the last (as
    transformers' shift_tokens_right makes them), both padded to the
    model's length: fit(pairs) is model.fit on those, by hand."""
    folder = os.path.join(HF, "marian_tiny")
    task, model = kt.tasks.from_pretrained(folder), kt.models.from_pretrained(folder)
    assert model.dropout > 0  # dropout in training, as in transformers
    for ours, theirs in zip(task.model.variables, model.variables, strict=True):
        theirs.assign(ours)  # the weights, and the dropout seeds' states
    pairs = [
        ("the cat sat on the mat .", "die katze sass auf der matte ."),
        ("we go", "wir gehen"),
    ]
    limit, start = model.max_sequence_length, model.decoder_start_token_id
    arrays = {name: np.zeros((2, limit), "int32") for name in ("enc", "dec", "lab")}
    for i, (source, target) in enumerate(pairs):
        ids = task.source_tokenizer.tokenize(source).numpy()
        labels = task.target_tokenizer.tokenize(target).numpy()
        assert labels[-1] == task.target_tokenizer.token_to_id("</s>")
        arrays["enc"][i, : len(ids)] = ids
        arrays["dec"][i, : len(labels)] = [start, *labels[:-1]]
        arrays["lab"][i, : len(labels)] = labels
    for trained in (task, model):
        trained.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        )
    task.fit(pairs, batch_size=2, epochs=2, verbose=0)
    inputs = {"encoder_token_ids": arrays["enc"], "decoder_token_ids": arrays["dec"]}
    model.fit(inputs, arrays["lab"], batch_size=2, epochs=2, verbose=0, shuffle=False)
    for ours, theirs in zip(task.model.weights, model.weights, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-6)
    untrained = kt.models.from_pretrained(folder).weights[0].numpy()
    assert not np.allclose(task.model.weights[0].numpy(), untrained)


def test_bad_input_is_refused_before_any_work(translator, pretrained):
    for bad in ([], (), 5, None, b"bytes", ["a", 3]):
        with pytest.raises(ValueError, match="`texts`"):
            translator.translate(bad)
        with pytest.raises(ValueError, match="`texts`"):
            pretrained["bart_tiny"].summarize(bad)
    for bad in (0, LIMIT, "5", -1):
        with pytest.raises(ValueError, match=f"max_new_tokens={bad!r}"):
            translator.translate("the", max_new_tokens=bad)
    with pytest.raises(ValueError, match="'nope'"):
        translator.translate("the", sampler="nope")
    for bad in ([], "ab", [("a",)], [("a", 3)], [["a", "b", "c"]], [None]):
        with pytest.raises(ValueError, match="`pairs`"):
            translator.fit(bad)
    with pytest.raises(ValueError, match="dataset"):
        translator.fit(tf.data.Dataset.from_tensor_slices([1, 2]))
    with pytest.raises(ValueError, match="`pairs`.*element_spec"):
        pretrained["marian_tiny"].fit(tf.data.Dataset.from_tensor_slices([1, 2]))
    source, target = tokenizers()
    model = translator.model
    gpt = kt.models.gpt2(40, num_layers=1, num_heads=2, hidden_dim=8,
                         intermediate_dim=16, max_sequence_length=8)  # fmt: skip
    with pytest.raises(ValueError, match="kt.models.Seq2Seq.*'gpt2'"):
        kt.tasks.Translator(gpt, source)
    with pytest.raises(ValueError, match="tokenizer='source'"):
        kt.tasks.Translator(model, "source")
    with pytest.raises(ValueError, match="target_tokenizer='target'"):
        kt.tasks.Translator(model, source, "target")
    bigger = kt.text.CharTokenizer(kt.text.build_char_vocabulary([TARGET + "0123"]))
    with pytest.raises(ValueError, match=r"`target_tokenizer` has \d+ tokens"):
        kt.tasks.Translator(model, source, bigger)
    with pytest.raises(ValueError, match="kt.models.Seq2Seq.*'gpt2'"):
        kt.tasks.Summarizer(gpt, source)
