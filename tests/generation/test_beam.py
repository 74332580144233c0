"""BeamSampler on hand-computed cases: a fake `next_fn` whose next-token
probabilities depend only on the previous token, so every beam's score can be
worked out by hand (in the comments)."""

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

V = 12
END = 11


def transitions(table):
    """A next_fn from `{previous token: {next token: probability}}`.

    Unlisted previous tokens get a uniform row; unlisted next tokens get
    log(1e-9), far below any beam the comments follow.
    """
    probs = np.full((V, V), 1e-9)
    for previous in range(V):
        row = table.get(previous, dict.fromkeys(range(1, V), 1 / (V - 1)))
        for token, p in row.items():
            probs[previous, token] = p
    log_probs = tf.constant(np.log(probs), tf.float32)

    def next_fn(tokens, cache, index):
        return tf.gather(log_probs, tokens[:, index - 1]), cache

    return next_fn


def beam_search(sampler, next_fn, prompts, stop, end_token_id=-1, length=8):
    """Runs `sampler` on `prompts` as `generate` does: for beam search the
    buffer holds `num_beams` copies of each prompt (rows b*K .. b*K+K-1 are
    input b's). Returns the `(B, length)` tokens."""
    tokens = np.zeros((len(prompts), length), "int32")
    for row, ids in enumerate(prompts):
        tokens[row, : len(ids)] = ids
    tokens = np.repeat(tokens, getattr(sampler, "num_beams", 1), axis=0)
    start = min(len(ids) for ids in prompts)

    @tf.function(jit_compile=True)
    def decode(tokens):
        return sampler(
            next_fn,
            tokens,
            (),
            start,
            stop,
            tokens != 0,
            tf.constant(end_token_id, tf.int32),
            tf.constant([0, 0], tf.int32),
        )

    return decode(tf.constant(tokens)).numpy()


# After the prompt 7: 1 (.40), 2 (.35) or 3 (.25). The sequences of two new
# tokens: 7 1 4 = .40 * .55 = .22, 7 2 4 = .35 * .60 = .21, 7 3 6 = .25 * 1.0
# = .25 (the most likely). Greedy takes 1, then 4. Two beams keep 1 and 2
# after the first step, so they never see 3 6. Three beams keep 3 too.
# After the prompt 8 (the second input of the batch): 4 (.40), 5 (.35) or 6
# (.25); 8 4 1 = .22, 8 5 1 = .21, 8 6 3 = .25: three beams find 8 6 3.
WIDE_SEARCH = {
    7: {1: 0.40, 2: 0.35, 3: 0.25},
    1: {4: 0.55, 5: 0.45},
    2: {4: 0.60, 5: 0.40},
    3: {6: 1.0},
    8: {4: 0.40, 5: 0.35, 6: 0.25},
    4: {1: 0.55, 2: 0.45},
    5: {1: 0.60, 2: 0.40},
    6: {3: 1.0},
}


def test_three_beams_find_what_greedy_and_two_beams_miss():
    next_fn = transitions(WIDE_SEARCH)
    greedy = kt.generation.GreedySampler()
    two = kt.generation.BeamSampler(num_beams=2, length_penalty=0.0)
    three = kt.generation.BeamSampler(num_beams=3, length_penalty=0.0)
    np.testing.assert_array_equal(
        beam_search(greedy, next_fn, [[7]], 3)[0, :3], [7, 1, 4]
    )
    np.testing.assert_array_equal(beam_search(two, next_fn, [[7]], 3)[0, :3], [7, 1, 4])
    np.testing.assert_array_equal(
        beam_search(three, next_fn, [[7]], 3), [[7, 3, 6, 0, 0, 0, 0, 0]]
    )


def test_each_input_of_a_batch_keeps_its_own_beams():
    # Input b's beams are rows 3b..3b+2: a parent index taken without the
    # offset 3b would give input 1 the beams (and the prompt) of input 0.
    # Input 1's prompt is one token longer: its first step is forced (9 8),
    # then 8 6 3 as above. Input 0 adds a third token: 7 3 6 3 = .25 beats
    # 7 1 4 1 = .121 and 7 2 4 1 = .116.
    three = kt.generation.BeamSampler(num_beams=3, length_penalty=0.0)
    out = beam_search(three, transitions(WIDE_SEARCH), [[7], [9, 8]], 4)
    np.testing.assert_array_equal(out[:, :5], [[7, 3, 6, 3, 0], [9, 8, 6, 3, 0]])


