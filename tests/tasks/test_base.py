"""kt.tasks: the registry, loading saved tasks, and saving that never leaves
a partial file."""

import json
import os
import shutil

import keras
import pytest

import keras_transformer as kt

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")


def tiny_generator():
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(["abc"]))
    model = kt.models.gpt2(
        tokenizer.vocabulary_size(), num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=8,
    )  # fmt: skip
    return kt.tasks.TextGenerator(model, tokenizer)


def test_each_served_architecture_names_a_task_class():
    # The families' records name the tasks; every name is a task class.
    families = kt.pretrained.registry
    names = set(kt.tasks.registry.TASKS)
    tasks = {getattr(kt.tasks, n) for n in kt.tasks.__all__} - {kt.tasks.Task}
    tasks = {c for c in tasks if isinstance(c, type) and issubclass(c, kt.tasks.Task)}
    assert names == {cls.__name__ for cls in tasks}
    assert len(tasks) == 9 and kt.tasks.GenerationOptions not in tasks
    served = families.served_architectures()
    assert len(served) == 13  # ... T5ForConditionalGeneration, ViT, Whisper
    assert {families.task_for(a) for a in served} <= names

    class MyGenerator(kt.tasks.TextGenerator):
        pass

    assert families.architectures_of(MyGenerator) == (
        "GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM",
        "Qwen2ForCausalLM", "Gemma3ForCausalLM",
    )  # fmt: skip
    assert kt.tasks.registry.task_class("GPT2LMHeadModel") is kt.tasks.TextGenerator
    assert kt.tasks.registry.task_class("qwen2") is kt.tasks.TextGenerator
    assert kt.tasks.registry.task_class("GPT2Model") is None
    assert kt.tasks.registry.task_class("Nope") is None
    # T5 folders: Text2Text by default, Summarizer and Translator by name.
    assert kt.tasks.registry.task_class("t5") is kt.tasks.Text2Text
    for task in (kt.tasks.Summarizer, kt.tasks.Translator):
        assert "T5ForConditionalGeneration" in families.architectures_of(task)
    assert "T5ForConditionalGeneration" not in families.architectures_of(
        kt.tasks.TextGenerator
    )


def test_a_folder_no_task_serves_is_refused(tmp_path):
    folder = tmp_path / "folder"
    shutil.copytree(os.path.join(HF, "gpt2_tiny"), folder)
    config = json.load(open(folder / "config.json"))
    config["architectures"] = ["GPT2ForTokenClassification"]
    json.dump(config, open(folder / "config.json", "w"))
    with pytest.raises(ValueError, match="GPT2ForTokenClassification"):
        kt.tasks.from_pretrained(folder)
    with pytest.raises(FileNotFoundError, match="config.json"):
        kt.tasks.from_pretrained(tmp_path / "missing")


@pytest.mark.parametrize(
    "name, architectures, task",
    [
        ("gpt2_tiny", None, kt.tasks.TextGenerator),
        ("bert_tiny", [], kt.tasks.SentenceEncoder),
        ("gpt2_tiny", "missing", kt.tasks.TextGenerator),
    ],
)
def test_a_folder_without_architectures_is_read_by_its_model_type(
    tmp_path, name, architectures, task
):
    # As `config.save_pretrained` writes after some conversions, and many
    # merged or fine-tuned repositories carry: transformers reads them by
    # `model_type`.
    folder = tmp_path / "folder"
    shutil.copytree(os.path.join(HF, name), folder)
    config = json.load(open(folder / "config.json"))
    config.pop("architectures")
    if architectures != "missing":
        config["architectures"] = architectures
    json.dump(config, open(folder / "config.json", "w"))
    assert type(kt.tasks.from_pretrained(folder)) is task


def test_load_refuses_what_is_not_a_saved_task(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.keras"):
        kt.tasks.load(tmp_path / "missing.keras")
    with pytest.raises(ValueError, match="path"):
        kt.tasks.load(tmp_path / "task.h5")
    model = tiny_generator().model
    model.save(tmp_path / "model.keras")
    with pytest.raises(ValueError, match="not a task"):
        kt.tasks.load(tmp_path / "model.keras")


def test_a_failed_save_leaves_no_file(tmp_path, monkeypatch):
    task = tiny_generator()
    path = task.save(tmp_path / "task.keras")
    before = open(path, "rb").read()

    def fail(model, filepath, **kwargs):
        with open(filepath, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(keras.saving, "save_model", fail)
    with pytest.raises(OSError, match="disk full"):
        task.save(tmp_path / "other.keras")
    with pytest.raises(OSError, match="disk full"):
        task.save(path)
    assert sorted(os.listdir(tmp_path)) == ["task.keras"]
    assert open(path, "rb").read() == before  # the earlier file is untouched


def test_save_checks_its_path(tmp_path):
    task = tiny_generator()
    with pytest.raises(ValueError, match="path"):
        task.save(tmp_path / "task.h5")
    task.save(tmp_path / "task.keras")
    with pytest.raises(ValueError, match="overwrite"):
        task.save(tmp_path / "task.keras", overwrite=False)


def test_a_task_refuses_the_wrong_model_or_tokenizer():
    task = tiny_generator()
    bert = kt.models.bert(
        30, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match="CausalLM"):
        kt.tasks.TextGenerator(bert, task.tokenizer)
    with pytest.raises(ValueError, match="tokenizer"):
        kt.tasks.TextGenerator(task.model, "abc")
    with pytest.raises(ValueError, match="end_token"):
        kt.tasks.TextGenerator(task.model, task.tokenizer, end_token="<nope>")


def test_a_task_used_for_generation_is_freed_when_dropped():
    # The compiled functions of a model and its tokenizer live on them: a
    # weak-keyed table of functions closing over their owners kept every
    # model and tokenizer ever decoded in memory.
    import gc
    import weakref

    task = tiny_generator()
    assert isinstance(task.generate("ab", max_new_tokens=2), str)
    refs = [weakref.ref(o) for o in (task, task.model, task.tokenizer)]
    del task
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]


def test_a_folder_s_config_json_is_read_once_per_load(monkeypatch):
    """The task, the model, the family and the tokenizer reader all look at
    `config.json` (they read it 6 times before); one load opens it once,
    and the next load reads it again."""
    import builtins

    folder = os.path.join(HF, "gpt2_tiny")
    opened = []
    real = builtins.open

    def counting(file, *args, **kwargs):
        opened.append(os.path.basename(os.fspath(file)))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    kt.tasks.from_pretrained(folder)
    assert opened.count("config.json") == 1, opened
    kt.models.from_pretrained(folder)
    kt.text.tokenizer_from_pretrained(folder)
    assert opened.count("config.json") == 3, opened
    assert opened.count("tokenizer.json") <= 2, opened
