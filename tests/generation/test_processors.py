"""Logits processors with per-row parameters, and `RowSampler`: one traced
step serves rows whose temperature, top-k, top-p, penalty, minimum length,
seed and length differ, each row decoding as it would in any other
company, and new values never trace again."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.generation import processors

V = 12


def step(tokens, index, lengths, stop=16, end=3):
    return processors.Step(
        tf.constant(tokens, tf.int32),
        tf.constant(index),
        tf.constant(lengths, tf.int32),
        tf.constant(stop),
        tf.constant(end),
    )


def test_per_row_tensors_equal_each_rows_number():
    """A `(R,)` penalty and minimum length give each row what the Python
    number gives it, bit for bit."""
    rng = np.random.default_rng(0)
    scores = tf.constant(rng.normal(size=(3, V)).astype("float32"))
    tokens = [[5, 6, 0, 0], [3, 9, 4, 0], [2, 2, 7, 0]]
    at = step(tokens, 3, [2, 3, 3])
    penalties, counts = [1.0, 1.7, 0.6], [0, 1, 5]
    rows = [
        processors.RepetitionPenalty(tf.constant(penalties)),
        processors.MinNewTokens(tf.constant(counts)),
    ]
    got = processors.apply(rows, scores, at).numpy()
    for r in range(3):
        each = [
            processors.RepetitionPenalty(penalties[r]),
            processors.MinNewTokens(counts[r]),
        ]
        expected = processors.apply(each, scores, at).numpy()[r]
        np.testing.assert_array_equal(got[r], expected)
    # The rules did something: penalised ids and a forbidden end in row 2.
    assert got[1, 9] != scores[1, 9] and got[2, 3] == -np.inf
    assert got[0, 3] == scores[0, 3]  # row 0: no minimum


def test_processor_configs_name_the_graph_not_the_values():
    """A tensor parameter is keyed by dtype and shape (one compiled loop for
    every value); a number is keyed by its value."""
    one = processors.RepetitionPenalty(tf.constant([1.2, 1.5]))
    two = processors.RepetitionPenalty(tf.constant([2.0, 0.5]))
    assert one.config() == two.config()
    assert (
        processors.RepetitionPenalty(1.2).config()
        != processors.RepetitionPenalty(1.5).config()
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"logits_processors": "x"}, "logits_processors='x'"),
        ({"logits_processors": [len]}, "Received: <built-in function len>"),
        ({"repetition_penalty": 0}, "repetition_penalty=0"),
        ({"min_new_tokens": -1}, "min_new_tokens=-1"),
    ],
)
def test_bad_processors_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kt.generation.GreedySampler(**kwargs)


@pytest.fixture(scope="module")
def decode():
    """One traced decode loop whose settings are all inputs."""
    keras.utils.set_random_seed(0)
    model = kt.models.gpt2(40, num_layers=1, num_heads=2, hidden_dim=8,
                           intermediate_dim=16, max_sequence_length=32)  # fmt: skip

    @tf.function(jit_compile=True, autograph=False)
    def run(tokens, stop, temperature, top_k, top_p, seeds, penalty):
        sampler = kt.generation.RowSampler(
            temperature,
            top_k,
            top_p,
            seeds,
            logits_processors=[processors.RepetitionPenalty(penalty)],
        )
        loop = kt.generation.decode_function(model, sampler)
        rows = tf.shape(tokens)[0]
        return loop(tokens, tf.zeros([rows, 1], tf.int32), 2, stop,
                    tf.constant([-1]), tf.constant([0, 0]))  # fmt: skip

    def call(rows):
        columns = list(zip(*rows, strict=True))
        tokens = np.zeros((len(rows), 32), "int32")  # generate's bucket
        tokens[:, :2] = [[7, 8]]
        return run(
            tf.constant(tokens),
            tf.constant(columns[0], tf.int32),
            tf.constant(columns[1], tf.float32),
            tf.constant(columns[2], tf.int32),
            tf.constant(columns[3], tf.float32),
            tf.constant(columns[4], tf.int32),
            tf.constant(columns[5], tf.float32),
        ).numpy()

    return model, run, call


# (stop, temperature, top_k, top_p, seed, penalty)
ROWS = [
    (16, 0.0, 0, 1.0, (0, 0), 1.0),  # greedy
    (12, 1.5, 3, 1.0, (5, 1), 1.3),  # top-k, a shorter length
    (16, 0.9, 0, 0.6, (9, 2), 0.8),  # top-p
]


def test_each_row_decodes_as_in_any_other_company(decode):
    model, run, call = decode
    mixed = call(ROWS)
    for r, row in enumerate(ROWS):
        alone = call([row] * 3)  # the same row everywhere, same shapes
        np.testing.assert_array_equal(mixed[r], alone[0])
    # Greedy with penalty 1 is `generate`'s greedy; row 1 stops at 12.
    greedy = kt.generation.generate(model, np.array([[7, 8]]), 14)
    np.testing.assert_array_equal(mixed[0, :16], greedy[0])
    assert (mixed[1, 12:] == 0).all() and (mixed[1, 2:12] != 0).all()
    assert (mixed[2, 2:16] != 0).all() and (mixed[:, 16:] == 0).all()
    # Sampling rows drew something other than greedy.
    assert (mixed[1:, 2:12] != greedy[0, 2:12]).any()


def test_new_settings_never_trace_again(decode):
    _, run, call = decode
    call(ROWS)
    traces = run.experimental_get_tracing_count()
    other = [(15, 0.3, 2, 0.9, (1, 1), 2.0)] * 3
    out = call(other)
    assert run.experimental_get_tracing_count() == traces
    assert (out[:, 15:] == 0).all() and (out[:, 2:15] != 0).all()
    # top-k 1 is greedy whatever the temperature and seed.
    one = call([(16, 2.0, 1, 1.0, (s, s), 1.0) for s in range(3)])
    np.testing.assert_array_equal(one, call([ROWS[0]] * 3))
