import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import spread_gpt2, spread_weights


@pytest.fixture(scope="module")
def gpt():
    return spread_gpt2()


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(0)
    model = kt.models.seq2seq(
        40,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=48,
        dropout=0.0,
    )
    return spread_weights(model, scale=0.2)


PROMPTS = np.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12], [13, 0, 0, 0, 0]])


def test_gpt_cached_equals_uncached_with_mixed_prompt_lengths(gpt):
    cached = kt.generation.generate(gpt, PROMPTS, max_new_tokens=12)
    uncached = kt.generation.generate(gpt, PROMPTS, max_new_tokens=12, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    assert cached.shape == (3, 17)
    np.testing.assert_array_equal(cached[1, :5], PROMPTS[1])  # prompts kept
    assert len(np.unique(cached[:, 5:])) > 2  # not a degenerate constant


def next_greedy(logits):
    """The most likely token at the last position, never padding (id 0)."""
    logits = np.asarray(logits)[:, -1].copy()
    logits[:, 0] = -np.inf
    return logits.argmax(-1)[:, None]


def test_greedy_matches_step_by_step_argmax_of_the_model(gpt):
    out = kt.generation.generate(gpt, PROMPTS[1:2], max_new_tokens=4)
    tokens = PROMPTS[1:2]
    for _ in range(4):
        tokens = np.concatenate([tokens, next_greedy(gpt(tokens))], axis=1)
    np.testing.assert_array_equal(out, tokens)


def test_seq2seq_cached_equals_uncached_with_padded_sources(translator):
    inputs = {
        "encoder_token_ids": np.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]]),
        "decoder_token_ids": np.array([[1], [1]]),
    }
    cached = kt.generation.generate(translator, inputs, max_new_tokens=10)
    uncached = kt.generation.generate(
        translator, inputs, max_new_tokens=10, use_cache=False
    )
    np.testing.assert_array_equal(cached, uncached)
    # Greedy against the model itself, one position at a time.
    tokens = inputs["decoder_token_ids"]
    for _ in range(10):
        logits = translator({**inputs, "decoder_token_ids": tokens})
        tokens = np.concatenate([tokens, next_greedy(logits)], axis=1)
    np.testing.assert_array_equal(cached, tokens)


def test_beam_with_one_beam_is_greedy_and_beams_run_for_both_families(gpt, translator):
    greedy = kt.generation.generate(gpt, PROMPTS, max_new_tokens=6)
    one_beam = kt.generation.generate(gpt, PROMPTS, 6, sampler="beam", num_beams=1)
    np.testing.assert_array_equal(one_beam, greedy)
    beams = kt.generation.generate(gpt, PROMPTS, 6, sampler="beam", num_beams=3)
    real = PROMPTS != 0
    np.testing.assert_array_equal(beams[:, :5][real], PROMPTS[real])
    inputs = {
        "encoder_token_ids": PROMPTS,
        "decoder_token_ids": np.ones((3, 1), "int32"),
    }
    assert kt.generation.generate(translator, inputs, 5, sampler="beam").shape == (3, 6)


def test_end_token_and_seeded_sampling(gpt):
    greedy = kt.generation.generate(gpt, PROMPTS, max_new_tokens=10)
    end = int(greedy[1, 7])  # stop row 1 at its third new token
    stopped = kt.generation.generate(gpt, PROMPTS, max_new_tokens=10, end_token_id=end)
    first = np.argmax(stopped[1, 5:] == end) + 5
    assert np.all(stopped[1, first + 1 :] == 0)
    a = kt.generation.generate(gpt, PROMPTS, 10, sampler="top_p", top_p=0.9, seed=7)
    b = kt.generation.generate(gpt, PROMPTS, 10, sampler="top_p", top_p=0.9, seed=7)
    np.testing.assert_array_equal(a, b)


def compiles(caplog):
    """How many new compiled functions the log has announced."""
    return sum("Compiling a new function" in r.getMessage() for r in caplog.records)


