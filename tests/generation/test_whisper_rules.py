"""Whisper's decoding rules (the options `begin_suppressed_token_ids` and
`suppressed_token_ids`, and the processor `whisper_plan.TimestampRules`)
change the scores exactly as transformers' `SuppressTokensAtBeginLogitsProcessor`,
`SuppressTokensLogitsProcessor` and `WhisperTimeStampLogitsProcessor`, in
transformers' order, on token histories that reach every rule: the first
step, a timestamp opening or closing a pair, text after a pair, timestamps
that must not decrease, and scores whose timestamps' total probability
beats every text token's."""

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.pretrained.whisper_plan import TimestampRules
from tests.helpers import reference_import

V, END, NO_TIMESTAMPS, BEGIN = 60, 40, 49, 50  # transformers' ids
PROMPT = [41, 42, 43]  # a decoder prompt: start, language, task
HISTORIES = [
    [],  # the first new token: a timestamp, at most BEGIN + 5
    [52],  # the first timestamp counts as a pair: text next
    [52, 5],  # text after it: text, the end or a timestamp from 53
    [52, 5, 54],  # a timestamp after text opens a pair: a timestamp (>= 54)
    # or the end next
    [52, 5, 54, 54],  # two in a row: text next
    [52, 5, 54, 54, 7, 8],  # text: timestamps from 55 (not 54 again)
    [50, 50],  # <|0.00|> twice: timestamps from 51
    [5, 6],  # text without timestamps (a prompt that forced text)
]


def transformers_scores(scores, history, torch, transformers, timestamps=True):
    from transformers.generation import logits_process as hf

    config = transformers.GenerationConfig(
        no_timestamps_token_id=NO_TIMESTAMPS,
        eos_token_id=END,
        max_initial_timestamp_index=5,
    )
    processors = [
        hf.SuppressTokensAtBeginLogitsProcessor([7, END], begin_index=len(PROMPT)),
        hf.SuppressTokensLogitsProcessor([9]),
        hf.WhisperTimeStampLogitsProcessor(config, begin_index=len(PROMPT)),
    ][: 3 if timestamps else 2]
    ids = torch.tensor([PROMPT + history])
    out = torch.tensor(scores[None])
    for processor in processors:
        out = processor(ids, out)
    return out.numpy()[0]


def our_scores(scores, history, timestamps=True):
    sampler = kt.generation.GreedySampler(
        suppressed_token_ids=[9 + 1],
        begin_suppressed_token_ids=[7 + 1, END + 1],
        logits_processors=[TimestampRules(BEGIN + 1, 5)] if timestamps else [],
    )
    tokens = np.zeros((1, 16), "int32")
    written = [t + 1 for t in PROMPT + history]  # our ids
    tokens[0, : len(written)] = written
    padded = np.concatenate([[-np.inf], scores]).astype("float32")[None]
    out = sampler.process(
        padded,
        tokens,
        len(written),  # the position being chosen
        np.array([len(PROMPT)], "int32"),
        16,
        np.int32(END + 1),
    )
    return np.asarray(out)[0, 1:]


# Without timestamps (no timestamp rules), the histories holding none.
CASES = [(h, True) for h in HISTORIES] + [
    (h, False) for h in HISTORIES if all(t < BEGIN for t in h)
]


@pytest.mark.parametrize("boost", [0.0, 8.0])
@pytest.mark.parametrize("history, timestamps", CASES)
def test_scores_equal_transformers_processors(history, timestamps, boost):
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    rng = np.random.default_rng(len(history))
    scores = (2 * rng.normal(size=V)).astype("float32")
    scores[BEGIN:] += boost  # timestamps likelier: the probability rule
    expected = transformers_scores(scores, history, torch, transformers, timestamps)
    got = our_scores(scores, history, timestamps)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(got[finite], expected[finite])
    assert np.isfinite(got).any()


def test_every_rule_is_reached():
    """The histories above make each rule forbid something (so the
    comparison covers all of them)."""
    rng = np.random.default_rng(0)
    scores = rng.normal(size=V).astype("float32")
    first = our_scores(scores, [])
    assert np.isinf(first[:BEGIN]).all() and np.isinf(first[BEGIN + 6 :]).all()
    assert np.isfinite(first[BEGIN : BEGIN + 6]).all()
    assert np.isinf(our_scores(scores, [52])[BEGIN:]).all()  # text next
    assert np.isinf(our_scores(scores, [52, 5, 54])[:END]).all()  # opened
    assert np.isinf(our_scores(scores, [52, 5, 54, 54])[BEGIN:]).all()
    later = our_scores(scores, [52, 5, 54, 54, 7, 8])
    assert np.isinf(later[BEGIN:55]).all() and np.isfinite(later[55:]).all()
    boosted = scores.copy()
    boosted[BEGIN:] += 8.0
    assert np.isinf(our_scores(boosted, [52, 5])[:BEGIN]).all()  # sum rule
    assert np.isinf(first[[7, END, 9, NO_TIMESTAMPS]]).all()


@pytest.mark.parametrize("history", [[52, 5], [52, 5, 54, 54, 7, 8]])
def test_the_temperature_comes_after_the_rules_as_in_transformers(history):
    """Sampling at temperature 3 under the timestamp rules: transformers
    applies its processors to the model's logits, then the temperature
    warper; so do we (the probability rule weighs the model's own)."""
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    from transformers.generation import logits_process as hf

    # One text token at 6 and the timestamps at 3: at temperature 1 the
    # text wins the probability rule, divided by 3 first the timestamps.
    scores = (0.1 * np.random.default_rng(7).normal(size=V)).astype("float32")
    scores[6], scores[BEGIN:] = 6.0, 3.0
    expected = transformers_scores(scores, history, torch, transformers)
    expected = hf.TemperatureLogitsWarper(3.0)(None, torch.tensor(expected[None]))
    expected = expected.numpy()[0]
    sampler = kt.generation.TemperatureSampler(
        3.0,
        suppressed_token_ids=[9 + 1],
        begin_suppressed_token_ids=[7 + 1, END + 1],
        logits_processors=[TimestampRules(BEGIN + 1, 5)],
    )
    tokens = np.zeros((1, 16), "int32")
    written = [t + 1 for t in PROMPT + history]
    tokens[0, : len(written)] = written
    padded = np.concatenate([[0.0], scores]).astype("float32")[None]
    got = sampler.scores(
        padded, tokens, len(written), np.array([len(PROMPT)], "int32"), 16,
        np.int32(END + 1),
    )  # fmt: skip
    got = np.asarray(got)[0, 1:]
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-6)
