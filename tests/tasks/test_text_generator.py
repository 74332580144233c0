"""kt.tasks.TextGenerator: text in, text out, with transformers' text on the
tiny GPT-2 fixture and the hand-wired path's ids."""

import dataclasses
import json
import os
import shutil
from itertools import combinations

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import run_export_test, spread_weights, to_numpy

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


# A GPT-2 of the same tokenizer whose end token is reachable: greedy texts
# and beams end before NEW tokens (tests/fixtures/make_task_fixtures.py).
with open(os.path.join(HF, "gpt2_tiny_ends_tasks.json"), encoding="utf-8") as f:
    ENDING = json.load(f)


@pytest.fixture(scope="module")
def ending():
    return kt.tasks.from_pretrained(os.path.join(HF, "gpt2_tiny_ends"))


def reference_ids(case):
    return [row["ids"] for row in ENDING["cases"][case]["outputs"]]


def until_end(ids):
    """transformers' ids (ours - 1) up to its end token 0, included."""
    ids = [int(i) for i in ids]
    return ids[: ids.index(0) + 1] if 0 in ids else ids


def new_ids(task, prompt, sampler, max_new_tokens=NEW, **options):
    """`kt.generation.generate`'s new ids for one prompt, each row in
    transformers' ids up to the end token. (Called as the task calls it, so
    that the task reuses the compiled search.)"""
    row = task.tokenizer.tokenize([prompt]).to_list()[0]
    out = kt.generation.generate(
        task.model, np.array([row]), max_new_tokens, sampler,
        end_token_id=[task.end_token_id], **options,
    )  # fmt: skip
    return [until_end(np.asarray(new) - 1) for new in out[:, len(row) :]]


def score(task, prompt, new, length_penalty):
    """transformers' beam score of `new` (its ids) after `prompt`: the sum of
    its log-probabilities under our model over `len(new) ** length_penalty`."""
    row = task.tokenizer.tokenize([prompt]).to_list()[0]
    logits = to_numpy(task.model(np.array([row + [i + 1 for i in new]])))
    logits = logits[0, len(row) - 1 : -1, 1:].astype("float64")  # real tokens
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = log_probs[np.arange(len(new)), new].sum()
    return picked / len(new) ** length_penalty


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
def test_repetition_penalty_is_transformers(ending, case, penalty):
    """transformers' ids, end token included, on a model that reaches it."""
    for prompt, expected in zip(PROMPTS, ENDING["cases"][case]["outputs"], strict=True):
        ids = new_ids(ending, prompt, "greedy", repetition_penalty=penalty)
        assert ids == [until_end(expected["ids"][0])]
        text = ending.generate(prompt, max_new_tokens=NEW, repetition_penalty=penalty)
        assert text == expected["texts"][0]
    assert reference_ids(case) != reference_ids("greedy")


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


BEAM_CASES = [name for name in ENDING["cases"] if name.startswith("beam_")]


@pytest.mark.parametrize("case", BEAM_CASES)
def test_beam_search_returns_transformers_best_beams_and_scores(ending, case):
    """transformers' `num_return_sequences` best hypotheses per prompt, best
    first, as ids (end token included), with its `sequences_scores`: each
    one's log-probability under our model over `new_length **
    length_penalty`. In `beam_finished_and_running` (`max_new_tokens` 5)
    hypotheses still running at the end rank among finished ones by score."""
    kwargs = dict(ENDING["cases"][case]["kwargs"])
    steps = kwargs.pop("max_new_tokens")
    n = kwargs.pop("num_return_sequences")
    beam = kt.generation.BeamSampler(
        kwargs.pop("num_beams"),
        length_penalty=kwargs.pop("length_penalty", 1.0),
        early_stopping=kwargs.pop("early_stopping", False),
        rules="transformers",
        num_return_sequences=n,
    )
    assert not kwargs
    running_first = []  # a hypothesis that did not end above one that did
    for prompt, expected in zip(PROMPTS, ENDING["cases"][case]["outputs"], strict=True):
        ids = new_ids(ending, prompt, beam, steps)
        assert ids == [until_end(row) for row in expected["ids"]]
        scores = [score(ending, prompt, row, beam.length_penalty) for row in ids]
        np.testing.assert_allclose(scores, expected["sequences_scores"], atol=1e-4)
        assert scores == sorted(scores, reverse=True)
        texts = ending.generate(
            prompt, max_new_tokens=steps, sampler=beam, num_return_sequences=n
        )
        assert texts == expected["texts"]
        if case == "beam_return_3":  # one sequence: the best
            best = ending.generate(prompt, max_new_tokens=steps, sampler=beam)
            assert best == texts[0]
        ended = [0 in row for row in ids]
        running_first.append(any(not a and b for a, b in combinations(ended, 2)))
    if case == "beam_finished_and_running":
        assert any(running_first)


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


