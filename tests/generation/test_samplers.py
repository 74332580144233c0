"""Samplers against a fake `next_fn`: no model involved."""

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

V = 10


def fixed_logits(logits):
    """A next_fn that always returns the same `(B, V)` logits."""
    logits = tf.constant(logits, tf.float32)

    def next_fn(tokens, cache, index):
        return logits, cache

    return next_fn


def run(sampler, next_fn, prompt, stop, end_token_id=-1, seed=(1, 0)):
    tokens = np.zeros((len(prompt), 12), "int32")
    for row, ids in enumerate(prompt):
        tokens[row, : len(ids)] = ids
    start = min(len(ids) for ids in prompt)

    @tf.function(jit_compile=True)
    def decode(tokens):
        return sampler(
            next_fn,
            tokens,
            (),
            start,
            stop,
            tokens != 0,
            end_token_id,
            tf.constant(seed),
        )

    return decode(tf.constant(tokens)).numpy()


def test_greedy_takes_the_argmax_and_keeps_prompts():
    logits = np.zeros((2, V), "float32")
    logits[0, 7] = logits[1, 4] = 3.0
    out = run(kt.generation.GreedySampler(), fixed_logits(logits), [[1], [2, 3, 5]], 6)
    np.testing.assert_array_equal(out[:, :6], [[1, 7, 7, 7, 7, 7], [2, 3, 5, 4, 4, 4]])
    assert np.all(out[:, 6:] == 0)


def test_end_token_stops_each_sequence():
    def next_fn(tokens, cache, index):
        # Row 0 emits the end token (9) at position 3; row 1 never does.
        choice = tf.where(tf.range(2) == 0, tf.where(index == 3, 9, 5), 6)
        return tf.one_hot(choice, V) * 5.0, cache

    out = run(kt.generation.GreedySampler(), next_fn, [[1], [2]], 7, end_token_id=9)
    np.testing.assert_array_equal(
        out[:, :7], [[1, 5, 5, 9, 0, 0, 0], [2, 6, 6, 6, 6, 6, 6]]
    )


@pytest.mark.parametrize(
    "sampler, allowed",
    [
        (kt.generation.TopKSampler(top_k=3), {4, 5, 6}),
        (kt.generation.TopPSampler(top_p=0.7), {5, 6}),  # 0.40 + 0.35 >= 0.7
    ],
)
def test_top_k_and_top_p_never_leave_their_set(sampler, allowed):
    probs = np.array([0.01, 0.01, 0.01, 0.02, 0.10, 0.40, 0.35, 0.04, 0.03, 0.03])
    logits = np.log(np.tile(probs, (64, 1)))
    seen = set()
    for seed in range(4):
        out = run(sampler, fixed_logits(logits), [[1]] * 64, 12, seed=(seed, 0))
        seen |= set(np.unique(out[:, 1:]).tolist())
    assert seen == allowed  # every allowed token shows up; nothing else does


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    logits = np.zeros((8, V), "float32")
    sampler = kt.generation.TemperatureSampler(temperature=1.0)
    a = run(sampler, fixed_logits(logits), [[1]] * 8, 12, seed=(3, 0))
    b = run(sampler, fixed_logits(logits), [[1]] * 8, 12, seed=(3, 0))
    c = run(sampler, fixed_logits(logits), [[1]] * 8, 12, seed=(4, 0))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_low_temperature_concentrates_samples():
    logits = np.tile(np.log(np.linspace(1, 2, V)), (64, 1)).astype("float32")
    cold = run(
        kt.generation.TemperatureSampler(0.05), fixed_logits(logits), [[1]] * 64, 12
    )
    assert np.mean(cold[:, 1:] == V - 1) > 0.7


def chain_next_fn():
    """Greedy picks 3 then 1 (total p = 0.5 * 0.55); beam finds 4 then 2
    (0.4 * 1.0), the more likely sequence."""

    def next_fn(tokens, cache, index):
        previous = tokens[:, index - 1]
        first = tf.constant([0.0, 0.0, 0.0, 0.5, 0.4, 0.1, 0, 0, 0, 0])
        after_3 = tf.constant([0.0, 0.55, 0.45, 0, 0, 0, 0, 0, 0, 0])
        after_4 = tf.constant([0.0, 0.0, 1.0, 0, 0, 0, 0, 0, 0, 0])
        probs = tf.where(
            (previous == 3)[:, None],
            after_3,
            tf.where((previous == 4)[:, None], after_4, first),
        )
        return tf.math.log(probs + 1e-9), cache

    return next_fn


def test_beam_search_finds_the_more_likely_sequence_and_one_beam_is_greedy():
    greedy = run(kt.generation.GreedySampler(), chain_next_fn(), [[7]], 3)
    one_beam = run(kt.generation.BeamSampler(num_beams=1), chain_next_fn(), [[7]], 3)
    # The beam sampler's buffer holds each prompt once per beam.
    beam = run(
        kt.generation.BeamSampler(num_beams=2, length_penalty=0.0),
        chain_next_fn(),
        [[7], [7]],
        3,
    )
    np.testing.assert_array_equal(greedy[0, :3], [7, 3, 1])
    np.testing.assert_array_equal(one_beam, greedy)
    np.testing.assert_array_equal(beam[0, :3], [7, 4, 2])


@pytest.mark.parametrize(
    "sampler, args, message",
    [
        ("nucleus", {}, "Valid samplers: greedy, temperature, top_k, top_p, beam"),
        ("temperature", {"temperature": 0}, "temperature=0"),
        ("top_p", {"top_p": 1.5}, "top_p=1.5"),
        ("top_p", {"top_p": 0}, "top_p=0"),
        ("top_k", {"top_k": 0}, "top_k=0"),
        ("beam", {"num_beams": 0}, "num_beams=0"),
        ("greedy", {"top_k": 3}, "Invalid arguments for sampler 'greedy'"),
    ],
)
def test_bad_sampler_arguments(sampler, args, message):
    with pytest.raises(ValueError, match=message):
        kt.generation.get_sampler(sampler, **args)
