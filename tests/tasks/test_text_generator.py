"""kt.tasks.TextGenerator: text in, text out, with transformers' text on the
tiny GPT-2 fixture and the hand-wired path's ids."""

import json
import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_export_test, spread_weights

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")
with open(os.path.join(HF, "gpt2_tiny_tasks.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)
PROMPTS = REFERENCE["prompts"]
NEW = REFERENCE["max_new_tokens"]


@pytest.fixture(scope="module")
def generator():
    return kt.tasks.from_pretrained(os.path.join(HF, "gpt2_tiny"))


def reference_texts(case):
    return [row["texts"] for row in REFERENCE["cases"][case]["outputs"]]


def test_from_pretrained_gives_a_text_generator_with_its_end_token(generator):
    assert type(generator) is kt.tasks.TextGenerator
    assert generator.end_token == "<|endoftext|>"
    assert generator.end_token_id == generator.tokenizer.token_to_id("<|endoftext|>")


def test_greedy_text_is_transformers_for_a_batch_of_lengths(generator):
    """One batch of prompts of 7, 2 and 1 tokens: each gets its NEW tokens,
    and the text transformers decodes from them."""
    texts = generator.generate(PROMPTS, max_new_tokens=NEW)
    assert texts == [t[0] for t in reference_texts("greedy")]
    assert generator.generate(PROMPTS[1], max_new_tokens=NEW) == texts[1]


def test_generated_ids_are_the_hand_wired_paths(generator):
    """tokenize, pad, kt.generation.generate, cut, detokenize by hand."""
    tokenizer, model = generator.tokenizer, generator.model
    rows = tokenizer.tokenize(PROMPTS).to_list()
    for prompt, row, expected in zip(
        PROMPTS, rows, REFERENCE["cases"]["greedy"]["outputs"], strict=True
    ):
        out = kt.generation.generate(model, np.array([row]), NEW)[0, len(row) :]
        np.testing.assert_array_equal(out, np.array(expected["ids"][0]) + 1)
        text = tokenizer.detokenize(out[None]).numpy()[0].decode()
        assert generator.generate(prompt, max_new_tokens=NEW) == text


@pytest.mark.parametrize(
    "case, penalty",
    [("repetition_penalty", 1.5), ("repetition_penalty_below_one", 0.7)],
)
def test_repetition_penalty_is_transformers(generator, case, penalty):
    texts = generator.generate(PROMPTS, max_new_tokens=NEW, repetition_penalty=penalty)
    assert texts == [t[0] for t in reference_texts(case)]
    assert texts != [t[0] for t in reference_texts("greedy")]


def test_num_return_sequences_draws_per_prompt(generator):
    settings = dict(max_new_tokens=6, sampler="temperature", seed=3)
    texts = generator.generate(PROMPTS[:2], num_return_sequences=3, **settings)
    assert [len(t) for t in texts] == [3, 3]
    assert len(set(texts[0])) > 1  # independent draws
    # The same as each prompt repeated three times in one batch.
    repeated = [p for p in PROMPTS[:2] for _ in range(3)]
    flat = generator.generate(repeated, **settings)
    assert flat == texts[0] + texts[1]
    assert generator.generate(PROMPTS[:2], num_return_sequences=3, **settings) == texts


def test_stop_strings_cut_the_text_even_across_tokens(generator):
    full = generator.generate(PROMPTS[2], max_new_tokens=NEW, repetition_penalty=1.5)
    ids = generator.tokenizer.tokenize([PROMPTS[2] + full]).to_list()[0]
    assert len(full) > 4 and len(ids) > 3
    # Two characters on either side of a token boundary, and one character
    # inside a token of several.
    for stop in [full[2:5], full[3:4]]:
        cut = generator.generate(
            PROMPTS[2], max_new_tokens=NEW, repetition_penalty=1.5, stop=stop
        )
        assert cut == full[: full.find(stop)]
    both = generator.generate(
        PROMPTS[2], max_new_tokens=NEW, repetition_penalty=1.5, stop=["zzz", full[4:6]]
    )
    assert both == full[: full.find(full[4:6])]


def test_return_full_text_prefixes_the_prompt(generator):
    texts = generator.generate(PROMPTS, max_new_tokens=NEW, return_full_text=True)
    assert texts == [
        p + t[0] for p, t in zip(PROMPTS, reference_texts("greedy"), strict=True)
    ]


def test_score_is_transformers_log_likelihood(generator):
    scored = REFERENCE["scored"]
    result = generator.score(scored["texts"])
    np.testing.assert_allclose(
        result["log_likelihood"], scored["log_likelihood"], rtol=1e-5
    )
    counts = [
        len(r) - 1 for r in generator.tokenizer.tokenize(scored["texts"]).to_list()
    ]
    np.testing.assert_allclose(
        result["perplexity"],
        np.exp(-np.array(scored["log_likelihood"]) / counts),
        rtol=1e-5,
    )
    one = generator.score(scored["texts"][1])
    assert one["log_likelihood"] == pytest.approx(scored["log_likelihood"][1], rel=1e-5)


def test_save_and_load_give_the_same_text(generator, tmp_path):
    expected = generator.generate(PROMPTS, max_new_tokens=NEW)
    path = generator.save(tmp_path / "generator.keras")
    for loaded in [kt.tasks.load(path), keras.saving.load_model(path)]:
        assert type(loaded) is kt.tasks.TextGenerator
        assert loaded.end_token == "<|endoftext|>"
        assert loaded.generate(PROMPTS, max_new_tokens=NEW) == expected


def test_export_serves_the_generated_text(generator, tmp_path):
    path = generator.export(tmp_path / "served", max_new_tokens=NEW)
    request = {
        "prompts": np.array(PROMPTS, dtype=object),
        "max_new_tokens": np.int32(NEW),
        "temperature": np.float32(0.0),
    }
    _, (out,) = run_export_test(path, [("generate", request)], tmp_path)
    expected = generator.generate(PROMPTS, max_new_tokens=NEW)
    assert [t.decode() for t in out["generated_text"]] == expected


@pytest.mark.slow
def test_fit_on_text_is_fit_on_the_hand_made_windows():
    corpus = ["the quick brown fox", "jumps over the lazy dog"] * 8
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(corpus))

    def model():
        keras.utils.set_random_seed(0)
        built = kt.models.gpt2(
            tokenizer.vocabulary_size(), num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=12, dropout=0.0,
        )  # fmt: skip
        return spread_weights(built, scale=0.1)

    task = kt.tasks.TextGenerator(model(), tokenizer)
    history = task.fit(corpus, batch_size=4, epochs=2, verbose=0)
    by_hand = model()
    by_hand.compile(
        optimizer=keras.optimizers.AdamW(5e-5),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    import tensorflow as tf

    windows = kt.text.causal_lm_dataset(
        tf.data.Dataset.from_tensor_slices(corpus), tokenizer, 12, 4
    )
    expected = by_hand.fit(windows, epochs=2, verbose=0)
    np.testing.assert_allclose(
        history.history["loss"], expected.history["loss"], rtol=1e-6
    )
    assert history.history["loss"][1] < history.history["loss"][0]


@pytest.mark.parametrize(
    "arguments, match",
    [
        ({"prompts": []}, "prompts"),
        ({"prompts": ""}, "prompts"),
        ({"prompts": ["ok", 3]}, "item 1"),
        ({"prompts": "ok", "stop": [1]}, "stop"),
        ({"prompts": "ok", "stop": ""}, "stop"),
        ({"prompts": "ok", "max_new_tokens": 32}, "max_new_tokens"),
        ({"prompts": "ok", "num_return_sequences": 2}, "num_return_sequences"),
        ({"prompts": "ok", "stream": True}, "stream"),
        ({"prompts": "ok", "repetition_penalty": 0}, "repetition_penalty"),
    ],
)
def test_bad_arguments(generator, arguments, match):
    with pytest.raises(ValueError, match=match):
        generator.generate(**{"max_new_tokens": 4, **arguments})


def test_bad_scores_and_folders(generator):
    with pytest.raises(ValueError, match="texts"):
        generator.score(["F"])  # one token: nothing is predicted
    with pytest.raises(ValueError, match="BertModel"):
        kt.tasks.TextGenerator.from_pretrained(os.path.join(HF, "bert_tiny"))