LONG_PROMPT = "All: speak, speak. " + " ".join(
    ["First Citizen: we are accounted poor citizens"] * 3
)


def test_a_long_prompt_keeps_its_last_tokens(generator, tmp_path):
    """The model's 32 positions, 6 new tokens: a prompt of more tokens than
    26 is continued from its last 26, as documented in `generate` and in
    docs/export.md, in Python and in the export. (Spread weights: the
    fixture's continue most prompts alike.)"""
    model = spread_weights(kt.models.from_pretrained(os.path.join(HF, "gpt2_tiny")))
    spread = kt.tasks.TextGenerator(model, generator.tokenizer, end_token=None)
    row = spread.tokenizer.tokenize([LONG_PROMPT]).to_list()[0]
    keep = model.max_sequence_length - 6
    assert len(row) > keep + 5
    out = kt.generation.generate(model, np.array([row[-keep:]]), 6)
    expected = spread.tokenizer.detokenize(out[:, keep:]).numpy()[0].decode()
    assert spread.generate(LONG_PROMPT, max_new_tokens=6) == expected
    head = kt.generation.generate(model, np.array([row[:keep]]), 6)
    assert head[0, keep:].tolist() != out[0, keep:].tolist()  # it matters which
    # The export, asked for 6 new tokens and for 3 (a prompt of its last 29).
    path = spread.export(tmp_path / "served", max_new_tokens=6)
    prompts = np.array([LONG_PROMPT], dtype=object)
    knobs = {"prompts": prompts, "max_new_tokens": np.int32(3), "temperature": 0.0}
    _, (served, short) = run_export_test(
        path, [("serving_default", {"prompts": prompts}), ("generate", knobs)],
        tmp_path,
    )  # fmt: skip
    assert served["generated_text"][0].decode() == expected
    out = kt.generation.generate(model, np.array([row[-keep - 3 :]]), 3)
    expected = spread.tokenizer.detokenize(out[:, keep + 3 :]).numpy()[0].decode()
    assert short["generated_text"][0].decode() == expected
    np.testing.assert_array_equal(short["token_ids"][0, : keep + 6], out[0])


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
    prompts = np.array(PROMPTS, dtype=object)
    knobs = {"prompts": prompts, "max_new_tokens": np.int32(2), "temperature": 0.0}
    # serving_default takes the prompts alone (TF Serving's {"instances":
    # [...]}), with the export's settings: greedy, NEW tokens.
    names, (served, short) = run_export_test(
        path,
        [("serving_default", {"prompts": prompts}), ("generate", knobs)],
        tmp_path,
    )
    assert sorted(names) == ["generate", "serving_default"]
    expected = generator.generate(PROMPTS, max_new_tokens=NEW)
    assert [t.decode() for t in served["generated_text"]] == expected
    expected = generator.generate(PROMPTS, max_new_tokens=2)
    assert [t.decode() for t in short["generated_text"]] == expected


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
        ({"prompts": "ok", "num_return_sequences": 0}, "num_return_sequences"),
        ({"prompts": "ok", "stream": True, "sampler": "beam"}, "stream"),
        ({"prompts": ["ok", "no"], "stream": True}, "prompts"),
        ({"prompts": "ok", "stream": 1}, "stream"),
        ({"prompts": "ok", "stream_chunk_size": 0}, "stream_chunk_size"),
        (
            {
                "prompts": "ok",
                "sampler": "beam",
                "num_beams": 2,
                "num_return_sequences": 3,
            },
            "num_return_sequences",
        ),
        ({"prompts": "ok", "stream": True, "num_return_sequences": 2}, "num_"),
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


class ScriptedLM(kt.models.CausalLM):
    """A causal LM that says `script[i]` at position `i`, whatever it reads:
    known text, token by token, for the streaming and stop-string tests."""

    def __init__(self, script, vocabulary_size, max_sequence_length=64):
        token_ids = keras.Input((None,), dtype="int32")
        super().__init__(token_ids, keras.ops.one_hot(token_ids, vocabulary_size))
        self.script = [int(i) for i in script] + [script[-1]] * max_sequence_length
        self.vocabulary_size = vocabulary_size
        self.max_sequence_length = max_sequence_length

    # Without `prefill`, as a model written before it: generate reads the
    # whole buffer.
    def start_decoding(self, tokens, source, use_cache):
        return tf.zeros(tf.shape(tokens)[:1])

    def next_logits(self, tokens, state, index, use_cache):
        said = tf.gather(tf.constant(self.script, tf.int32), index)
        logits = tf.one_hot(tf.fill(tf.shape(tokens)[:1], said), self.vocabulary_size)
        return 10.0 * logits, state


