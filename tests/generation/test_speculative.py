"""Speculative and prompt-lookup decoding: exactly plain greedy decoding, the
target's distribution when sampling, and bad input refused."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import keras_transformer as kt
from keras_transformer.generation.decode import compiled_speculative_fn
from keras_transformer.generation.speculative import accepted, draw, lookup, residual
from tests.helpers import spread_weights

VOCABULARY = 40


def tiny_gpt(num_layers=2, hidden_dim=16, seed=0, vocabulary=VOCABULARY, scale=0.3):
    keras.utils.set_random_seed(seed)
    model = kt.models.gpt2(
        vocabulary,
        num_layers=num_layers,
        num_heads=2,
        hidden_dim=hidden_dim,
        intermediate_dim=2 * hidden_dim,
        max_sequence_length=48,
        dropout=0.0,
    )
    return spread_weights(model, scale=scale, seed=seed)


def perturbed(model, noise, seed):
    """A draft close to `model`: the same weights plus Gaussian noise, so it
    agrees with the target on some tokens and not on others."""
    draft = type(model).from_config(model.get_config())
    rng = np.random.default_rng(seed)
    draft.set_weights(
        [
            w + noise * rng.normal(size=w.shape).astype("float32")
            for w in model.get_weights()
        ]
    )
    return draft


@pytest.fixture(scope="module")
def target():
    return tiny_gpt(seed=1, scale=1.0)


@pytest.fixture(scope="module")
def close_draft(target):
    return perturbed(target, noise=0.3, seed=1)


# Prompts of lengths 5, 3 and 1 (0-padded): rows pass through each other's
# prompts while decoding.
PROMPTS = np.array([[5, 6, 7, 5, 6], [8, 9, 10, 0, 0], [13, 0, 0, 0, 0]])


def test_greedy_with_a_draft_is_plain_greedy_token_for_token(target, close_draft):
    plain = kt.generation.generate(target, PROMPTS, max_new_tokens=20)
    for draft, k in [(close_draft, 3), (tiny_gpt(1, 8, seed=2), 2), (target, 4)]:
        fast = kt.generation.generate(
            target, PROMPTS, 20, draft_model=draft, num_speculative_tokens=k
        )
        np.testing.assert_array_equal(fast, plain)
    assert len(np.unique(plain[0, 5:])) > 3  # not a constant continuation


def run_speculative(model, prompt, new_tokens, sampler=None, **settings):
    """One prompt `(P,)` through `compiled_speculative_fn`: its tokens
    `(P + new_tokens,)` and the `[steps, kept]` statistics."""
    tokens = np.zeros((1, 32), "int32")
    tokens[0, : len(prompt)] = prompt
    stop = len(prompt) + new_tokens
    decode = compiled_speculative_fn(
        model, sampler or kt.generation.GreedySampler(), **settings
    )
    out, counts = decode(
        tokens, np.zeros((1, 1), "int32"), len(prompt), stop, -1, [0, 0]
    )
    return out.numpy()[0, :stop], counts.numpy().tolist()


def reference_lookup(row, index, k, max_ngram_size):
    """Prompt lookup in plain Python: the k tokens after the latest earlier
    occurrence (continuation starting before `index - 1`) of the longest
    suffix of `row[:index]` of at most `max_ngram_size` tokens."""
    for n in range(max_ngram_size, 0, -1):
        if index < n:
            continue
        suffix = list(row[index - n : index])
        for start in range(index - 1 - n, -1, -1):
            if list(row[start : start + n]) == suffix:
                return [row[min(start + n + t, len(row) - 1)] for t in range(k)]
    return [0] * k


def lookup_statistics(greedy, start, stop, k, max_ngram_size, length=32):
    """`[steps, kept]` of greedy prompt-lookup decoding of one row whose
    greedy tokens are `greedy` (past `stop + k`): each step proposes from the
    tokens kept so far (the buffer beyond them holds zeros) and keeps the
    proposals equal to the greedy tokens, plus one."""
    index, steps, kept = start, 0, 0
    while index < stop and index + k < length:
        row = np.zeros(length, "int32")
        row[:index] = greedy[:index]
        proposed = reference_lookup(row, index, k, max_ngram_size)
        m = 0
        while m < k and proposed[m] == greedy[index + m]:
            m += 1
        steps, kept = steps + 1, kept + min(m, stop - 1 - index)
        index += m + 1
    return [steps, kept]


@pytest.mark.parametrize("k, n", [(4, 3), (1, 1)])
def test_prompt_lookup_greedy_is_plain_greedy_token_for_token(target, k, n):
    plain = kt.generation.generate(target, PROMPTS, max_new_tokens=20)
    fast = kt.generation.generate(
        target, PROMPTS, 20, prompt_lookup_num_tokens=k, prompt_lookup_max_ngram_size=n
    )
    np.testing.assert_array_equal(fast, plain)
    # Its greedy continuation repeats itself: lookup keeps proposals.
    repeating = np.array([20, 21, 22])
    greedy = kt.generation.generate(target, repeating[None], 20 + k)[0]
    tokens, counts = run_speculative(
        target, repeating, 20, num_tokens=k, max_ngram_size=n
    )
    np.testing.assert_array_equal(tokens, greedy[:23])
    assert counts == lookup_statistics(greedy, 3, 23, k, n)
    assert counts[1] > 0
    # No token twice (no_repeat_ngram_size=1): every proposal is refused.
    sampler = kt.generation.GreedySampler(no_repeat_ngram_size=1)
    tokens, counts = run_speculative(
        target, repeating, 20, sampler, num_tokens=k, max_ngram_size=n
    )
    plain = kt.generation.generate(target, repeating[None], 20, sampler)[0]
    np.testing.assert_array_equal(tokens, plain)
    assert len(set(plain)) == 23 and counts == [20, 0]


def test_a_model_as_its_own_draft_and_prompt_lookup_are_compiled_apart(target):
    """Both belong to `target` with the same K and n: the compiled-function
    cache must tell the proposers apart."""
    prompt = np.array([20, 21, 22])
    greedy = kt.generation.generate(target, prompt[None], 24)[0]
    _, own_draft = run_speculative(target, prompt, 20, num_tokens=4, draft_model=target)
    assert own_draft == [4, 16]  # the target proposes its own argmax
    _, lookup = run_speculative(target, prompt, 20, num_tokens=4, max_ngram_size=3)
    assert lookup == lookup_statistics(greedy, 3, 23, 4, 3) != own_draft
    draft_fn = compiled_speculative_fn(
        target, kt.generation.GreedySampler(), 4, draft_model=target
    )
    lookup_fn = compiled_speculative_fn(target, kt.generation.GreedySampler(), 4)
    assert draft_fn is not lookup_fn


@pytest.mark.parametrize(
    "row, index, k, n, expected",
    [
        # The trigram 7 8 9 occurred at 1: what followed it (5 6), then
        # positions not yet written (zeros).
        ([3, 7, 8, 9, 5, 6, 7, 8, 9, 0, 0, 0], 9, 4, 3, [5, 6, 7, 8]),
        # The most recent occurrence wins: 4 was followed by 1, later by 2.
        ([4, 1, 4, 2, 4, 0, 0, 0], 5, 2, 1, [2, 4]),
        # No trigram or bigram match: the unigram 9 (followed by 8).
        ([9, 8, 1, 2, 9, 0, 0, 0], 5, 3, 3, [8, 1, 2]),
        # Nothing matches: zeros.
        ([1, 2, 3, 4, 0, 0, 0, 0], 4, 2, 3, [0, 0]),
        # The suffix itself does not count (its continuation is unwritten).
        ([5, 5, 0, 0, 0, 0], 2, 2, 1, [5, 0]),
        ([6, 0, 0, 0], 1, 2, 2, [0, 0]),
    ],
)
def test_lookup_proposes_what_followed_the_latest_match(row, index, k, n, expected):
    tokens = np.array([row, row[::-1]], "int32")  # rows are independent
    proposed = lookup(tf.constant(tokens), tf.constant(index), k, n).numpy()
    assert proposed[0].tolist() == expected
    assert proposed[1].tolist() == reference_lookup(tokens[1], index, k, n)
    assert reference_lookup(tokens[0], index, k, n) == expected


def test_end_tokens_and_the_end_of_the_buffer(target, close_draft):
    plain = kt.generation.generate(target, PROMPTS, max_new_tokens=20)
    end = int(plain[1, 7])  # row 1 stops at its fifth new token, or earlier
    expected = kt.generation.generate(target, PROMPTS, 20, end_token_id=end)
    assert (expected == 0).sum() > (plain == 0).sum()  # some row did stop
    for options in [
        {"draft_model": close_draft, "num_speculative_tokens": 3},
        {"prompt_lookup_num_tokens": 3},
    ]:
        fast = kt.generation.generate(target, PROMPTS, 20, end_token_id=end, **options)
        np.testing.assert_array_equal(fast, expected)
    # Up to max_sequence_length: the last positions are decoded one at a time.
    longest = 48 - PROMPTS.shape[1]
    plain = kt.generation.generate(target, PROMPTS, longest)
    fast = kt.generation.generate(
        target, PROMPTS, longest, draft_model=close_draft, num_speculative_tokens=4
    )
    np.testing.assert_array_equal(fast, plain)


def test_sampler_options_are_applied_at_every_proposed_position(target, close_draft):
    options = dict(min_new_tokens=6, no_repeat_ngram_size=2, suppressed_token_ids=[3])
    end = 11
    plain = kt.generation.generate(target, PROMPTS, 16, end_token_id=end, **options)
    fast = kt.generation.generate(
        target,
        PROMPTS,
        16,
        end_token_id=end,
        draft_model=close_draft,
        num_speculative_tokens=3,
        **options,
    )
    np.testing.assert_array_equal(fast, plain)
    assert not (plain[:, 5:] == 3).any()


def test_steps_and_kept_proposals(target, close_draft):
    """A draft identical to the target has every proposal kept: 20 tokens take
    ceil(20 / 5) steps of K = 4; a close draft keeps some."""
    prompt = PROMPTS[1, :3]
    plain = kt.generation.generate(target, prompt[None], 20)[0]
    for draft in [target, close_draft]:
        tokens, counts = run_speculative(
            target, prompt, 20, num_tokens=4, draft_model=draft
        )
        np.testing.assert_array_equal(tokens, plain)
        if draft is target:
            assert counts == [4, 16]
    steps, kept = counts
    assert 0 < kept < 4 * steps
    assert steps + kept <= 20


# ---- sampling: the target's distribution -----------------------------------


def two_token_distribution(model, prompt, temperature):
    """The model's exact joint distribution of the next two tokens `(V, V)`."""
    vocabulary = model.vocabulary_size

    def probs(logits):
        logits = np.asarray(logits, "float64") / temperature
        logits[..., 0] = -np.inf  # padding is never generated
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    first = probs(model(prompt[None])[0, -1])  # (V,)
    extended = np.concatenate(
        [np.repeat(prompt[None], vocabulary, 0), np.arange(vocabulary)[:, None]], 1
    )
    second = probs(np.asarray(model(extended))[:, -1])  # (V, V): row = first token
    return first[:, None] * second


