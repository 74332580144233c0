"""The options every sampler takes (HF's logits processors), on fake
`next_fn`s: no model involved, except for the checks `generate` makes."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.generation import loop

V = 12
END = 11
NEG = -np.inf


def preference(*order):
    """A next_fn whose logits always rank `order` first (in that order),
    every other real token below them."""
    logits = np.zeros(V, "float32")
    for rank, token in enumerate(order):
        logits[token] = 10.0 - rank

    def next_fn(tokens, cache, index):
        return tf.tile(tf.constant(logits)[None], [tf.shape(tokens)[0], 1]), cache

    return next_fn


def table_next_fn(table):
    """Logits `table[previous token]` `(V, V)`."""
    table = tf.constant(table, tf.float32)

    def next_fn(tokens, cache, index):
        return tf.gather(table, tokens[:, index - 1]), cache

    return next_fn


def run(sampler, next_fn, prompts, stop, end_token_id=-1, jit=True, length=12):
    """Fills `prompts` (lists of ids) to `stop` as `generate` does; for beam
    search each prompt is repeated once per beam. Returns `(B, length)`."""
    tokens = np.zeros((len(prompts), length), "int32")
    for row, ids in enumerate(prompts):
        tokens[row, : len(ids)] = ids
    tokens = np.repeat(tokens, getattr(sampler, "num_beams", 1), axis=0)

    @tf.function(jit_compile=jit)
    def decode(tokens):
        return sampler(
            next_fn,
            tokens,
            (),
            min(len(ids) for ids in prompts),
            stop,
            tokens != 0,
            tf.constant(end_token_id, tf.int32),
            tf.constant([0, 0], tf.int32),
        )

    return decode(tf.constant(tokens)).numpy()


def test_min_new_tokens_forbids_the_end_token_per_row():
    # The end token is always the most likely; each row counts its own prompt.
    sampler = kt.generation.GreedySampler(min_new_tokens=3)
    out = run(sampler, preference(END, 4), [[1], [2, 3, 5]], 10, END)
    np.testing.assert_array_equal(
        out[:, :8], [[1, 4, 4, 4, END, 0, 0, 0], [2, 3, 5, 4, 4, 4, END, 0]]
    )
    # Without an end token there is nothing to forbid.
    no_end = run(sampler, preference(END, 4), [[1]], 4)
    np.testing.assert_array_equal(no_end[0, :4], [1, END, END, END])


def reference_no_repeat(table, prompt, stop, n):
    """Greedy with HF's NoRepeatNGramLogitsProcessor, in plain Python."""
    tokens = list(prompt)
    while len(tokens) < stop:
        logits = table[tokens[-1]].astype("float64")
        logits[0] = NEG
        suffix = tokens[len(tokens) - n + 1 :] if n > 1 else []
        for j in range(len(tokens) - n + 1):
            if tokens[j : j + n - 1] == suffix:
                logits[tokens[j + n - 1]] = NEG
        tokens.append(int(np.argmax(logits)))
    return tokens