def scripted(generator, text, prompt="W", **options):
    """A TextGenerator whose model continues `prompt` with `text`."""
    tokenizer = generator.tokenizer
    ids = tokenizer.tokenize([prompt + text]).to_list()[0]
    model = ScriptedLM(ids, tokenizer.vocabulary_size())
    return kt.tasks.TextGenerator(model, tokenizer, **options), ids


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"sampler": "top_k", "top_k": 20, "temperature": 2.0, "seed": 5},
        {"sampler": "temperature", "seed": 11, "repetition_penalty": 1.3},
    ],
)
def test_stream_pieces_join_to_the_generated_text(generator, settings):
    expected = generator.generate(PROMPTS[0], max_new_tokens=NEW, **settings)
    pieces = list(
        generator.generate(
            PROMPTS[0], max_new_tokens=NEW, stream=True, stream_chunk_size=3, **settings
        )
    )
    assert len(pieces) > 1 and all(pieces)
    assert "".join(pieces) == expected
    full = generator.generate(
        PROMPTS[0], max_new_tokens=NEW, stream=True, return_full_text=True, **settings
    )
    assert "".join(full) == PROMPTS[0] + expected
    # The default pieces (16 tokens, growing while fast) join to it too.
    default = generator.generate(PROMPTS[0], max_new_tokens=24, stream=True, **settings)
    assert "".join(default) == generator.generate(
        PROMPTS[0], max_new_tokens=24, **settings
    )


def test_a_piece_never_splits_a_character(generator):
    """é is two byte tokens, 猫 three: each piece is whole characters."""
    text = "café 猫! more"
    task, ids = scripted(generator, text)
    assert len(ids) - 1 > len(text) - 1  # some characters span tokens
    new = len(ids) - 1
    pieces = list(
        task.generate("W", max_new_tokens=new, stream=True, stream_chunk_size=1)
    )
    assert "".join(pieces) == text == task.generate("W", max_new_tokens=new)
    assert not any("\ufffd" in piece for piece in pieces)
    assert "猫" in pieces and "é" in pieces  # each once its last byte is out
    # With a stop string, nothing of it (nor a prefix of it) is streamed.
    pieces = list(
        task.generate(
            "W", max_new_tokens=new, stream=True, stream_chunk_size=1, stop="! m"
        )
    )
    assert "".join(pieces) == "café 猫"
    assert "!" not in "".join(pieces)


def test_stop_strings_end_generation_early(generator):
    text = " the end. More and more text that never ends here"
    task, ids = scripted(generator, text)
    limit = len(ids) - 1
    assert task.generate("W", max_new_tokens=limit) == text
    # " the end" ends inside the token "en" ("Ġ", "en", "d"); ". M" spans
    # "." | "Ġ" | "M".
    for stop, expected in [("e e", " th"), (". M", " the end"), ("nd", " the e")]:
        cut = task.generate("W", max_new_tokens=limit, stop=stop, stream_chunk_size=2)
        assert cut == expected
        assert task._last_decoding.steps < limit // 2
    # A batch runs until every text has a stop string (or its tokens).
    texts = task.generate(["W", "W"], max_new_tokens=limit, stop=["zzz", ". M"])
    assert texts == [" the end", " the end"]
    assert task._last_decoding.steps <= 16


def test_several_end_tokens(generator, tmp_path):
    text = " the end. More"
    ids = generator.tokenizer.tokenize(["W" + text]).to_list()[0]
    dot, m = ids[6], ids[8]  # "W", "Ġ", "the", "Ġ", "en", "d", ".", "Ġ", "M"
    assert generator.tokenizer.id_to_token(dot) == "."
    for end_token, expected in [
        ([".", m], " the end"),
        ([m, "<|endoftext|>", "d"], " the en"),
        (dot, " the end"),
        ("Ġ", ""),
        (["zzz-not-a-token"], None),
        ([dot, 0], None),
        ([], None),
    ]:
        if expected is None:
            with pytest.raises(ValueError, match="end_token"):
                scripted(generator, text, end_token=end_token)
            continue
        task, _ = scripted(generator, text, end_token=end_token)
        assert task.generate("W", max_new_tokens=len(ids) - 1) == expected
        streamed = list(
            task.generate(
                "W", max_new_tokens=len(ids) - 1, stream=True, stream_chunk_size=1
            )
        )
        assert "".join(streamed) == expected
        assert len(streamed) > 1 or len(expected) <= 1  # pieces were joined
    task, _ = scripted(generator, text, end_token=[".", m])
    assert task.end_token == [".", "M"] and task.end_token_id == (dot, m)
    several = kt.tasks.TextGenerator(
        generator.model, generator.tokenizer, end_token=[dot, "<|endoftext|>"]
    )
    path = several.save(tmp_path / "several.keras")
    loaded = kt.tasks.load(path)
    assert loaded.end_token_id == several.end_token_id
    assert loaded.generate(PROMPTS, max_new_tokens=NEW) == several.generate(
        PROMPTS, max_new_tokens=NEW
    )