def test_num_return_sequences_gives_each_inputs_best_beams_best_first():
    # The three sequences of each input above, by probability: 7 3 6 (.25),
    # 7 1 4 (.22), 7 2 4 (.21); 8 6 3, 8 4 1, 8 5 1.
    three = kt.generation.BeamSampler(
        num_beams=3, length_penalty=0.0, num_return_sequences=3
    )
    out = beam_search(three, transitions(WIDE_SEARCH), [[7], [8]], 3)
    np.testing.assert_array_equal(
        out[:, :3],
        [[7, 3, 6], [7, 1, 4], [7, 2, 4], [8, 6, 3], [8, 4, 1], [8, 5, 1]],
    )
    two = beam_search(three.returning(2), transitions(WIDE_SEARCH), [[7], [8]], 3)
    np.testing.assert_array_equal(two, out[[0, 1, 3, 4]])
    for bad in [0, 4]:
        with pytest.raises(ValueError, match="num_return_sequences"):
            kt.generation.BeamSampler(num_beams=3, num_return_sequences=bad)


# Two beams, end token 11. After 7 (the last prompt token): 11 (.45), 3 (.40)
# or 5 (.15).
# - short: 7 11, finished after one token: log .45 = -0.7985, length 1.
# - long: 7 3 4 11: log(.40 * .95 * .95) = -1.0189, length 3.
# The length counts generated tokens, not the prompt: with the prompt 9 10 7
# counted too, alpha 1 would give short -0.7985 / (9/6) = -0.5323 and long
# -1.0189 / (11/6) = -0.5558, and short would win.
# Step 2 keeps the finished short beam (-0.7985, padded with 0) and 7 3 4
# (-0.9676); step 3 keeps it again and finishes 7 3 4 11; all done.
# Ranked by score / ((5 + length) / 6) ** alpha:
# - alpha 0: short -0.7985 > long -1.0189: short wins.
# - alpha 0.6: long -1.0189 / (8/6)**0.6 = -0.8573 < -0.7985: short wins.
# - alpha 1: long -1.0189 / (8/6) = -0.7642 > -0.7985: long wins. With the
#   penalty multiplied instead, long would be -1.3585 and lose.
# After 11 the fake model gives a uniform row (log 1/11 = -2.40 a step): a
# finished beam that kept collecting log-probabilities would drop below long.
LENGTHS = {
    7: {END: 0.45, 3: 0.40, 5: 0.15},
    3: {4: 0.95, 5: 0.05},
    4: {END: 0.95, 5: 0.05},
    5: {5: 1.0},
}
SHORT = [7, END, 0, 0, 0, 0, 0, 0]
LONG = [7, 3, 4, END, 0, 0, 0, 0]
PROMPT = [9, 10, 7]


def test_length_penalty_ranks_finished_beams_by_the_formula():
    def best(alpha):
        sampler = kt.generation.BeamSampler(num_beams=2, length_penalty=alpha)
        out = beam_search(sampler, transitions(LENGTHS), [PROMPT], 10, END, 10)
        return out[0].tolist()

    assert best(0.0) == PROMPT[:2] + SHORT
    assert best(0.6) == PROMPT[:2] + SHORT
    assert best(1.0) == PROMPT[:2] + LONG


def test_a_finished_beam_keeps_its_score_and_is_padded_with_zeros():
    # The short beam finishes at step 1 and wins at alpha 0 only if its score
    # stays -0.7985 while the long one runs two more steps; the positions
    # after its end token are 0 although the fake model never predicts 0.
    sampler = kt.generation.BeamSampler(num_beams=2, length_penalty=0.0)
    out = beam_search(sampler, transitions(LENGTHS), [[7], [7]], 8, END)
    np.testing.assert_array_equal(out, [SHORT, SHORT])
    # Without an end token nothing finishes and the beams run to `stop`: 7 11
    # goes on through uniform rows (-2.40 a step) and drops out; 7 3 4 11 and
    # any fourth token (-1.0189 - 2.3979 = -3.42) beats 7 3 4 5 5 (-3.96).
    no_end = beam_search(sampler, transitions(LENGTHS), [[7]], 5)
    np.testing.assert_array_equal(no_end[0, :4], LONG[:4])
    assert no_end[0, 4] != 0 and np.all(no_end[0, 5:] == 0)


