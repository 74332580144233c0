"""Samplers against a fake `next_fn`: no model involved."""

import keras
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


# ---- sampled frequencies against the exact distribution --------------------

# Token 0 is padding and has the largest logit: a sampler must never draw it.
# The real tokens 1-5 have probabilities 0.05, 0.10, 0.15, 0.30, 0.40.
LOGITS = np.log([0.5, 0.05, 0.10, 0.15, 0.30, 0.40]).astype("float32")
ROWS = 10_000  # one step for each of ROWS copies of the same logits


def sample_once(sampler, rows=ROWS, seed=(1, 0)):
    """One token for each of `rows` rows that all get `LOGITS`, in one call."""
    tokens = np.ones((rows, 2), "int32")  # the prompt, then the token drawn
    next_fn = fixed_logits(np.tile(LOGITS, (rows, 1)))

    @tf.function(jit_compile=True)
    def decode(tokens, prompt_mask):
        return sampler(
            next_fn, tokens, (), 1, 2, prompt_mask, -1, tf.constant(seed, tf.int32)
        )

    prompt_mask = tf.constant([[True, False]] * rows)
    return decode(tf.constant(tokens), prompt_mask).numpy()[:, 1]


def exact_probabilities(temperature, kept=None):
    """softmax(LOGITS / temperature) over the real tokens, renormalised over
    `kept` (all real tokens by default)."""
    p = np.exp(LOGITS.astype("float64") / temperature)
    p[0] = 0.0
    if kept is not None:
        p[[i for i in range(len(p)) if i not in kept]] = 0.0
    return p / p.sum()


def assert_frequencies(samples, expected):
    """Each token's share within 5 binomial standard deviations of `expected`
    (so exactly 0 where `expected` is 0)."""
    frequencies = np.bincount(samples, minlength=len(expected)) / len(samples)
    sigma = np.sqrt(expected * (1 - expected) / len(samples))
    assert np.all(np.abs(frequencies - expected) <= 5 * sigma), (
        f"frequencies {np.round(frequencies, 4)}, expected {np.round(expected, 4)}"
    )


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_sampler_draws_softmax_of_logits_over_temperature(temperature):
    # T=0.5: p**2 renormalised, [.009, .035, .079, .316, .561]; T=2: sqrt(p)
    # renormalised, [.106, .150, .184, .260, .300]. 5 sigma is at most 0.025
    # at 10,000 rows: below the gaps between temperatures, and far from an
    # argmax (everything on token 5).
    samples = sample_once(kt.generation.TemperatureSampler(temperature))
    assert_frequencies(samples, exact_probabilities(temperature))


@pytest.mark.parametrize(
    "top_k, temperature, kept",
    [
        (1, 1.0, [5]),
        (2, 1.0, [5, 4]),  # 0.40 / 0.70, 0.30 / 0.70
        (3, 0.5, [5, 4, 3]),  # p**2 renormalised: .587, .330, .083
        (3, 2.0, [5, 4, 3]),  # sqrt(p) renormalised: .404, .350, .247
    ],
)
def test_top_k_draws_the_renormalised_top_k(top_k, temperature, kept):
    sampler = kt.generation.TopKSampler(top_k=top_k, temperature=temperature)
    assert_frequencies(sample_once(sampler), exact_probabilities(temperature, kept))


@pytest.mark.parametrize(
    "top_p, temperature, kept",
    [
        # T=1: the mass before each token (most likely first) is 0, .40, .70:
        # keep 5, 4.
        (0.6, 1.0, [5, 4]),
        # T=1: before 0, .40, .70, .85, .95: keep 5, 4, 3, 2.
        (0.9, 1.0, [5, 4, 3, 2]),
        # The nucleus is taken after the temperature. T=0.5: .561, .316, .079;
        # before 0, .561, .877: keep 5, 4 (renormalised .64, .36, not .57, .43).
        (0.6, 0.5, [5, 4]),
        # T=2: .300, .260, .184; before 0, .300, .560, .744: keep 5, 4, 3.
        (0.6, 2.0, [5, 4, 3]),
    ],
)
def test_top_p_draws_the_renormalised_nucleus(top_p, temperature, kept):
    sampler = kt.generation.TopPSampler(top_p=top_p, temperature=temperature)
    assert_frequencies(sample_once(sampler), exact_probabilities(temperature, kept))


@pytest.mark.parametrize(
    "top_k, top_p, temperature, kept",
    [
        # Top-p alone keeps 5, 4, 3, 2; the 2 most likely first: 5, 4.
        (2, 0.9, 1.0, [5, 4]),
        # T=2 first, then the top 3 renormalised (.404, .350, .247), then
        # the nucleus of 0.6: before 0, .404, .754: keep 5, 4 (top-p alone
        # keeps 5, 4, 3). transformers' order: temperature, top-k, top-p.
        (3, 0.6, 2.0, [5, 4]),
        (0, 0.6, 2.0, [5, 4, 3]),  # top_k=0: off, as in transformers
    ],
)
def test_top_p_with_top_k_keeps_the_top_k_first(top_k, top_p, temperature, kept):
    sampler = kt.generation.TopPSampler(top_p, temperature, top_k=top_k)
    assert_frequencies(sample_once(sampler), exact_probabilities(temperature, kept))
    with pytest.raises(ValueError, match="top_k=-1"):
        kt.generation.TopPSampler(top_p, top_k=-1)


@pytest.mark.parametrize(
    "sampler",
    [
        kt.generation.TemperatureSampler(),
        kt.generation.TopKSampler(top_k=4),
        kt.generation.TopPSampler(top_p=0.9),
    ],
    ids=lambda sampler: type(sampler).__name__,
)
def test_seeded_sampling_is_reproducible_and_seed_dependent(sampler):
    tokens = tf.constant(np.ones((8, 12), "int32"))  # prompts of one token
    prompt_mask = tf.constant(np.tile(np.arange(12) < 1, (8, 1)))
    next_fn = fixed_logits(np.tile(LOGITS, (8, 1)))

    @tf.function(jit_compile=True)
    def decode(seed):
        return sampler(next_fn, tokens, (), 1, 12, prompt_mask, -1, seed)

    a, b, c = (decode(tf.constant(seed)).numpy() for seed in [(3, 0), (3, 0), (4, 0)])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Every position draws afresh: a row is not one token repeated.
    assert len(np.unique(a[0, 1:])) > 1


def test_generate_without_a_seed_samples_afresh_each_call():
    keras.utils.set_random_seed(0)
    model = kt.models.gpt2(20, num_layers=1, num_heads=2, hidden_dim=8,
                           intermediate_dim=16, max_sequence_length=32)  # fmt: skip
    prompts = np.full((4, 1), 5)

    def sample(seed):
        return kt.generation.generate(
            model, prompts, 8, sampler="temperature", seed=seed
        )

    # 32 tokens drawn from nearly uniform logits over 19 ids: two calls agree
    # by chance with a probability of about 19**-32.
    assert not np.array_equal(sample(None), sample(None))
    np.testing.assert_array_equal(sample(3), sample(3))


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
