"""Chat templates: each folder's template renders conversations exactly as
transformers' apply_chat_template does (tests/fixtures/hf/tokenizers/
reference.json), in Jinja's sandbox; bad messages are refused."""

import datetime
import json
import os
import sys

import pytest

import keras_transformer as kt
from keras_transformer.text import chat

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
FOLDERS = os.path.join(HF, "tokenizers")
with open(os.path.join(FOLDERS, "reference.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)


NAMES = ["llama_sp", "llama_sp_model_only", "qwen2_bpe", "llama3_bpe", "smollm2_bpe"]


@pytest.fixture(scope="module", params=NAMES)
def folder(request):
    name = request.param
    return name, kt.text.tokenizer_from_pretrained(os.path.join(FOLDERS, name))


def test_renderings_are_transformers(folder):
    name, tokenizer = folder
    for case in REFERENCE[name]["chats"]:
        kwargs = dict(
            add_generation_prompt=case["add_generation_prompt"], tools=case["tools"]
        )
        if case["error"] is not None:  # the template's raise_exception
            with pytest.raises(ValueError, match="refused.*alternate"):
                tokenizer.apply_chat_template(case["messages"], **kwargs)
            continue
        text = tokenizer.apply_chat_template(case["messages"], **kwargs)
        assert text == case["text"], case
        ids = tokenizer.tokenize_chat(case["messages"], **kwargs).numpy().tolist()
        assert [i - 1 for i in ids] == case["ids"], case


def test_bad_messages_are_refused(folder):
    _, tokenizer = folder
    with pytest.raises(ValueError, match="message 1 is not.*'text': 'b'"):
        tokenizer.apply_chat_template([{"role": "user", "content": "a"}, {"text": "b"}])
    with pytest.raises(ValueError, match="message 0 is not.*'content': 'a'"):
        tokenizer.apply_chat_template([{"content": "a"}])
    with pytest.raises(ValueError, match="message 0 is not.*'hello'"):
        tokenizer.apply_chat_template(["hello"])
    with pytest.raises(ValueError, match="`messages` must be a list.*'role'"):
        tokenizer.apply_chat_template({"role": "user", "content": "a"})
    with pytest.raises(ValueError, match="at least one message"):
        tokenizer.apply_chat_template([])


def test_sandbox_globals_and_missing_template(monkeypatch):
    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2024, 7, 26, 9, 30)

    monkeypatch.setattr(chat.datetime, "datetime", Frozen)  # the clock, frozen
    tokens = {"eos_token": "</s>"}
    template = "{{ strftime_now('%d %b %Y') }}{{ eos_token }}{{ {'é': 1} | tojson }}"
    text = chat.render(template, [{"role": "user", "content": ""}], tokens=tokens)
    assert text == '26 Jul 2024</s>{"é": 1}'
    import jinja2.sandbox  # the chat extra, in the test extra

    with pytest.raises(jinja2.sandbox.SecurityError, match="unsafe|access"):
        chat.render(
            "{{ messages.__class__.__mro__ }}", [{"role": "user", "content": ""}]
        )
    with pytest.raises(ValueError, match="no chat template"):
        chat.render(None, [{"role": "user", "content": "a"}])
    with pytest.raises(ValueError, match="not a valid Jinja template"):
        chat.render("{% if %}", [{"role": "user", "content": "a"}])
    generation = "{% generation %}{{ messages[0].content }}{% endgeneration %}"
    assert chat.render(generation, [{"role": "user", "content": "x"}]) == "x"


def test_missing_jinja2_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    chat._compile.cache_clear()
    with pytest.raises(ImportError, match=r"keras-transformer\[chat\]"):
        chat.render("{{ 1 }}", [{"role": "user", "content": "a"}])
    chat._compile.cache_clear()