def test_export_stops_at_any_of_several_end_tokens(generator, tmp_path):
    tokenizer = generator.tokenizer
    prompts = tokenizer.tokenize(PROMPTS).to_list()
    tokens = kt.generation.generate(generator.model, inputs_pad(prompts), NEW)
    # An end token the first prompt's continuation reaches at its 4th token.
    stop = int(tokens[0, len(prompts[0]) + 3])
    several = kt.tasks.TextGenerator(
        generator.model, tokenizer, end_token=["<|endoftext|>", stop]
    )
    expected = several.generate(PROMPTS, max_new_tokens=NEW)
    unstopped = generator.generate(PROMPTS, max_new_tokens=NEW)
    assert len(expected[0]) < len(unstopped[0])
    path = several.export(tmp_path / "served", max_new_tokens=NEW)
    request = {
        "prompts": np.array(PROMPTS, dtype=object),
        "max_new_tokens": np.int32(NEW),
        "temperature": np.float32(0.0),
    }
    _, (out,) = run_export_test(path, [("generate", request)], tmp_path)
    assert [t.decode() for t in out["generated_text"]] == expected
    assert stop in out["token_ids"][0]  # kept in the ids, not in the text


def inputs_pad(rows):
    """Right-padded int32 ids of token lists."""
    width = max(len(row) for row in rows)
    return np.array([row + [0] * (width - len(row)) for row in rows], "int32")


def test_a_sentencepiece_continuation_keeps_its_space():
    # "▁world" begins a word: decoded alone it loses its space. The text is
    # the decoded prompt + new ids with the decoded prompt cut off, as
    # transformers 4's pipeline gave it.
    tokenizer = kt.text.tokenizer_from_pretrained(
        os.path.join(HF, "tokenizers", "llama_sp")
    )
    ids = tokenizer.tokenize(["Hello world, the end"]).to_list()[0]
    prompt = len(tokenizer.tokenize(["Hello"]).to_list()[0])
    assert tokenizer.id_to_token(ids[prompt]).startswith("▁")
    task = kt.tasks.TextGenerator(
        ScriptedLM(ids, tokenizer.vocabulary_size()), tokenizer, end_token=None
    )
    new = len(ids) - prompt
    assert task.generate("Hello", max_new_tokens=new) == " world, the end"
    full = task.generate("Hello", max_new_tokens=new, return_full_text=True)
    assert full == "Hello world, the end"
    pieces = list(
        task.generate("Hello", max_new_tokens=new, stream=True, stream_chunk_size=1)
    )
    assert len(pieces) > 1 and "".join(pieces) == " world, the end"
    assert pieces[0].startswith(" ")


def test_generation_config_json_gives_the_defaults(generator, tmp_path):
    # Qwen2.5-Instruct's settings: generate samples with them unless told
    # otherwise, as transformers' generate and pipeline do.
    settings = {
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.05,
    }
    folder = tmp_path / "folder"
    shutil.copytree(os.path.join(HF, "gpt2_tiny"), folder)
    with open(folder / "generation_config.json", "w") as f:
        json.dump(settings, f)
    task = kt.tasks.from_pretrained(folder)
    assert task.generation_config == settings
    explicit = {k: v for k, v in settings.items() if k != "do_sample"}
    sampled = generator.generate(
        PROMPTS, max_new_tokens=NEW, sampler="top_p", seed=3, **explicit
    )
    assert task.generate(PROMPTS, max_new_tokens=NEW, seed=3) == sampled
    assert sampled != generator.generate(PROMPTS, max_new_tokens=NEW)
    # An explicit argument wins: greedy (with the folder's penalty), or
    # another temperature.
    greedy = generator.generate(PROMPTS, max_new_tokens=NEW, repetition_penalty=1.05)
    assert task.generate(PROMPTS, max_new_tokens=NEW, sampler="greedy") == greedy
    hot = generator.generate(
        PROMPTS, max_new_tokens=NEW, sampler="top_p", seed=3,
        **{**explicit, "temperature": 1.5},
    )  # fmt: skip
    assert task.generate(PROMPTS, max_new_tokens=NEW, seed=3, temperature=1.5) == hot
    # The settings survive a .keras round trip.
    loaded = kt.tasks.load(task.save(tmp_path / "task.keras"))
    assert loaded.generation_config == settings
    with pytest.raises(ValueError, match="generation_config.*min_p"):
        kt.tasks.TextGenerator(
            task.model, task.tokenizer, generation_config={"min_p": 1}
        )


