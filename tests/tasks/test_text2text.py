"""T5 through the tasks: `kt.tasks.from_pretrained` gives a `Text2Text`
whose text equals transformers' (FLAN-style, greedy); `Summarizer` and
`Translator` read t5's `task_specific_params` (prefix and beam settings)
and their text equals transformers' summarization; the SavedModels (one
served by TensorFlow alone) and the `.keras` file give the same text;
`<unk>` and ids past the tokenizer are not written (as transformers'
decode); `fit` trains on string pairs."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import run_export_test

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")


def reference(name):
    with open(os.path.join(HF, f"{name}_reference.json"), encoding="utf-8") as f:
        return json.load(f)


def shorter(model, length=64):
    """`model` with a shorter `max_sequence_length` (the same weights):
    relative positions have no limit, so it computes the same numbers, and
    exports and `fit` pad to 64 positions, not 512."""
    config = {**model.get_config(), "max_sequence_length": length}
    short = type(model).from_config(config)
    short.set_weights(model.get_weights())
    return short


@pytest.fixture(scope="module")
def summarizer():
    task = kt.tasks.Summarizer.from_pretrained(os.path.join(HF, "t5_tiny"))
    return kt.tasks.Summarizer(shorter(task.model), task.tokenizer)


@pytest.fixture(scope="module")
def flan():
    return kt.tasks.from_pretrained(os.path.join(HF, "flan_t5_tiny"))


def test_from_pretrained_gives_text2text_whose_text_is_transformers(flan):
    task = flan
    assert isinstance(task, kt.tasks.Text2Text) and task.prefix == ""
    case = reference("flan_t5_tiny")["greedy"]
    assert task(case["prompts"], max_new_tokens=12) == case["text"]
    assert task.generate(case["prompts"][0], max_new_tokens=12) == case["text"][0]


def forced_first(name, which):
    """The `forced_first` reference whose first new token is `<unk>`
    ("unknown") or an id past the tokenizer ("past")."""
    cases = reference(name)["forced_first"]
    return cases[{"unknown": 0, "past": 1}[which]]


@pytest.mark.parametrize("which", ["unknown", "past"])
def test_text2text_drops_unknown_and_ids_past_the_tokenizer(flan, which):
    """transformers' greedy text when the first new token is `<unk>` or an
    id of the model's padded vocabulary past the tokenizer: neither is
    written (real T5 checkpoints emit both)."""
    case = forced_first("flan_t5_tiny", which)
    forced = case["kwargs"]["forced_bos_token_id"] + 1
    assert all(row[1] + 1 == forced for row in case["ids"])
    texts = flan(case["prompts"], max_new_tokens=12, forced_first_token_id=forced)
    assert texts == case["text"]


def test_summarizer_uses_the_task_prefix_and_settings(summarizer, tmp_path):
    """transformers' summarization of t5-small-style settings: "summarize: ",
    4 beams, length_penalty 2, min_length 5, no_repeat_ngram_size 3; the
    export and the `.keras` file give the same text."""
    case = reference("t5_tiny")["summarize"]
    prompts = [p.removeprefix("summarize: ") for p in case["prompts"]]
    assert summarizer.task == "summarization"
    assert summarizer.prefix == "summarize: "
    assert summarizer.summarize(prompts) == case["text"]
    path = summarizer.export(str(tmp_path / "export"))
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    served = tf.saved_model.load(path).signatures["summarize"]
    texts = served(documents=tf.constant(prompts))["summary"].numpy()
    assert [t.decode() for t in texts] == case["text"]
    summarizer.save(str(tmp_path / "task.keras"))
    again = kt.tasks.load(str(tmp_path / "task.keras"))
    assert (again.task, again.prefix) == ("summarization", "summarize: ")
    assert again._generation_config() == summarizer._generation_config()
    for ours, saved in zip(
        summarizer.model.get_weights(), again.model.get_weights(), strict=True
    ):
        np.testing.assert_array_equal(ours, saved)  # so the same summaries


def test_translator_reads_a_translation_entry(summarizer):
    model, tokenizer = summarizer.model, summarizer.tokenizer
    translator = kt.tasks.Translator(model, tokenizer)
    assert translator.prefix == "translate English to German: "
    french = kt.tasks.Translator(model, tokenizer, task="translation_en_to_fr")
    assert french.prefix == "translate English to French: "
    assert french._generation_config()["num_beams"] == 4
    with pytest.raises(ValueError, match="task='summarise'"):
        kt.tasks.Translator(model, tokenizer, task="summarise")
    plain = kt.tasks.Text2Text(model, tokenizer)
    assert plain.prefix == "" and plain._generation_config()["sampler"] == "greedy"


def test_text2text_export_and_fit(flan, tmp_path):
    """The SavedModel, served by TensorFlow alone, gives the task's and
    transformers' text (its first token forced past the tokenizer: dropped
    in the graph too)."""
    task = flan  # its decode loop compiled by the test above: reused
    case = forced_first("flan_t5_tiny", "past")
    prompts = case["prompts"]
    forced = case["kwargs"]["forced_bos_token_id"] + 1
    expected = task(prompts, max_new_tokens=12, forced_first_token_id=forced)
    settings = {**task._generation_config(), "forced_first_token_id": forced}
    path = task.export(
        str(tmp_path / "export"), max_new_tokens=12, generation_config=settings
    )
    _, (served,) = run_export_test(path, [("generate", {"texts": prompts})], tmp_path)
    assert [t.decode() for t in served["text"]] == expected == case["text"]
    before = [np.asarray(w).copy() for w in task.model.trainable_weights[:3]]
    pairs = [("Who is Titus?", "a Roman"), ("Who is Lartius?", "a Roman")] * 4
    history = task.fit(pairs, batch_size=4, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0] and np.isfinite(losses).all()
    after = task.model.trainable_weights[:3]
    assert any(
        not np.array_equal(b, np.asarray(a)) for b, a in zip(before, after, strict=True)
    )
