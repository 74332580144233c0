"""`kt.serving.Engine` without HTTP: each row of one cache at its own
position equals that row alone, for every decoder-only family; the engine
decodes what `generate` does; bad arguments are refused before anything
is queued."""

import re

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.models.decoding import empty_caches

TINY = {"num_layers": 2, "hidden_dim": 8, "intermediate_dim": 16,
        "max_sequence_length": 32}  # fmt: skip
FAMILIES = {
    "llama_window": lambda: kt.models.llama(
        50, num_heads=4, num_key_value_heads=2, sliding_window=3, **TINY
    ),
    "gpt2": lambda: kt.models.gpt2(50, num_heads=2, **TINY),
    "gemma3": lambda: kt.models.gemma3(
        50, num_heads=2, num_key_value_heads=1, head_dim=4, **TINY
    ),
}
PROMPTS = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]


def close(ours, alone):
    np.testing.assert_allclose(
        np.asarray(ours), np.asarray(alone), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rows_at_their_own_positions_equal_each_row_alone(family):
    """One cached step over 3 rows at positions 5, 2, 3 (the (B,) index of
    the attention, rotary and position layers) gives each row's logits and
    cache as the row alone with a scalar index (to float32 rounding: the
    kernels of a batch of 4 and of 1 may sum in another order); a row
    whose position is past the cache writes nothing."""
    model = FAMILIES[family]()
    alone_logits, alone_caches = [], []
    for prompt in PROMPTS:
        caches = empty_caches(model.blocks, np.zeros((1, 16), "int32"))
        _, caches = model.chunk_logits(tf.constant([prompt]), caches, 0)
        logits, caches = model.chunk_logits(tf.constant([[13]]), caches, len(prompt))
        alone_logits.append(logits[0, 0].numpy())
        alone_caches.append(caches)
    batch = [tf.concat(rows, 0) for rows in zip(*alone_caches, strict=True)]
    before = [c.numpy() for c in batch]
    positions = tf.constant([len(p) for p in PROMPTS] + [16], tf.int32)
    batch = [tf.concat([c, c[:1]], 0) for c in batch]  # a 4th row, idle
    logits, caches = model.chunk_logits(tf.constant([[13]] * 4), batch, positions)
    for i in range(3):
        close(logits[i, 0], alone_logits[i])
        for cache, alone in zip(caches, alone_caches[i], strict=True):
            close(cache[i], alone[0])
    for cache, old in zip(caches, before, strict=True):
        np.testing.assert_array_equal(cache[3].numpy(), old[0])  # untouched


@pytest.fixture(scope="module")
def generator():
    return kt.tasks.TextGenerator.from_pretrained("tests/fixtures/hf/gpt2_tiny")


@pytest.fixture(scope="module")
def engine(generator):
    return kt.serving.Engine(generator, slots=2, context_length=32)


def test_the_engine_decodes_what_generate_does(generator, engine):
    """5 greedy prompts of different lengths through 2 slots (3 wait) equal
    `generate` on each alone; a cancelled request frees its slot."""
    prompts = [list(range(5, 5 + n)) for n in (3, 20, 1, 25, 7)]
    replies = [
        engine.submit(p, max_new_tokens=6, temperature=0, end_token_ids=())
        for p in prompts
    ]
    cancelled = engine.submit([5, 6], max_new_tokens=20, end_token_ids=())
    cancelled.cancel()
    engine.run_until_idle(timeout=300)
    for prompt, reply in zip(prompts, replies, strict=True):
        alone = kt.generation.generate(generator.model, np.array([prompt]), 6)
        assert reply.token_ids == alone[0, len(prompt) :].tolist()
        assert reply.finish_reason == "length" and reply.wait(1) == reply.text
    assert cancelled.finish_reason == "cancelled" and engine.busy_slots == 0
    assert engine.counters["prompt_tokens"] == sum(map(len, prompts))


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"prompt_ids": []}, "Received: prompt_ids of 0 ids"),
        ({"prompt_ids": [0, 5]}, "prompt_ids"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 31}, "must fit the context of 32 tokens"),
        ({"temperature": -1}, "Received: temperature=-1"),
        ({"top_p": 0}, "Received: top_p=0"),
        ({"top_k": -2}, "Received: top_k=-2"),
        ({"seed": "1"}, "Received: seed='1'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_queued(
    engine, arguments, message
):
    requests = engine.counters["requests"]
    options = {"prompt_ids": [5, 6], "max_new_tokens": 4} | arguments
    with pytest.raises(ValueError, match=re.escape(message)):
        engine.submit(options.pop("prompt_ids"), **options)
    assert engine.counters["requests"] == requests and engine.queued == 0


def test_bad_engine_arguments(generator):
    with pytest.raises(
        ValueError, match="multiple of 32 .* Received: context_length=40"
    ):
        kt.serving.Engine(generator, context_length=40)
    with pytest.raises(ValueError, match="Received: generator="):
        kt.serving.Engine(generator.model)


def test_a_request_that_fails_in_the_loop_fails_alone(engine, monkeypatch):
    """A row whose text cannot be made (here: a detokenizer that fails on
    one prompt) ends with its error; the row beside it runs to its end."""
    from keras_transformer.serving import engine as engine_module

    texts = engine_module.text_stream.texts

    def failing(tokenizer, ids, prompts):
        if any(prompt[0] == 99 for prompt in prompts):
            raise RuntimeError("cannot decode")
        return texts(tokenizer, ids, prompts)

    monkeypatch.setattr(engine_module.text_stream, "texts", failing)
    bad = engine.submit([99, 5], max_new_tokens=4, temperature=0, end_token_ids=())
    good = engine.submit([5, 6], max_new_tokens=4, temperature=0, end_token_ids=())
    engine.run_until_idle(timeout=300)
    assert bad.finish_reason == "error"
    with pytest.raises(RuntimeError, match="cannot decode"):
        bad.wait(1)
    assert good.finish_reason == "length" and len(good.token_ids) == 4
    assert engine.busy_slots == 0