def test_a_conversation_reuses_one_compiled_loop_and_never_retraces(caplog):
    """Prompts growing from 3 to 200 tokens (several prefill pieces, rows of
    mixed lengths) share one buffer length (`min_buffer_length=512`, as
    `TextGenerator.chat` asks), so one compiled loop; each equals the
    uncached decoding."""
    keras.utils.set_random_seed(1)
    model = spread_weights(
        kt.models.gpt2(40, num_layers=1, num_heads=2, hidden_dim=8,
                       intermediate_dim=16, max_sequence_length=1024)
    )  # fmt: skip
    rng = np.random.default_rng(0)
    caplog.set_level("DEBUG", logger="keras_transformer.generation.decode")
    for length in (3, 40, 90, 140, 200):
        prompts = rng.integers(1, 40, (2, length))
        prompts[1, length // 2 :] = 0  # a shorter row: it reads its prompt in steps
        cached = kt.generation.generate(
            model, prompts, max_new_tokens=6, min_buffer_length=512
        )
        uncached = kt.generation.generate(
            model, prompts, max_new_tokens=6, use_cache=False, min_buffer_length=512
        )
        np.testing.assert_array_equal(cached, uncached)
        assert compiles(caplog) == 2  # the cached loop and the uncached, once
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]
    kt.generation.generate(
        model, rng.integers(1, 40, (2, 510)), max_new_tokens=6, min_buffer_length=512
    )
    assert compiles(caplog) == 3  # 516 positions: the next buffer length


def test_bad_arguments(gpt):
    with pytest.raises(ValueError, match="max_new_tokens=-1"):
        kt.generation.generate(gpt, PROMPTS, -1)
    with pytest.raises(ValueError, match="\\(5\\).*\\(44\\).*49.*\\(48\\)"):
        kt.generation.generate(gpt, PROMPTS, 44)
    with pytest.raises(ValueError, match="Valid samplers"):
        kt.generation.generate(gpt, PROMPTS, 2, sampler="nucleus")
    with pytest.raises(ValueError, match="temperature=-1"):
        kt.generation.generate(gpt, PROMPTS, 2, sampler="temperature", temperature=-1)
    with pytest.raises(ValueError, match="at least one token"):
        kt.generation.generate(gpt, np.array([[0, 0]]), 2)
    assert kt.generation.generate(gpt, PROMPTS, 0).shape == PROMPTS.shape


def test_each_row_of_a_mixed_length_batch_is_its_own_greedy_decoding(gpt):
    # Every row fills the buffer to the longest prompt + 6: a shorter prompt
    # gets more new tokens, each the greedy choice given its own prefix only.
    batch = kt.generation.generate(gpt, PROMPTS, max_new_tokens=6)
    for row, prompt in zip(batch, PROMPTS, strict=True):
        tokens = prompt[prompt != 0][None]  # the prompt alone, unpadded
        while tokens.shape[1] < batch.shape[1]:
            tokens = np.concatenate([tokens, next_greedy(gpt(tokens))], axis=1)
        np.testing.assert_array_equal(row, tokens[0])


def test_ids_outside_the_vocabulary_are_refused_before_any_work(gpt, translator):
    # Under XLA an embedding lookup clamps 999 to 39 and decodes garbage.
    with pytest.raises(ValueError, match="token id 999 at \\[0, 1\\].*\\[0, 40\\)"):
        kt.generation.generate(gpt, np.array([[5, 999]]), 2)
    with pytest.raises(ValueError, match="token id -1"):
        kt.generation.generate(gpt, np.array([[5, -1]]), 2)
    source = np.array([[5, 6, 40]])
    with pytest.raises(ValueError, match="encoder_token_ids.*token id 40"):
        kt.generation.generate(
            translator,
            {"encoder_token_ids": source, "decoder_token_ids": [[1]]},
            2,
        )
    with pytest.raises(ValueError, match="decoder_token_ids.*token id 41"):
        kt.generation.generate(
            translator,
            {"encoder_token_ids": [[5]], "decoder_token_ids": [[41]]},
            2,
        )
    with pytest.raises(ValueError, match="end_token_id=40"):
        kt.generation.generate(gpt, PROMPTS, 2, end_token_id=40)


