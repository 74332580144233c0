"""export_text_generator: served without keras_transformer, it generates what
`kt.generation.generate` generates."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.generation.decode import compiled_speculative_fn
from keras_transformer.generation.speculative import lookup
from tests.helpers import run_export_test, spread_weights

LIMIT = 32  # max_sequence_length: one decode bucket, as in generate
CAP = 12  # the export's max_new_tokens
CORPUS = "the quick brown fox jumps over the lazy dog. Hello, World!"


def make_prompts(count, seed=0):
    """Empty, unknown characters, longer than the model, and random slices."""
    texts = ["", "héllo ☃", CORPUS * 2, "t"]
    rng = np.random.default_rng(seed)
    while len(texts) < count:
        start, length = rng.integers(len(CORPUS)), rng.integers(0, 40)
        texts.append(CORPUS[start : start + length])
    return texts


PROMPTS = make_prompts(64)


def greedy(new, temperature=0.0, prompts=PROMPTS):
    return (
        "generate",
        {
            "prompts": prompts,
            "max_new_tokens": np.int32(new),
            "temperature": np.float32(temperature),
        },
    )


# Batches of 64 and 1 only: each batch size compiles the decode loop once.
REQUESTS = {
    "batch_64": greedy(8),
    "batch_1": greedy(5, prompts=["the lazy"]),
    "asks_too_many": greedy(1000),
    "negative_count": greedy(-3),
    "negative_temperature": greedy(4, temperature=-1.0),
    "cold": greedy(6, temperature=1e-6),
    "hot": greedy(8, temperature=1.0),
    "hot_again": greedy(8, temperature=1.0),
    # One new token for 2000 copies of a prompt, at two temperatures (one
    # more compiled batch size): the draws' frequencies are checked.
    "draws_t1": greedy(1, temperature=1.0, prompts=["the"] * 2000),
    "draws_t05": greedy(1, temperature=0.5, prompts=["the"] * 2000),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    keras.utils.set_random_seed(0)
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary([CORPUS]))
    model = kt.models.gpt2(
        tokenizer.vocabulary_size(),
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=LIMIT,
        dropout=0,
    )
    spread_weights(model)
    folder = tmp_path_factory.mktemp("generator")
    path = kt.export.export_text_generator(
        model, tokenizer, folder / "generator", max_new_tokens=CAP
    )
    names, results = run_export_test(path, list(REQUESTS.values()), folder)
    return model, tokenizer, names, dict(zip(REQUESTS, results, strict=True))


def prompt_ids(tokenizer, prompts, new):
    """The export keeps each prompt's last LIMIT - new tokens; an empty one
    starts from [END]."""
    end = tokenizer.token_to_id("[END]")
    rows = tokenizer.tokenize(prompts).to_list()
    return [row[-(LIMIT - new) :] or [end] for row in rows]


def expected(model, tokenizer, prompts, new):
    """Greedy ids `(B, LIMIT)`, texts and generated texts, from `generate`."""
    end = tokenizer.token_to_id("[END]")
    rows = prompt_ids(tokenizer, prompts, new)
    prompt = np.zeros((len(rows), max(map(len, rows))), "int32")
    for i, row in enumerate(rows):
        prompt[i, : len(row)] = row
    out = kt.generation.generate(model, prompt, new, end_token_id=end)
    ids = np.zeros((len(rows), LIMIT), "int32")
    for i, row in enumerate(rows):  # every prompt gets exactly `new` tokens
        ids[i, : len(row) + new] = out[i, : len(row) + new]
    visible = np.where(ids == end, 0, ids)
    generated = visible.copy()
    for i, row in enumerate(rows):
        generated[i, : len(row)] = 0
    texts = tokenizer.detokenize(visible).numpy().tolist()
    return ids, texts, tokenizer.detokenize(generated).numpy().tolist()


def check_greedy(served, name, prompts, new):
    model, tokenizer, _, results = served
    ids, texts, generated = expected(model, tokenizer, prompts, new)
    np.testing.assert_array_equal(results[name]["token_ids"], ids)
    assert results[name]["text"].tolist() == texts
    assert results[name]["generated_text"].tolist() == generated
    return results[name]


def test_signatures(served):
    assert served[2] == ["generate", "serving_default"]


def test_batch_of_64_with_empty_unknown_and_too_long_prompts_equals_generate(served):
    out = check_greedy(served, "batch_64", PROMPTS, 8)
    tokenizer = served[1]
    texts = out["text"].tolist()
    # The long prompt keeps its last LIMIT - 8 characters, then 8 new ones.
    assert texts[2].decode().startswith((CORPUS * 2)[-(LIMIT - 8) :])
    assert texts[1].decode().startswith("h[UNK]llo [UNK]")
    end = tokenizer.token_to_id("[END]")
    assert out["token_ids"][0, 0] == end  # the empty prompt starts a document
    assert len(set(out["generated_text"].tolist())) > 20  # not degenerate


def test_batch_of_1_equals_generate(served):
    out = check_greedy(served, "batch_1", ["the lazy"], 5)
    assert out["text"][0].decode().startswith("the lazy")
    assert np.count_nonzero(out["token_ids"]) <= 8 + 5


def test_max_new_tokens_is_clipped_to_the_export_cap_and_to_zero(served):
    check_greedy(served, "asks_too_many", PROMPTS, CAP)
    out = check_greedy(served, "negative_count", PROMPTS, 0)
    assert out["generated_text"].tolist() == [b""] * len(PROMPTS)
    assert out["text"][3] == b"t"


def test_temperature_at_or_below_zero_is_greedy_and_tiny_is_greedy(served):
    check_greedy(served, "negative_temperature", PROMPTS, 4)
    check_greedy(served, "cold", PROMPTS, 6)


def test_positive_temperature_samples(served):
    model, tokenizer, _, results = served
    out = results["hot"]
    ids, _, _ = expected(model, tokenizer, PROMPTS, 8)
    assert not np.array_equal(out["token_ids"], ids)  # it does sample
    end = tokenizer.token_to_id("[END]")
    visible = np.where(out["token_ids"] == end, 0, out["token_ids"])
    assert tokenizer.detokenize(visible).numpy().tolist() == out["text"].tolist()
    assert np.all(out["token_ids"] < tokenizer.vocabulary_size())
    for row in out["token_ids"]:
        length = np.count_nonzero(row)
        assert np.all(row[:length] != 0) and np.all(row[length:] == 0)
    # Each prompt gets 8 new tokens, or fewer when it emits [END].
    rows = prompt_ids(tokenizer, PROMPTS, 8)
    for row, prompt in zip(out["token_ids"], rows, strict=True):
        np.testing.assert_array_equal(row[: len(prompt)], prompt)
        new = row[len(prompt) :][row[len(prompt) :] != 0]
        assert len(new) == 8 or (len(new) < 8 and new[-1] == end)


@pytest.mark.slow
def test_each_call_draws_a_new_seed(served):
    _, _, _, results = served
    assert not np.array_equal(
        results["hot"]["token_ids"], results["hot_again"]["token_ids"]
    )


@pytest.mark.parametrize("name, temperature", [("draws_t1", 1.0), ("draws_t05", 0.5)])
def test_sampled_frequencies_follow_softmax_over_temperature(served, name, temperature):
    model, tokenizer, _, results = served
    prompt = np.array(tokenizer(["the"]).to_list())  # (1, 3)
    logits = np.asarray(model(prompt))[0, -1].astype("float64") / temperature
    logits[0] = -np.inf  # padding is never drawn
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    drawn = results[name]["token_ids"][:, prompt.shape[1]]
    counts = np.bincount(drawn, minlength=len(probabilities)) / len(drawn)
    sigma = np.sqrt(probabilities * (1 - probabilities) / len(drawn))
    np.testing.assert_array_less(np.abs(counts - probabilities), 5 * sigma + 1e-3)
    assert probabilities.max() < 0.9  # a real distribution, not a near-argmax


@pytest.mark.slow
def test_without_xla_and_without_end_token(served, tmp_path):
    model, tokenizer, _, results = served
    path = kt.export.export_text_generator(
        model, tokenizer, tmp_path / "plain", max_new_tokens=CAP, jit_compile=False
    )
    generate = tf.saved_model.load(path).signatures["generate"]
    out = generate(**{k: tf.constant(v) for k, v in greedy(8)[1].items()})
    np.testing.assert_array_equal(out["token_ids"], results["batch_64"]["token_ids"])
    # end_token=None: no early stop, and an empty prompt gives empty text.
    path = kt.export.export_text_generator(
        model, tokenizer, tmp_path / "endless", end_token=None, jit_compile=False
    )
    generate = tf.saved_model.load(path).signatures["generate"]
    out = generate(**{k: tf.constant(v) for k, v in greedy(8)[1].items()})
    rows = tokenizer.tokenize(PROMPTS).to_list()
    empty = [i for i, row in enumerate(rows) if not row]
    assert 0 in empty and set(out["text"].numpy()[empty]) == {b""}
    assert not np.any(out["token_ids"].numpy()[empty])
    rows = [row[-(LIMIT - 8) :] for row in rows if row]
    prompt = tf.ragged.constant(rows).to_tensor().numpy()
    reference = kt.generation.generate(model, prompt, 8)  # no end token
    ids = np.delete(out["token_ids"].numpy(), empty, axis=0)
    for row, served_row, expected_row in zip(rows, ids, reference, strict=True):
        stop = len(row) + 8
        np.testing.assert_array_equal(served_row[:stop], expected_row[:stop])
        assert not np.any(served_row[stop:])


def lookup_statistics(model, tokenizer, prompt, new):
    """`[steps, kept]` of greedy prompt lookup (K = 3, n <= 3) in the
    library, on the buffer the export decodes in."""
    (row,) = prompt_ids(tokenizer, [prompt], new)
    tokens = np.zeros((1, LIMIT), "int32")
    tokens[0, : len(row)] = row
    decode = compiled_speculative_fn(model, kt.generation.GreedySampler(), 3)
    end = tokenizer.token_to_id("[END]")
    _, stats = decode(tokens, tokens[:, :1], len(row), len(row) + new, end, [0, 0])
    return stats.numpy().tolist()


# A prompt whose continuation is quoted, and (as 64 rows, 20 times) one
# whose prompt-lookup proposals are checked by sampling.
QUOTING = [CORPUS[:20] + " " + CORPUS[:9]]
SAMPLED, SAMPLED_TEMPERATURE = "rown fox jumprow", 0.3


@pytest.fixture(scope="module")
def served_lookup(served, tmp_path_factory):
    model, tokenizer, _, _ = served
    folder = tmp_path_factory.mktemp("lookup")
    path = kt.export.export_text_generator(
        model,
        tokenizer,
        folder / "lookup",
        max_new_tokens=CAP,
        prompt_lookup_num_tokens=3,
    )
    requests = [greedy(8), greedy(CAP, prompts=QUOTING), greedy(8, temperature=1.0)]
    requests += [greedy(1, SAMPLED_TEMPERATURE, prompts=[SAMPLED] * 64)] * 20
    _, results = run_export_test(path, requests, folder)
    return results


def test_prompt_lookup_export_generates_the_same_tokens(served, served_lookup):
    """Greedy requests get plain greedy's tokens; a sampled one still runs."""
    model, tokenizer, _, results = served
    batch_64, quote, hot = served_lookup[:3]
    np.testing.assert_array_equal(
        batch_64["token_ids"], results["batch_64"]["token_ids"]
    )
    assert batch_64["text"].tolist() == results["batch_64"]["text"].tolist()
    ids, texts, _ = expected(model, tokenizer, QUOTING, CAP)
    np.testing.assert_array_equal(quote["token_ids"], ids)
    assert quote["text"].tolist() == texts
    assert hot["token_ids"].shape == (64, LIMIT)
    assert (hot["token_ids"] != batch_64["token_ids"]).any()