def chi_square_p_value(samples, joint):
    vocabulary = joint.shape[0]
    counts = np.bincount(
        samples[:, 0] * vocabulary + samples[:, 1], minlength=joint.size
    )
    expected = joint.reshape(-1) * len(samples)
    big = expected >= 5  # cells too rare for the test are pooled
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    return stats.chisquare(observed, expected).pvalue


@pytest.fixture(scope="module")
def small_vocabulary():
    """A 6-token target and a draft that disagrees with it often."""
    target = tiny_gpt(seed=3, vocabulary=6, scale=0.6)
    return target, tiny_gpt(1, 8, seed=4, vocabulary=6, scale=0.6)


def exact_outcomes(p, q):
    """The exact probability of each outcome of one verification step, for
    proposals drawn independently from `q` `(K, V)` and a target `p`
    `(K + 1, V)`: the row keeps j proposals d_0 .. d_{j-1} (each with
    probability min(q_i(d_i), p_i(d_i))) and then draws x, from the residual
    max(0, p_j - q_j) after the refusal at j < K (the refusal's probability
    folded in), or from p_K after all K. Keyed by `(d_0, .., d_{j-1}, x)`."""
    k, vocabulary = q.shape
    outcomes = {}
    for j in range(k + 1):
        last = p[k] if j == k else np.maximum(p[j] - q[j], 0.0)
        for kept in np.ndindex(*[vocabulary] * j):
            keep = np.prod([min(q[i, d], p[i, d]) for i, d in enumerate(kept)])
            for x in range(vocabulary):
                outcomes[(*kept, x)] = keep * last[x]
    return outcomes