def test_inputs_and_models_of_the_wrong_kind(gpt, translator):
    with pytest.raises(ValueError, match="must be a dict.*Received: ndarray"):
        kt.generation.generate(translator, PROMPTS, 2)
    with pytest.raises(ValueError, match="dict with keys \\['encoder_token_ids'\\]"):
        kt.generation.generate(translator, {"encoder_token_ids": PROMPTS}, 2)
    with pytest.raises(ValueError, match="int token ids.*dtype float"):
        kt.generation.generate(gpt, PROMPTS.astype("float32"), 2)
    with pytest.raises(ValueError, match="shape \\(5,\\)"):
        kt.generation.generate(gpt, PROMPTS[0], 2)
    with pytest.raises(ValueError, match="max_new_tokens.*2.5"):
        kt.generation.generate(gpt, PROMPTS, 2.5)
    bert = kt.models.bert(
        40, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    with pytest.raises(ValueError, match="kt.models.CausalLM.*a BERT named 'bert'"):
        kt.generation.generate(bert, PROMPTS, 2)
    with pytest.raises(ValueError, match="Received: model=None"):
        kt.generation.generate(None, PROMPTS, 2)


def cut_at_ends(tokens, prompts, ends):
    """`tokens` with zeros after each row's first new token in `ends`."""
    out = tokens.copy()
    for row, prompt in zip(out, prompts, strict=True):
        start = np.sum(prompt != 0)
        found = np.flatnonzero(np.isin(row[start:], ends))
        if found.size:
            row[start + found[0] + 1 :] = 0
    return out


def first_two_ends(free):
    """Two end ids that each end some row first: row 0's first new token,
    and the first new token of another row that lacks it before."""
    first = int(free[0, 3])
    for row, prompt in zip(free[1:], PROMPTS[1:], strict=True):
        new = row[np.sum(prompt != 0) :]
        if new[0] != first:
            ends = [first, int(new[0])]
            assert (cut_at_ends(free, PROMPTS, ends) != free).sum() > 3
            return ends
    raise AssertionError("no second end id")


@pytest.mark.parametrize(
    "settings", [{}, {"sampler": "top_k", "top_k": 8, "temperature": 3.0, "seed": 4}]
)
def test_several_end_tokens_end_each_row_at_the_first_it_makes(gpt, settings):
    free = kt.generation.generate(gpt, PROMPTS, 10, **settings)
    ends = first_two_ends(free)
    expected = cut_at_ends(free, PROMPTS, ends)
    for end_token_id in [ends, tuple(ends[::-1]), np.array(ends)]:
        out = kt.generation.generate(
            gpt, PROMPTS, 10, end_token_id=end_token_id, **settings
        )
        np.testing.assert_array_equal(out, expected)
    one = kt.generation.generate(gpt, PROMPTS, 10, end_token_id=[ends[0]], **settings)
    by_int = kt.generation.generate(gpt, PROMPTS, 10, end_token_id=ends[0], **settings)
    np.testing.assert_array_equal(one, by_int)


def test_several_end_tokens_bad_values(gpt):
    for bad in [[], [5, 0], [5, 40], "5", [5, 2.0]]:
        with pytest.raises(ValueError, match="end_token_id"):
            kt.generation.generate(gpt, PROMPTS, 2, end_token_id=bad)


def test_several_end_tokens_with_prompt_lookup_are_greedys(gpt):
    free = kt.generation.generate(gpt, PROMPTS, 10)
    ends = first_two_ends(free)
    out = kt.generation.generate(
        gpt, PROMPTS, 10, end_token_id=ends, prompt_lookup_num_tokens=2
    )
    np.testing.assert_array_equal(out, cut_at_ends(free, PROMPTS, ends))


@pytest.mark.parametrize("rules", ["wu", "transformers"])
def test_several_end_tokens_end_beams(gpt, rules):
    """Beam search stops a hypothesis at either end id, whichever position
    it has in the list, and an end id no beam can make (suppressed) changes
    nothing."""
    beam = {"sampler": "beam", "num_beams": 3, "rules": rules}
    beam["suppressed_token_ids"] = [4]
    free = kt.generation.generate(gpt, PROMPTS, 10, **beam)
    late, early = int(free[0, 5]), int(free[0, 4])  # 37 after 17 in row 0
    out = kt.generation.generate(gpt, PROMPTS, 10, end_token_id=[late, early], **beam)
    for row, prompt in zip(out, PROMPTS, strict=True):
        new = row[np.sum(prompt != 0) :]
        found = np.flatnonzero(np.isin(new, [late, early]))
        assert found.size and not new[found[0] + 1 :].any()  # zeros after it
    by_late = kt.generation.generate(gpt, PROMPTS, 10, end_token_id=late, **beam)
    assert (out != by_late).any()  # the second id of the list ended rows
    for ends in [[early, late], [early, 4]]:
        np.testing.assert_array_equal(
            kt.generation.generate(gpt, PROMPTS, 10, end_token_id=ends, **beam),
            kt.generation.generate(gpt, PROMPTS, 10, end_token_id=early, **beam)
            if 4 in ends
            else out,
        )