def test_prompt_lookup_export_reports_the_lookup_it_ran(served, served_lookup):
    """The served [steps, kept] are the library's prompt lookup's: an export
    that decoded one token per step could not give them."""
    model, tokenizer, _, results = served
    quote = served_lookup[1]
    steps, kept = lookup_statistics(model, tokenizer, QUOTING[0], CAP)
    assert kept > 0  # the quote was proposed and kept
    assert [quote["lookup_steps"], quote["lookup_kept"]] == [steps, kept]
    assert "lookup_steps" not in results["batch_64"]  # only lookup exports


def test_prompt_lookup_export_samples_from_softmax(served, served_lookup):
    """The first new token of 1280 draws through prompt lookup's accept and
    residual rule has softmax(logits / temperature)'s frequencies."""
    model, tokenizer, _, _ = served
    prompt = np.array(tokenizer([SAMPLED]).to_list())  # (1, P)
    logits = np.asarray(model(prompt))[0, -1].astype("float64")
    logits = logits / SAMPLED_TEMPERATURE
    logits[0] = -np.inf  # padding is never drawn
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    proposal = tokenizer.token_to_id("n")  # what followed "row" before
    assert lookup(prompt_with_room(prompt), prompt.shape[1], 3, 3)[0, 0] == proposal
    # Kept about 1 time in 7: a rule that kept it always, or drew the
    # refused ones from p instead of max(p - q, 0), would be 13+ sigma off.
    assert 0.1 < probabilities[proposal] < 0.9
    draws = np.concatenate(
        [out["token_ids"][:, prompt.shape[1]] for out in served_lookup[3:]]
    )
    counts = np.bincount(draws, minlength=len(probabilities)) / len(draws)
    sigma = np.sqrt(probabilities * (1 - probabilities) / len(draws))
    np.testing.assert_array_less(np.abs(counts - probabilities), 5 * sigma + 1e-3)


