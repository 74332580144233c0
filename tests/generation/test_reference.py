"""`kt.generation.generate` against Hugging Face `transformers` `generate`,
token for token, on the tiny random GPT-2 of `tests/fixtures/hf/gpt2_tiny`.

`generation_reference.json` (made by
`tests/fixtures/make_generation_fixtures.py` with torch) holds the prompts,
HF's settings and HF's outputs, one prompt per HF call with `max_length` 20.
Here the prompts run batched (0-padded on the right, every row filled to
position 20, as HF's rows each are), so the test also covers batching:
greedy, and beam search with `rules="transformers"` where each row waits
until its own prompt has ended. Ids are GPT-2's + 1 (0 is our padding).
"""

import json
import pathlib

import numpy as np
import pytest

import keras_transformer as kt

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
REFERENCE = json.loads((FIXTURES / "generation_reference.json").read_text())
MAX_LENGTH = REFERENCE["max_length"]
PROMPTS = REFERENCE["prompts"]
CASES = {case["name"]: case for case in REFERENCE["cases"]}


@pytest.fixture(scope="module")
def model():
    return kt.models.from_pretrained(str(FIXTURES / "gpt2_tiny"))


def our_arguments(hf, prompt_length):
    """`generate` keyword arguments (ours) for HF's `generate` kwargs, for a
    prompt of `prompt_length` GPT-2 tokens."""
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
        args["suppressed_token_ids"] = tuple(ids[0] + 1 for ids in hf["bad_words_ids"])
    if "forced_bos_token_id" in hf and prompt_length == 1:
        # HF forces it at length 1 only: right after a one-token prompt.
        args["forced_first_token_id"] = hf["forced_bos_token_id"] + 1
    if "forced_eos_token_id" in hf:
        assert hf["forced_eos_token_id"] == hf["eos_token_id"]
        args["force_end_token"] = True
    if "renormalize_logits" in hf:
        args["renormalize_logits"] = hf["renormalize_logits"]
    return args


def run_case(model, name, use_cache=True):
    """Our outputs for every prompt of the case, batched where the
    arguments agree. Returns `{prompt index: (MAX_LENGTH,) ids}`."""
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
        out = kt.generation.generate(
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


@pytest.mark.parametrize("name", list(CASES))
def test_generate_matches_transformers_token_for_token(model, name):
    outputs = run_case(model, name)
    mismatched = [
        row
        for row in range(len(PROMPTS))
        if not np.array_equal(outputs[row], expected(name, row))
    ]
    assert not mismatched, "\n".join(
        f"prompt {row}: ours {outputs[row].tolist()}\n"
        f"      HF's {expected(name, row).tolist()}"
        for row in mismatched
    )


def test_the_reference_covers_what_it_claims():
    # Hypotheses end early and late, and the settings matter: early stopping,
    # the length penalty and renormalisation each change some outputs.
    def new_lengths(name):
        return [
            len(out) - len(prompt)
            for out, prompt in zip(CASES[name]["outputs"], PROMPTS, strict=True)
        ]

    assert 1 in {len(prompt) for prompt in PROMPTS}
    lengths = new_lengths("beam4_lp1_esTrue")
    assert min(lengths) < 6 and max(lengths) == MAX_LENGTH - 1
    assert lengths != new_lengths("beam4_lp1_esFalse")
    assert new_lengths("beam3_lp0_esFalse") != new_lengths("beam3_lp2_esFalse")
    assert (
        CASES["beam_marian_like_renormalizeTrue"]["outputs"]
        != CASES["beam_marian_like_renormalizeFalse"]["outputs"]
    )


def test_without_the_cache_gives_the_same_tokens(model):
    name = "beam_bart_like"
    outputs = run_case(model, name, use_cache=False)
    for row in range(len(PROMPTS)):
        np.testing.assert_array_equal(outputs[row], expected(name, row))