@pytest.mark.parametrize("jit", [True, False], ids=["xla", "graph"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_size_matches_the_hf_rule(n, jit):
    # Each row of the table prefers a few tokens, so greedy repeats itself
    # quickly and the rule has n-grams to forbid; the prompts count.
    rng = np.random.default_rng(n)
    table = rng.normal(size=(V, V)) + 4.0 * (rng.random((V, V)) < 0.2)
    prompts = [[3], [4, 5, 4], [6, 6]]
    stop = 8 if n == 1 else 12
    sampler = kt.generation.GreedySampler(no_repeat_ngram_size=n)
    out = run(sampler, table_next_fn(table), prompts, stop, jit=jit)
    plain = run(kt.generation.GreedySampler(), table_next_fn(table), prompts, stop)
    for row, prompt in enumerate(prompts):
        expected = reference_no_repeat(table, prompt, stop, n)
        assert out[row, :stop].tolist() == expected
    assert not np.array_equal(out, plain)  # the rule did forbid something
    if n == 1:  # every token at most once, the prompt's included
        assert all(len(set(row[row != 0])) == len(row[row != 0]) for row in out[:1])


def test_suppressed_tokens_are_never_generated():
    sampler = kt.generation.GreedySampler(suppressed_token_ids=[5, 7])
    out = run(sampler, preference(5, 7, 6), [[1], [2, 3]], 6)
    np.testing.assert_array_equal(out[:, :6], [[1, 6, 6, 6, 6, 6], [2, 3, 6, 6, 6, 6]])
    top_k = kt.generation.TopKSampler(top_k=3, suppressed_token_ids=(5, 7))
    sampled = run(top_k, preference(5, 7, 6, 4, 3), [[1]], 12)
    assert not set(sampled[0, 1:].tolist()) & {5, 7}


def test_forced_first_token_follows_each_rows_prompt():
    # 9 is the least likely token; it is forced right after each prompt only.
    sampler = kt.generation.GreedySampler(forced_first_token_id=9)
    out = run(sampler, preference(4, 5), [[1], [2, 3, 5]], 6)
    np.testing.assert_array_equal(out[:, :6], [[1, 9, 4, 4, 4, 4], [2, 3, 5, 9, 4, 4]])


def test_force_end_token_ends_at_the_last_position():
    sampler = kt.generation.GreedySampler(force_end_token=True)
    out = run(sampler, preference(4, END), [[1], [2, 3]], 5, END)
    np.testing.assert_array_equal(
        out[:, :6], [[1, 4, 4, 4, END, 0], [2, 3, 4, 4, END, 0]]
    )
    # Without an end token in the graph nothing is forced.
    no_end = run(sampler, preference(4, END), [[1]], 5)
    np.testing.assert_array_equal(no_end[0, :5], [1, 4, 4, 4, 4])


def test_options_combine_in_hf_order():
    # min_new_tokens keeps the end token away; forcing comes after it and
    # wins at the last position; the forced first token beats suppression.
    sampler = kt.generation.GreedySampler(
        min_new_tokens=5,
        force_end_token=True,
        forced_first_token_id=5,
        suppressed_token_ids=[5],
    )
    out = run(sampler, preference(END, 4), [[1]], 4, END)
    np.testing.assert_array_equal(out[0, :5], [1, 5, 4, END, 0])


# After 7: 1 (.45), 2 (.40). After 1: 3 (.5) or the suppressed 9 (.5); after
# 2: 4 (.6). Two new tokens, alpha 0: 7 1 3 = log(.45 * .5) = -1.49 loses to
# 7 2 4 = log(.40 * .6) = -1.43. Renormalised, 3 gets all of 1's mass: 7 1 3
# = log .45 = -0.80 wins.
RENORMALIZE = {
    7: {1: 0.45, 2: 0.40, 6: 0.15},
    1: {3: 0.5, 9: 0.5},
    2: {4: 0.6, 6: 0.4},
}


def test_repetition_penalty_is_the_hf_formula_over_ids_before_index():
    """Ids written before `index` (prompt included, padding not): a positive
    score is divided by the penalty, a negative one multiplied."""
    scores = tf.constant([[1.0, 2.0, -1.0, 0.5, -3.0, 4.0]])
    tokens = tf.constant([[1, 2, 4, 0, 5]])  # index 3: ids 1, 2 and 4 seen
    sampler = kt.generation.Sampler(repetition_penalty=2.0)
    out = sampler.process(scores, tokens, 3, tf.constant([1]), 5, -1)
    np.testing.assert_array_equal(out, [[1.0, 1.0, -2.0, 0.5, -6.0, 4.0]])
    seen = loop.seen_tokens(tf.constant([[0, 3, 3, 0]]), 4, 5)
    np.testing.assert_array_equal(seen, [[False, False, False, True, False]])


def transition_logits(table):
    probs = np.full((V, V), 1e-9)
    for previous in range(V):
        for token, p in table.get(previous, dict.fromkeys(range(1, V), 1 / V)).items():
            probs[previous, token] = p
    return np.log(probs)


@pytest.mark.parametrize("rules", ["wu", "transformers"])
def test_renormalize_logits_changes_beam_scores(rules):
    def best(renormalize):
        sampler = kt.generation.BeamSampler(
            num_beams=2,
            length_penalty=0.0,
            rules=rules,
            suppressed_token_ids=[9],
            renormalize_logits=renormalize,
        )
        next_fn = table_next_fn(transition_logits(RENORMALIZE))
        return run(sampler, next_fn, [[7]], 3)[0, :4].tolist()

    assert best(False) == [7, 2, 4, 0]
    assert best(True) == [7, 1, 3, 0]


def test_renormalize_logits_does_not_change_greedy():
    table = np.random.default_rng(0).normal(size=(V, V))
    options = {"suppressed_token_ids": [3, 4], "no_repeat_ngram_size": 2}
    plain = kt.generation.GreedySampler(**options)
    renormalized = kt.generation.GreedySampler(renormalize_logits=True, **options)
    np.testing.assert_array_equal(
        run(plain, table_next_fn(table), [[1], [2, 5]], 12),
        run(renormalized, table_next_fn(table), [[1], [2, 5]], 12),
    )


@pytest.mark.parametrize(
    "args, message",
    [
        ({"min_new_tokens": -1}, "min_new_tokens=-1"),
        ({"min_new_tokens": 1.5}, "min_new_tokens=1.5"),
        ({"min_new_tokens": True}, "min_new_tokens=True"),
        ({"no_repeat_ngram_size": -2}, "no_repeat_ngram_size=-2"),
        ({"no_repeat_ngram_size": "3"}, "no_repeat_ngram_size='3'"),
        ({"suppressed_token_ids": 5}, "suppressed_token_ids=5"),
        ({"suppressed_token_ids": [0, 3]}, "suppressed_token_ids=\\[0, 3\\]"),
        ({"suppressed_token_ids": "ab"}, "suppressed_token_ids='ab'"),
        ({"forced_first_token_id": 0}, "forced_first_token_id=0"),
        ({"forced_first_token_id": 2.0}, "forced_first_token_id=2.0"),
        ({"force_end_token": 1}, "force_end_token=1"),
        ({"renormalize_logits": "yes"}, "renormalize_logits='yes'"),
        ({"repetition_penalty": 0}, "repetition_penalty=0"),
        ({"repetition_penalty": "2"}, "repetition_penalty='2'"),
    ],
)
@pytest.mark.parametrize("sampler", ["greedy", "top_k", "top_p", "temperature", "beam"])
def test_bad_option_values_name_the_argument(sampler, args, message):
    with pytest.raises(ValueError, match=message):
        kt.generation.get_sampler(sampler, **args)


@pytest.mark.parametrize(
    "args, message",
    [
        ({"rules": "hf"}, "rules='hf'"),
        (
            {"rules": "transformers", "early_stopping": "always"},
            "early_stopping='always'",
        ),
        ({"rules": "transformers", "early_stopping": 1}, "early_stopping=1"),
        ({"early_stopping": True}, "early_stopping=True with rules='wu'"),
        ({"length_penalty": "1"}, "length_penalty='1'"),
        ({"num_beams": 2, "top_k": 3}, "Invalid arguments for sampler 'beam'"),
    ],
)
def test_bad_beam_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        kt.generation.get_sampler("beam", **args)


def test_options_are_kept_hashable_and_reach_the_sampler():
    sampler = kt.generation.get_sampler(
        "beam",
        num_beams=2,
        rules="transformers",
        early_stopping="never",
        suppressed_token_ids=[7, 3, 7],
        forced_first_token_id=4,
    )
    suppress, first = sampler.logits_processors
    assert suppress.ids == (3, 7) and first.token_id == 4
    assert sampler.early_stopping == "never"
    hash(sampler.config())
    other = kt.generation.get_sampler("beam", num_beams=2, rules="transformers")
    assert sampler.config() != other.config()


@pytest.fixture(scope="module")
def gpt():
    keras.utils.set_random_seed(0)
    return kt.models.gpt2(20, num_layers=1, num_heads=2, hidden_dim=8,
                          intermediate_dim=16, max_sequence_length=32)  # fmt: skip


def test_generate_checks_the_option_ids_against_the_vocabulary(gpt):
    prompts = np.array([[5, 6]])
    with pytest.raises(ValueError, match="< 20.*suppressed_token_ids=20"):
        kt.generation.generate(gpt, prompts, 2, suppressed_token_ids=[3, 20])
    with pytest.raises(ValueError, match="forced_first_token_id=25"):
        kt.generation.generate(gpt, prompts, 2, forced_first_token_id=25)
    with pytest.raises(ValueError, match="force_end_token.*end_token_id=None"):
        kt.generation.generate(gpt, prompts, 2, force_end_token=True)
    with pytest.raises(ValueError, match="Sampler arguments .*GreedySampler"):
        kt.generation.generate(
            gpt, prompts, 2, sampler=kt.generation.GreedySampler(), min_new_tokens=2
        )


def test_generate_passes_the_options_through(gpt):
    prompts = np.array([[5, 6, 0], [7, 8, 9]])
    out = kt.generation.generate(
        gpt, prompts, 4, end_token_id=3, force_end_token=True, forced_first_token_id=2
    )
    assert out.shape == (2, 7)
    assert out[0, 2] == 2 and out[1, 3] == 2  # right after each prompt
    ends = [row[row != 0][-1] for row in out]
    assert ends == [3, 3]  # forced at the last position at the latest