# ---- rules="transformers" (Hugging Face's beam search) ---------------------
# The same LENGTHS table, two beams, prompt 7, stop 10; HF scores a finished
# hypothesis by sum_logprobs / new_length ** alpha, the end token counted.
# Step 1 takes the best 2K = 4 continuations: 7 11 (-0.7985), 7 3 (-0.9163),
# 7 5 (-1.8971), ...; 7 11 is among the first K and ends: it joins the pool
# at -0.7985 / 1. 7 3 and 7 5 run on. Step 2: 7 3 4 (-0.9676), 7 5 5
# (-1.8971). Step 3: 7 3 4 11 (-1.0189) ends and joins the pool at
# -1.0189 / 3 ** alpha; 7 5 5 5 (-1.8971) and 7 3 4 5 run on. The pool is
# full:
# - early_stopping=True stops: alpha 0 picks short (-0.7985 > -1.0189),
#   alpha 1 picks long (-0.3396 > -0.7985).
# - early_stopping=False stops when the best running beam scored at its
#   current length cannot beat the worst finished one: alpha 0: -1.8971 <
#   -1.0189, stop (short). Alpha 1: -1.8971 / 3 = -0.63 > -0.7985, go on;
#   5 -> 5 has probability 1, so 7 5 5 ... keeps -1.8971 and keeps beating
#   -0.7985 until stop, where it joins the pool at -1.8971 / 9 = -0.21 and
#   wins. (Wu's rules pick long here: their finished beams stop the search.)
# - "never" with alpha 1 scores the running beam at the longest length, 9,
#   so it also runs to stop.
RUN_ON = [7] + [5] * 9
SHORT_10, LONG_10 = SHORT + [0, 0], LONG + [0, 0]


def transformers_best(alpha, early_stopping):
    sampler = kt.generation.BeamSampler(
        num_beams=2,
        length_penalty=alpha,
        rules="transformers",
        early_stopping=early_stopping,
    )
    return beam_search(sampler, transitions(LENGTHS), [[7]], 10, END, 10)[0].tolist()


def test_transformers_rules_early_stopping_and_length_penalty_by_hand():
    assert transformers_best(0.0, True) == SHORT_10
    assert transformers_best(1.0, True) == LONG_10
    assert transformers_best(0.0, False) == SHORT_10
    assert transformers_best(1.0, False) == RUN_ON
    assert transformers_best(1.0, "never") == RUN_ON
    wu = kt.generation.BeamSampler(num_beams=2, length_penalty=1.0)
    assert beam_search(wu, transitions(LENGTHS), [[7]], 10, END, 10)[0].tolist() == (
        LONG_10
    )


def test_transformers_rules_batch_mixed_prompts_and_run_without_xla():
    # A longer prompt waits: its row decodes as if alone. Without XLA (as
    # exporters may trace it) the loop gives the same tokens.
    sampler = kt.generation.BeamSampler(
        num_beams=3, length_penalty=0.0, rules="transformers"
    )
    next_fn = transitions(WIDE_SEARCH)
    alone = [beam_search(sampler, next_fn, [prompt], 4)[0] for prompt in ([7], [9, 8])]
    batched = beam_search(sampler, next_fn, [[7], [9, 8]], 4)
    np.testing.assert_array_equal(batched, alone)
    np.testing.assert_array_equal(batched[:, :5], [[7, 3, 6, 3, 0], [9, 8, 6, 3, 0]])

    tokens = np.repeat(
        np.array([[7, 0, 0, 0, 0, 0, 0, 0], [9, 8, 0, 0, 0, 0, 0, 0]]), 3, 0
    )
    graph = tf.function(sampler)(
        next_fn,
        tf.constant(tokens, tf.int32),
        (),
        1,
        4,
        tf.constant(tokens != 0),
        tf.constant(-1),
        tf.constant([0, 0]),
    )
    np.testing.assert_array_equal(graph.numpy(), batched)


def test_transformers_rules_with_one_beam_is_greedy():
    one = kt.generation.BeamSampler(num_beams=1, rules="transformers")
    greedy = kt.generation.GreedySampler()
    next_fn = transitions(LENGTHS)
    np.testing.assert_array_equal(
        beam_search(one, next_fn, [[7], [9, 10, 7]], 10, END, 10),
        beam_search(greedy, next_fn, [[7], [9, 10, 7]], 10, END, 10),
    )