def verify_rows(p, q, rows, seed=0):
    """One verification step on `rows` rows sharing `p` and `q`: proposals
    drawn from `q` in numpy, then `accepted`, `residual` and the draw the
    decode loop makes. Returns each row's outcome `(d_0, .., d_{j-1}, x)`."""
    k, vocabulary = q.shape
    rng = np.random.default_rng(seed)
    proposed = np.stack(
        [rng.choice(vocabulary, size=rows, p=q[i]) for i in range(k)], 1
    ).astype("int32")
    uniform = rng.uniform(size=(rows, k)).astype("float32")
    p_rows = tf.constant(np.repeat(p[None], rows, 0), tf.float32)
    q_rows = tf.constant(np.repeat(q[None], rows, 0), tf.float32)
    kept = accepted(p_rows, q_rows, tf.constant(proposed), tf.constant(uniform))
    drawn = draw(residual(p_rows, q_rows, kept), tf.constant([seed, 1]))
    return [
        (*proposed[r, :j], x)
        for r, (j, x) in enumerate(zip(kept.numpy(), drawn.numpy(), strict=True))
    ]


def outcome_p_value(outcomes, exact):
    cells = [cell for cell, probability in exact.items() if probability > 0]
    counts = collections.Counter(outcomes)
    assert set(counts) <= set(cells)  # nothing impossible happens
    observed = np.array([counts[c] for c in cells], "float64")
    expected = np.array([exact[c] for c in cells]) * len(outcomes)
    big = expected >= 5  # cells too rare for the test are pooled
    if not big.all():
        observed = np.append(observed[big], observed[~big].sum())
        expected = np.append(expected[big], expected[~big].sum())
    return stats.chisquare(observed, expected).pvalue


