"""`kt.generation.generate` against Hugging Face `transformers` `generate`,
token for token, on the tiny random GPT-2 of `tests/fixtures/hf/gpt2_tiny`.

`generation_reference.json` (made by
`tests/fixtures/make_generation_fixtures.py` with torch) holds the prompts,
HF's settings and HF's outputs, one prompt per HF call with `max_length` 20.
Here the prompts run batched (0-padded on the right, every row filled to
position 20, as HF's rows each are), so the test also covers batching:
greedy, and beam search with `rules="transformers"`, where a row waits until
its own prompt has ended. Ids are GPT-2's + 1 (0 is our padding).

Each sampler setting costs a trace of the decode loop: most cases run it
as a plain `tf.function` (the graph that exports trace, without XLA, about
3x cheaper to build); `XLA_CASES` run through `generate` (XLA-compiled).
"""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
REFERENCE = json.loads((FIXTURES / "generation_reference.json").read_text())
MAX_LENGTH = REFERENCE["max_length"]
PROMPTS = REFERENCE["prompts"]
CASES = {case["name"]: case for case in REFERENCE["cases"]}
XLA_CASES = ["greedy", "greedy_short", "beam_marian_like_renormalizeTrue"]
BUFFER = 32  # the model's max_sequence_length, and generate's bucket


@pytest.fixture(scope="module")
def model():
    return kt.models.from_pretrained(str(FIXTURES / "gpt2_tiny"))


def our_arguments(hf, prompt_length):
    """Our `generate` keyword arguments for HF's `generate` kwargs and a
    prompt of `prompt_length` tokens."""
    args = {"end_token_id": hf["eos_token_id"] + 1}
    if "num_beams" in hf:
        args.update(
            sampler="beam",
            rules="transformers",
            num_beams=hf["num_beams"],
            length_penalty=hf["length_penalty"],
            early_stopping=hf["early_stopping"],
        )
    if "no_repeat_ngram_size" in hf:
        args["no_repeat_ngram_size"] = hf["no_repeat_ngram_size"]
    if "min_new_tokens" in hf:
        args["min_new_tokens"] = hf["min_new_tokens"]
    if "min_length" in hf:  # a decoder-only model's min_length counts the prompt
        args["min_new_tokens"] = max(0, hf["min_length"] - prompt_length)
    if "bad_words_ids" in hf:
        args["suppressed_token_ids"] = tuple(i[0] + 1 for i in hf["bad_words_ids"])
    if "forced_bos_token_id" in hf and prompt_length == 1:
        # HF forces it at length 1 only: right after a one-token prompt.
        args["forced_first_token_id"] = hf["forced_bos_token_id"] + 1
    if "forced_eos_token_id" in hf:
        assert hf["forced_eos_token_id"] == hf["eos_token_id"]
        args["force_end_token"] = True
    if "renormalize_logits" in hf:
        args["renormalize_logits"] = hf["renormalize_logits"]
    return args


GRAPHS = {}


def generate_without_xla(model, prompts, max_new_tokens, end_token_id, use_cache,
                         sampler="greedy", **sampler_args):  # fmt: skip
    """`generate`'s decode loop as a plain `tf.function` with a dynamic batch
    (one trace per setting), on the same inputs as `generate` builds."""
    sampler = kt.generation.get_sampler(sampler, **sampler_args)
    key = (sampler.config(), use_cache)
    if key not in GRAPHS:
        int_spec = tf.TensorSpec([], tf.int32)
        GRAPHS[key] = tf.function(
            kt.generation.decode_function(model, sampler, use_cache),
            input_signature=[
                tf.TensorSpec([None, BUFFER], tf.int32),
                tf.TensorSpec([None, 1], tf.int32),
                int_spec,
                int_spec,
                int_spec,
                tf.TensorSpec([2], tf.int32),
            ],
        )
    tokens = np.zeros((len(prompts), BUFFER), "int32")
    tokens[:, : prompts.shape[1]] = prompts
    total = prompts.shape[1] + max_new_tokens
    out = GRAPHS[key](
        tf.constant(tokens),
        tf.zeros((len(prompts), 1), tf.int32),
        tf.constant(int(np.sum(prompts != 0, axis=1).min())),
        tf.constant(total),
        tf.constant(end_token_id),
        tf.constant([0, 0]),
    )
    return out.numpy()[:, :total]


