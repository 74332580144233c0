"""`kt.models.T5` on its own: cached decoding equals the full forward pass
(greedy and beam, prompts long enough for the log buckets), `.keras` round
trips, the position bias is shared by a stack's blocks, and impossible
arguments are refused by name. Exactness against transformers is
tests/pretrained/test_t5.py's."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_model_saving_test

TINY = dict(num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32)


def model_of(**options):
    keras.utils.set_random_seed(0)
    return kt.models.t5(60, **TINY, dropout=0.0, **options)


def source():
    ids = np.random.default_rng(0).integers(3, 60, (2, 30)).astype("int32")
    ids[1, 12:] = 0  # a padded row
    return ids


@pytest.mark.parametrize(
    "options, sampler",
    [
        (dict(), "greedy"),
        (dict(key_dim=6, feedforward="gated-gelu", tie_embeddings=False), "beam"),
    ],
)
def test_cached_decoding_equals_the_full_pass(options, sampler):
    model = model_of(**options)
    inputs = {"encoder_token_ids": source()}
    extra = dict(num_beams=3) if sampler == "beam" else {}
    cached, full = [
        np.asarray(
            kt.generation.generate(
                model, inputs, 24, sampler=sampler, use_cache=use_cache, **extra
            )
        )
        for use_cache in (True, False)
    ]
    np.testing.assert_array_equal(cached, full)
    assert (cached[:, 0] == 1).all() and len(set(cached[0, 1:])) > 1


def test_an_encoder_decoder_decodes_in_a_buffer_of_its_answer(caplog):
    """An encoder-decoder's buffer is the start token and the new tokens,
    as powers of two from 32 (`Seq2SeqLM.min_decode_buffer`), not the 512
    positions from which a decoder-only model's conversations grow."""
    model = model_of()
    caplog.set_level("DEBUG", logger="keras_transformer.generation.decode")
    for new in (10, 40):
        kt.generation.generate(model, {"encoder_token_ids": source()}, new)
    keys = [r.args[1] for r in caplog.records if "Compiling" in r.getMessage()]
    # The last entry: (batch, buffer, source length, end ids).
    assert [key[-1] for key in keys] == [(2, 32, 32, 4), (2, 64, 32, 4)]


def test_keras_file_round_trip_and_one_bias_table_per_stack(tmp_path):
    model = model_of(key_dim=6, feedforward="gated-gelu", tie_embeddings=False)
    inputs = {
        "encoder_token_ids": source(),
        "decoder_token_ids": np.array([[1, 5, 9], [1, 7, 0]], "int32"),
    }
    restored = run_model_saving_test(model, inputs, tmp_path)
    assert isinstance(restored, kt.models.T5)
    tables = [w for w in model.weights if "position_bias" in w.path]
    assert [tuple(w.shape) for w in tables] == [(32, 2), (32, 2)]
    assert model.count_params() == kt.models.T5.parameter_count(
        60, **TINY, key_dim=6, feedforward="gated-gelu", tie_embeddings=False
    )


@pytest.mark.parametrize(
    "change, name",
    [
        (dict(feedforward="gated-silu"), "feedforward"),
        (dict(vocabulary_size=2), "vocabulary_size"),
        (dict(hidden_dim=15), "hidden_dim"),
        (dict(key_dim=0), "key_dim"),
        (dict(decoder_start_token_id=60), "decoder_start_token_id"),
        (dict(task_settings=["summarize: "]), "task_settings"),
    ],
)
def test_impossible_arguments_are_refused_by_name(change, name):
    arguments = {"vocabulary_size": 60, **TINY, **change}
    with pytest.raises(ValueError, match=name):
        kt.models.T5(**arguments)