def random_distributions(rng, shape, zeros=0):
    logits = rng.normal(size=shape) * 1.5
    logits[..., :zeros] = -np.inf  # tokens a distribution never gives
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("proposer", ["draft", "lookup"])
def test_one_verification_step_is_distributed_as_the_exact_rule(proposer):
    """30,000 rows at once through `accepted` and `residual`: every outcome
    (kept proposals, then the row's own draw) as often as Leviathan et al.'s
    rule gives; p and q differ enough that each branch is common. Prompt
    lookup's q is one-hot on its (deterministic) proposals."""
    k, vocabulary = 2, 4
    rng = np.random.default_rng(7)
    p = random_distributions(rng, (k + 1, vocabulary), zeros=1)
    if proposer == "draft":
        q = random_distributions(rng, (k, vocabulary))
    else:
        q = np.eye(vocabulary)[[2, 3]]
    exact = exact_outcomes(p, q)
    assert sum(exact.values()) == pytest.approx(1.0)
    outcomes = verify_rows(p, q, 30000)
    assert outcome_p_value(outcomes, exact) > 1e-3
    # The first token is distributed as p_0, whatever was proposed.
    first = np.bincount([o[0] for o in outcomes], minlength=vocabulary)
    assert stats.chisquare(first[1:], p[0, 1:] * len(outcomes)).pvalue > 1e-3
    assert first[0] == 0


