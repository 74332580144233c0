"""Each compiled decode loop is traced once, whatever varies between calls
(TensorFlow's own trace count, not our log), no call pattern makes
TensorFlow warn of retracing, and a one-shot request decodes in the
smallest buffer that holds it."""

import logging

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.generation import decode
from keras_transformer.generation.stream import ChunkedDecoding
from tests.helpers import spread_weights


@pytest.fixture(scope="module")
def gpt():
    keras.utils.set_random_seed(3)
    return spread_weights(
        kt.models.gpt2(40, num_layers=1, num_heads=2, hidden_dim=8,
                       intermediate_dim=16, max_sequence_length=1024, dropout=0.0)
    )  # fmt: skip


def loops(model):
    """The model's compiled functions: `{key: tf.function}`."""
    return decode._COMPILED.of(model)


def prompts(rng, batch, length):
    """`(batch, length)` ids, every row but the first cut short (padded)."""
    rows = rng.integers(1, 40, (batch, length))
    for i in range(1, batch):
        rows[i, rng.integers(1, length) :] = 0
    return rows


def test_one_loop_per_shape_and_sampler_each_traced_once(gpt):
    """Calls that vary prompts, prompt lengths, `max_new_tokens`, seeds, end
    ids (none, one, a list of two or three), batch rows and sampler
    settings: every function is traced exactly once (a varying end-id
    shape used to retrace one function 1 -> 2 -> 3 times)."""
    rng = np.random.default_rng(0)
    calls = [
        dict(max_new_tokens=6),
        dict(max_new_tokens=9, end_token_id=5),
        dict(max_new_tokens=3, end_token_id=[5, 6]),
        dict(max_new_tokens=12, end_token_id=[5, 6, 7]),
        dict(max_new_tokens=7, end_token_id=(7, 5, 6, 9)),
        dict(max_new_tokens=6, sampler="top_k", top_k=3, seed=1),
        dict(max_new_tokens=8, sampler="top_k", top_k=3, seed=2, end_token_id=5),
        dict(max_new_tokens=6, sampler="temperature", temperature=0.7),
        dict(max_new_tokens=9, sampler="temperature", temperature=0.7, seed=4),
    ]
    for i, call in enumerate(calls):
        batch = (3, 1, 3, 3, 8, 3, 3, 3, 3)[i]
        kt.generation.generate(gpt, prompts(rng, batch, 4 + i), **call)
    functions = loops(gpt)
    counts = {key: f.experimental_get_tracing_count() for key, f in functions.items()}
    assert set(counts.values()) == {1}, counts
    # greedy at batch 3, 1 and 8, top_k, temperature: each one loop (all
    # requests fit a 32-position buffer and four end ids).
    assert len(functions) == 5
    assert {key[-1][1:] for key in functions} == {(32, 1, 4)}


def test_the_outside_scripts_pattern_logs_no_retracing_warning(gpt, caplog):
    """Batch 3, 1 and 8, cached and uncached, 24, 5 and 240 new tokens: six
    loops of one model, and TensorFlow never says "retracing" (it counted
    the traces of one closure's functions together)."""
    rng = np.random.default_rng(1)
    caplog.set_level(logging.WARNING)
    news = iter((24, 5, 240, 24, 5, 240))
    for batch in (3, 1, 8):
        for use_cache in (True, False):
            kt.generation.generate(
                gpt, prompts(rng, batch, 16), next(news), use_cache=use_cache
            )
    assert len(loops(gpt)) >= 6
    warned = [r.getMessage() for r in caplog.records if "retracing" in r.getMessage()]
    assert warned == []


def test_a_one_shot_request_decodes_in_the_smallest_bucket(gpt):
    """16 + 240 positions decode in a 256-position buffer and 16 + 24 in 64
    (powers of two from 32), as `generate` and `ChunkedDecoding` (the tasks'
    pieces) build them; `min_buffer_length` (a chat's 512) raises it."""
    rng = np.random.default_rng(2)
    ids = prompts(rng, 2, 16)

    def buffer(**options):
        request = ChunkedDecoding(gpt, ids, **options).request
        return request["tokens"].shape[1]

    assert buffer(max_new_tokens=240) == 256
    assert buffer(max_new_tokens=24) == 64
    assert buffer(max_new_tokens=24, min_buffer_length=512) == 512
    before = set(loops(gpt))
    kt.generation.generate(gpt, ids, 24)
    (key,) = set(loops(gpt)) - before
    assert key[-1] == (2, 64, 1, 4)  # batch, buffer, source, end ids
    with pytest.raises(ValueError, match="Received: min_buffer_length=0"):
        kt.generation.generate(gpt, ids, 24, min_buffer_length=0)
