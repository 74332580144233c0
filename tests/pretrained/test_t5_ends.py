"""T5 greedy generation stops where transformers' stops: rows reaching
`</s>` at different steps (one at its first token, one never, for
flan_t5_tiny), padding after the end, and the loop ending when every row
has ended, through `kt.generation.generate` and `kt.tasks.Text2Text`
(references: tests/fixtures/hf/make_decoding_references.py, from the
folders as transformers reloads them)."""

import json
import os

import numpy as np
import pytest

import keras_transformer as kt

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
NAMES = ["t5_tiny", "flan_t5_tiny"]
_TASKS = {}


def reference(name):
    path = os.path.join(HF, "t5_ends_reference.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)[name]


def task(name):
    if name not in _TASKS:
        _TASKS[name] = kt.tasks.Text2Text.from_pretrained(os.path.join(HF, name))
    return _TASKS[name]


@pytest.mark.parametrize("name", NAMES)
def test_generation_ends_at_transformers_end_tokens(name):
    """Our ids (less one; padding 0) equal transformers' up to its last
    step, and every row after its end is padding, where transformers pads
    with 0 too; with every row ended (t5_tiny), no row has more tokens."""
    case = reference(name)
    source = np.asarray(case["input_ids"])
    source = np.where(source != 0, source + 1, 0)  # their 0 here: padding
    tokens = kt.generation.generate(
        task(name).model,
        {"encoder_token_ids": source},
        max_new_tokens=case["kwargs"]["max_new_tokens"],
        end_token_id=2,
        sampler="greedy",
    )
    ours = np.maximum(np.asarray(tokens) - 1, 0)
    expected = np.asarray(case["ids"])
    steps = case["steps"]
    np.testing.assert_array_equal(ours[:, : steps + 1], expected)
    assert not ours[:, steps + 1 :].any()  # nothing after transformers' stop
    for row, end in zip(ours, case["ends"], strict=True):
        if end is not None:
            assert row[end] == 1 and not row[end + 1 :].any()


@pytest.mark.parametrize("name", NAMES)
def test_text2text_text_stops_at_the_end_token(name):
    case = reference(name)
    texts = task(name)(case["prompts"], max_new_tokens=20)
    assert texts == case["text"]
    assert "" in texts or name != "t5_tiny"  # a row whose first token ends