def test_a_stream_whose_text_changes_after_it_was_sent_raises(generator, monkeypatch):
    # A tokenizer whose text so far stops extending what was sent: the
    # stream raises instead of silently sending nothing more.
    task, ids = scripted(generator, " the end. More")
    calls = iter(range(100))

    def shifting(tokenizer, ids, prompts=None):
        return ["ab" if next(calls) == 0 else "xy" for _ in ids]

    monkeypatch.setattr(kt.tasks.text_stream, "texts", shifting)
    stream = task.generate("W", max_new_tokens=4, stream=True, stream_chunk_size=1)
    with pytest.raises(RuntimeError, match="'ab' and then 'xy'"):
        list(stream)


def test_a_byte_fallback_stream_sends_whole_characters():
    # CJK and emoji on a SentencePiece tokenizer are byte-fallback pieces:
    # streamed one token per piece, no piece splits a character and the
    # pieces join to the text.
    tokenizer = kt.text.tokenizer_from_pretrained(
        os.path.join(HF, "tokenizers", "llama_sp")
    )
    text = "Hello 猫 and 🙂 too"
    ids = tokenizer.tokenize([text]).to_list()[0]
    prompt = len(tokenizer.tokenize(["Hello"]).to_list()[0])
    assert sum(tokenizer.id_to_token(i).startswith("<0x") for i in ids) >= 7
    task = kt.tasks.TextGenerator(
        ScriptedLM(ids, tokenizer.vocabulary_size()), tokenizer, end_token=None
    )
    new = len(ids) - prompt
    pieces = list(
        task.generate("Hello", max_new_tokens=new, stream=True, stream_chunk_size=1)
    )
    assert (
        "".join(pieces)
        == " 猫 and 🙂 too"
        == task.generate("Hello", max_new_tokens=new)
    )
    assert not any("\ufffd" in piece for piece in pieces)
    assert "猫" in pieces or " 猫" in pieces  # sent once its last byte is out
    assert len(pieces) > 5


def test_a_generation_request_is_checked_before_tokenizing(generator, monkeypatch):
    from keras_transformer.tasks.generation_request import GenerationRequest

    options = kt.tasks.GenerationOptions(
        max_new_tokens=3, sampler="top_k", sampler_args={"top_k": 5},
        num_return_sequences=2, return_full_text=True, stop="x", seed=7,
    )  # fmt: skip
    request = GenerationRequest.of_texts(
        generator, ["ab", "abc"], options, single=False
    )
    ids = generator.tokenizer.tokenize(tf.constant(["ab", "abc"])).to_list()
    assert [list(row) for row in request.rows] == [ids[0], ids[0], ids[1], ids[1]]
    assert request.prefixes == ["ab", "ab", "abc", "abc"]
    assert request.ends == generator.end_ids() and request.seed == 7
    assert request.decoder.top_k == 5 and list(request.stops) == ["x"]
    # A chat's request: its rendered ids, no text.
    chat = GenerationRequest.of_rows(generator, ids[1], options, ends=(3,))
    assert [list(row) for row in chat.rows] == [ids[1], ids[1]]
    assert chat.single and chat.ends == (3,) and chat.prefixes is None
    # The options are one frozen value, checked when made.
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 8
    with pytest.raises(ValueError, match="stream_chunk_size=0"):
        kt.tasks.GenerationOptions(stream_chunk_size=0)
    # A bad argument is refused before the tokenizer runs.
    monkeypatch.setattr(
        type(generator.tokenizer), "tokenize", lambda *a: pytest.fail("tokenized")
    )
    with pytest.raises(
        ValueError, match="num_return_sequences=2 with sampler='greedy'"
    ):
        GenerationRequest.of_texts(
            generator,
            ["ab"],
            kt.tasks.GenerationOptions(
                max_new_tokens=3, num_return_sequences=2, sampler="greedy"
            ),
            single=True,
        )
