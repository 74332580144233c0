"""ChunkedDecoding: generate's decoding in pieces, the KV cache carried
from one piece to the next."""

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.generation.stream import ChunkedDecoding
from tests.helpers import spread_gpt2

PROMPTS = np.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12], [13, 0, 0, 0, 0]])


@pytest.fixture(scope="module")
def gpt():
    return spread_gpt2()


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"sampler": "top_p", "top_p": 0.9, "seed": 7, "no_repeat_ngram_size": 2},
    ],
)
def test_pieces_make_generates_tokens(gpt, settings):
    expected = kt.generation.generate(gpt, PROMPTS, 14, end_token_id=[7, 9], **settings)
    for chunk_size in [1, 5]:
        decoding = ChunkedDecoding(
            gpt, PROMPTS, 14, end_token_id=[7, 9], chunk_size=chunk_size, **settings
        )
        for tokens in decoding:
            # Each piece holds the final tokens up to its index, zeros after.
            index = decoding.index
            np.testing.assert_array_equal(tokens[:, :index], expected[:, :index])
            assert not tokens[:, max(index, PROMPTS.shape[1]) :].any()
        np.testing.assert_array_equal(tokens, expected)
        assert decoding.steps == 18 and decoding.finished.all()


def test_finished_rows_stop_and_the_others_do_not_change(gpt):
    full = kt.generation.generate(gpt, PROMPTS, 14, sampler="top_k", seed=1)
    decoding = ChunkedDecoding(gpt, PROMPTS, 14, sampler="top_k", seed=1, chunk_size=4)
    for _ in decoding:
        if decoding.index == 9:  # after two pieces: positions 1 .. 8
            decoding.finish([0])
    assert decoding.steps == 14 + 5 - 1  # from the shortest prompt to the end
    tokens = decoding.tokens
    np.testing.assert_array_equal(tokens[1:], full[1:])
    np.testing.assert_array_equal(tokens[0, :9], full[0, :9])
    assert not tokens[0, 9:].any() and full[0, 9:].all()
    # Every row finished: no more pieces.
    decoding = ChunkedDecoding(gpt, PROMPTS, 14, chunk_size=2)
    for _ in decoding:
        decoding.finish(np.ones(3, bool))
    assert decoding.steps == 2


def test_pieces_grow_while_they_are_fast(gpt):
    expected = kt.generation.generate(gpt, PROMPTS, 14, sampler="top_k", seed=2)
    # Every piece is far faster than a day: 1, 8, 64 (the last 9) positions.
    decoding = ChunkedDecoding(
        gpt, PROMPTS, 14, sampler="top_k", seed=2, chunk_size=1, piece_seconds=86400
    )
    indices = [decoding.index for _ in decoding]
    assert indices == [2, 10, 19]
    np.testing.assert_array_equal(decoding.tokens, expected)
    # No piece is faster than a nanosecond: the size stays.
    decoding = ChunkedDecoding(gpt, PROMPTS, 14, chunk_size=6, piece_seconds=1e-9)
    assert [decoding.index for _ in decoding] == [7, 13, 19]


def test_bad_arguments(gpt):
    for bad in [0, -1.0, True, "1"]:
        with pytest.raises(ValueError, match=f"piece_seconds={bad!r}"):
            ChunkedDecoding(gpt, PROMPTS, 4, piece_seconds=bad)
    with pytest.raises(ValueError, match="BeamSampler"):
        ChunkedDecoding(gpt, PROMPTS, 4, sampler="beam")
    with pytest.raises(ValueError, match="chunk_size=0"):
        ChunkedDecoding(gpt, PROMPTS, 4, chunk_size=0)
    with pytest.raises(ValueError, match="end_token_id"):
        ChunkedDecoding(gpt, PROMPTS, 4, end_token_id=[5, 40])
    assert list(ChunkedDecoding(gpt, PROMPTS, 0)) == []