def run_case(model, name, use_cache=True, xla=False):
    """Our outputs for every prompt of the case, batched where the arguments
    agree. Returns `{prompt index: (MAX_LENGTH,) ids}`."""
    hf = CASES[name]["kwargs"]
    groups = {}
    for row, prompt in enumerate(PROMPTS):
        args = our_arguments(hf, len(prompt))
        groups.setdefault(tuple(sorted(args.items())), []).append(row)
    outputs = {}
    for args, rows in groups.items():
        width = max(len(PROMPTS[row]) for row in rows)
        prompts = np.zeros((len(rows), width), "int32")
        for i, row in enumerate(rows):
            prompts[i, : len(PROMPTS[row])] = np.array(PROMPTS[row]) + 1
        decode = kt.generation.generate if xla else generate_without_xla
        out = decode(
            model, prompts, MAX_LENGTH - width, use_cache=use_cache, **dict(args)
        )
        outputs.update(zip(rows, out, strict=True))
    return outputs


def expected(name, row):
    """HF's output for the row in our ids, 0 after its end token."""
    ids = np.zeros(MAX_LENGTH, "int32")
    hf = CASES[name]["outputs"][row]
    ids[: len(hf)] = np.array(hf) + 1
    return ids


def assert_matches(outputs, name):
    mismatched = [
        row
        for row in range(len(PROMPTS))
        if not np.array_equal(outputs[row], expected(name, row))
    ]
    assert not mismatched, f"{name}:\n" + "\n".join(
        f"prompt {row}: ours {outputs[row].tolist()}\n"
        f"      HF's {expected(name, row).tolist()}"
        for row in mismatched
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in CASES if name not in XLA_CASES])
def test_decode_loop_matches_transformers_token_for_token(model, name):
    assert_matches(run_case(model, name), name)


@pytest.mark.slow
def test_generate_with_xla_matches_transformers_token_for_token(model):
    for name in XLA_CASES:
        assert_matches(run_case(model, name, xla=True), name)


def test_without_the_cache_gives_the_same_tokens(model):
    name = "beam_marian_like_renormalizeFalse"
    assert_matches(run_case(model, name, use_cache=False), name)


def test_the_reference_covers_what_it_claims():
    # Hypotheses end early and late, and the settings matter: early stopping,
    # the length penalty and renormalisation each change some outputs.
    def new_lengths(name):
        return [
            len(out) - len(prompt)
            for out, prompt in zip(CASES[name]["outputs"], PROMPTS, strict=True)
        ]

    assert 1 in {len(prompt) for prompt in PROMPTS}
    lengths = new_lengths("beam4_lp1_True")
    assert min(lengths) <= 5 and max(lengths) >= 15
    assert lengths != new_lengths("beam4_lp1_never")
    assert new_lengths("beam3_lp0_True") != new_lengths("beam3_lp2_True")
    assert (
        CASES["beam_marian_like_renormalizeTrue"]["outputs"]
        != CASES["beam_marian_like_renormalizeFalse"]["outputs"]
    )
    assert {kwargs["early_stopping"] for kwargs in kwargs_of_beams()} == {
        True,
        False,
        "never",
    }
    assert {kwargs["length_penalty"] for kwargs in kwargs_of_beams()} == {0, 1, 2}
    assert {kwargs["num_beams"] for kwargs in kwargs_of_beams()} == {3, 4}


def kwargs_of_beams():
    return [case["kwargs"] for case in CASES.values() if "num_beams" in case["kwargs"]]
