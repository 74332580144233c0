"""TextGenerator on today's decoders: a Qwen2 folder (the tiny random
checkpoint with the tiny byte-level BPE tokenizer and its ChatML
template) loads as a task, and `chat` replies as the hand-wired path."""

import os
import shutil

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_export_test

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")
MESSAGES = [{"role": "user", "content": "Hello there, how are you?"}]


def chat_folder(folder, weights="qwen2_tiny"):
    """`folder` holding the `weights` fixture and the ChatML tokenizer."""
    for source in [weights, os.path.join("tokenizers", "qwen2_bpe")]:
        for name in os.listdir(os.path.join(HF, source)):
            if name != "config.json" or source == weights:
                shutil.copy(os.path.join(HF, source, name), folder / name)
    return str(folder)


@pytest.fixture(scope="module")
def chatter(tmp_path_factory):
    return kt.tasks.from_pretrained(chat_folder(tmp_path_factory.mktemp("chat")))


def hand_wired(task, messages, new, ends):
    ids = task.tokenizer.tokenize_chat(messages, add_generation_prompt=True)
    ids = np.asarray(ids)[None]
    out = kt.generation.generate(task.model, ids, new, end_token_id=ends)[0]
    out = out[ids.shape[1] :]
    out = (
        out[: np.flatnonzero(np.isin(out, ends))[0]]
        if np.isin(out, ends).any()
        else out
    )
    return task.tokenizer.detokenize(out[None]).numpy()[0].decode()


def test_a_qwen2_folder_is_a_text_generator_whose_chat_is_the_hand_wired_path(
    chatter,
):
    assert type(chatter) is kt.tasks.TextGenerator
    assert type(chatter.model) is kt.models.Llama
    eos = chatter.tokenizer.token_to_id("<|im_end|>")
    reply = chatter.chat(MESSAGES, max_new_tokens=8)
    assert reply == hand_wired(chatter, MESSAGES, 8, [eos])
    pieces = list(
        chatter.chat(MESSAGES, max_new_tokens=8, stream=True, stream_chunk_size=1)
    )
    assert len(pieces) > 1 and "".join(pieces) == reply
    # The prompt is the template's rendering, tokenized as transformers does.
    rendered = chatter.tokenizer.apply_chat_template(MESSAGES)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert chatter.generate(rendered, max_new_tokens=8) == reply


def test_chat_stops_at_the_templates_end_token(chatter):
    """With a later token of a free reply as the template's end token, the
    reply is the text of the tokens before it."""
    tokenizer = chatter.tokenizer
    ids = np.asarray(tokenizer.tokenize_chat(MESSAGES))[None]
    free = kt.generation.generate(chatter.model, ids, 12)[0, ids.shape[1] :]
    cut = next(i for i in range(1, 12) if free[i] not in free[:i])
    saved = tokenizer.special_tokens_map
    tokenizer.special_tokens_map = {
        **saved,
        "eos_token": tokenizer.id_to_token(int(free[cut])),
    }
    try:
        reply = chatter.chat(MESSAGES, max_new_tokens=12)
    finally:
        tokenizer.special_tokens_map = saved
    assert reply == tokenizer.detokenize(free[None, :cut]).numpy()[0].decode()
    assert reply != chatter.chat(MESSAGES, max_new_tokens=12)


def test_chat_bad_input(chatter):
    for bad in [[{"role": "user"}], [{"content": "hi"}], "hi", []]:
        with pytest.raises(ValueError, match="message"):
            chatter.chat(bad)
    gpt = kt.tasks.from_pretrained(os.path.join(HF, "gpt2_tiny"))
    with pytest.raises(ValueError, match="chat template"):
        gpt.chat(MESSAGES)


def test_export_serves_a_conversation_rendered_by_the_client(chatter, tmp_path):
    """How to serve a conversation: the client renders it with
    `apply_chat_template`, and the export, made with the template's end
    token as the task's, serves the rendered string as `chat` replies; the
    `.keras` file keeps the template."""
    task = kt.tasks.TextGenerator(
        chatter.model, chatter.tokenizer, end_token="<|im_end|>"
    )
    rendered = task.tokenizer.apply_chat_template(MESSAGES)
    prompts = [rendered, "Digits 1234567, CJK 你好 and an emoji 🙂"]
    expected = task.generate(prompts, max_new_tokens=6)
    assert expected[0] == chatter.chat(MESSAGES, max_new_tokens=6)
    path = task.export(tmp_path / "served", max_new_tokens=6)
    request = {
        "prompts": np.array(prompts, dtype=object),
        "max_new_tokens": np.int32(6),
        "temperature": np.float32(0.0),
    }
    _, (out,) = run_export_test(path, [("generate", request)], tmp_path)
    assert [t.decode() for t in out["generated_text"]] == expected
    loaded = kt.tasks.load(task.save(tmp_path / "chat.keras"))
    assert loaded.tokenizer.apply_chat_template(MESSAGES) == rendered
    assert loaded.chat(MESSAGES, max_new_tokens=6) == expected[0]


def test_a_bfloat16_folder_chats_in_bfloat16(tmp_path):
    task = kt.tasks.from_pretrained(
        chat_folder(tmp_path, "qwen2_tiny_bf16"), dtype="bfloat16"
    )
    assert {w.dtype for w in task.model.weights} == {"bfloat16"}
    eos = task.tokenizer.token_to_id("<|im_end|>")
    reply = task.chat(MESSAGES, max_new_tokens=6)
    assert reply == hand_wired(task, MESSAGES, 6, [eos]) and len(reply) > 2