@pytest.mark.slow
def test_sampling_follows_the_target_distribution(small_vocabulary):
    """End to end through `generate` with a draft, K = 1 and two new tokens:
    when the proposal is kept, the second token is the bonus draw from p,
    which the test then sees."""
    target, draft = small_vocabulary
    prompt = np.array([4, 3, 4, 4, 3, 4, 3], "int32")
    joint = two_token_distribution(target, prompt, temperature=0.8)
    # One row a call: the whole batch keeps the fewest proposals any row
    # keeps, so with many rows the bonus draw would hardly ever be seen.
    samples = np.concatenate(
        [
            kt.generation.generate(
                target, prompt[None], 2, "temperature", temperature=0.8, seed=s,
                draft_model=draft, num_speculative_tokens=1,
            )[:, -2:]
            for s in range(1200)
        ]
    )  # fmt: skip
    assert chi_square_p_value(samples, joint) > 1e-3
    # The test has power: the draft's own samples are told apart.
    wrong = kt.generation.generate(
        draft,
        np.repeat(prompt[None], len(samples), 0),
        2,
        "temperature",
        temperature=0.8,
        seed=0,
    )[:, -2:]
    assert chi_square_p_value(wrong, joint) < 1e-6


def test_distributions_are_what_next_token_draws_from():
    logits = np.array([[2.0, 1.0, 0.5, -1.0, 0.0]], "float32")
    top_k = kt.generation.TopKSampler(top_k=2).distribution(logits).numpy()
    e = np.exp([2.0, 1.0])
    np.testing.assert_allclose(top_k, [[e[0] / e.sum(), e[1] / e.sum(), 0, 0, 0]], 1e-6)
    top_p = kt.generation.TopPSampler(top_p=0.7).distribution(logits).numpy()
    soft = np.exp(logits[0]) / np.exp(logits[0]).sum()
    assert soft[0] < 0.7 <= soft[0] + soft[1]  # the nucleus is tokens 0 and 1
    np.testing.assert_allclose(top_p, top_k, 1e-6)
    greedy = kt.generation.GreedySampler().distribution(logits).numpy()
    np.testing.assert_array_equal(greedy, [[1, 0, 0, 0, 0]])
    temperature = kt.generation.TemperatureSampler().distribution(logits).numpy()
    np.testing.assert_allclose(temperature, [soft], 1e-6)


# ---- bad input --------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"num_speculative_tokens": 0, "draft_model": "draft"},
            "num_speculative_tokens=0",
        ),
        ({"num_speculative_tokens": 3}, "needs a `draft_model`"),
        ({"prompt_lookup_num_tokens": 0}, "prompt_lookup_num_tokens=0"),
        (
            {"prompt_lookup_num_tokens": 2, "prompt_lookup_max_ngram_size": 0},
            "max_ngram_size=0",
        ),
        (
            {"draft_model": "other", "num_speculative_tokens": 2},
            "vocabulary_size is 30",
        ),
        ({"draft_model": "seq2seq"}, "draft_model="),
        ({"draft_model": "draft", "sampler": "beam"}, "not beam search"),
        ({"prompt_lookup_num_tokens": 2, "sampler": "beam"}, "not beam search"),
        ({"draft_model": "draft", "use_cache": False}, "use_cache=False"),
        ({"draft_model": "draft", "prompt_lookup_num_tokens": 2}, "not both"),
    ],
)
def test_bad_speculative_settings_raise(target, options, message):
    models = {
        "draft": target,
        "other": tiny_gpt(1, 8, vocabulary=30),
        "seq2seq": kt.models.seq2seq(
            VOCABULARY, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
        ),
    }
    options = {
        k: models.get(v, v) if isinstance(v, str) else v for k, v in options.items()
    }
    options = {k: v for k, v in options.items() if not (k == "sampler" and v is None)}
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        kt.generation.generate(target, PROMPTS, 4, **options)


def test_a_seq2seq_model_is_refused(target):
    translator = kt.models.seq2seq(
        VOCABULARY, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    inputs = {"encoder_token_ids": PROMPTS, "decoder_token_ids": PROMPTS[:, :1]}
    with pytest.raises(ValueError, match="decoder-only"):
        kt.generation.generate(translator, inputs, 4, prompt_lookup_num_tokens=2)