def prompt_with_room(prompt):
    tokens = np.zeros((1, LIMIT), "int32")
    tokens[:, : prompt.shape[1]] = prompt
    return tokens


def test_bad_arguments(served, tmp_path):
    model, tokenizer, _, _ = served
    export = kt.export.export_text_generator
    seq2seq = kt.models.seq2seq(
        40,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
    )
    with pytest.raises(ValueError, match="kt.models.CausalLM.*model=.*'seq2seq'"):
        export(seq2seq, tokenizer, tmp_path / "a")
    for bad in (0, -2, LIMIT, 2.5, True):
        with pytest.raises(ValueError, match=f"max_new_tokens={bad!r}"):
            export(model, tokenizer, tmp_path / "a", max_new_tokens=bad)
    with pytest.raises(ValueError, match=r"end_token='\[NOPE\]'"):
        export(model, tokenizer, tmp_path / "a", end_token="[NOPE]")
    big = kt.text.CharTokenizer(kt.text.build_char_vocabulary([CORPUS + "€£¥"]))
    with pytest.raises(ValueError, match="`tokenizer` has 42 tokens.*\\(39\\)"):
        export(model, big, tmp_path / "a")
    with pytest.raises(ValueError, match="jit_compile=1"):
        export(model, tokenizer, tmp_path / "a", jit_compile=1)
    with pytest.raises(ValueError, match="`tokenizer` must be"):
        export(model, "chars", tmp_path / "a")
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens=0"):
        export(model, tokenizer, tmp_path / "a", prompt_lookup_num_tokens=0)
    with pytest.raises(ValueError, match="prompt_lookup_max_ngram_size=-1"):
        export(
            model,
            tokenizer,
            tmp_path / "a",
            prompt_lookup_num_tokens=2,
            prompt_lookup_max_ngram_size=-1,
        )
    assert not (tmp_path / "a").exists()
