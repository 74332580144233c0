"""kt.tasks.FillMask: transformers' fill-mask pipeline on the tiny masked-LM
fixture, the hand-wired model call, and round trips."""

import json
import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_export_test, to_numpy

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")
with open(os.path.join(HF, "bert_tiny_mlm_fill_mask.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)


@pytest.fixture(scope="module")
def fill():
    return kt.tasks.from_pretrained(os.path.join(HF, "bert_tiny_mlm"))


def test_predict_gives_transformers_fill_mask_answers(fill):
    assert type(fill) is kt.tasks.FillMask
    # One batch of texts with one and two masks, at the start and in a word.
    answers = fill.predict(REFERENCE["texts"], top_k=REFERENCE["top_k"])
    for text, ours, theirs in zip(
        REFERENCE["texts"], answers, REFERENCE["answers"], strict=True
    ):
        if len(theirs) == 1:  # one mask: the list of candidates itself
            ours = [ours]
        assert len(ours) == len(theirs), text
        for our_mask, their_mask in zip(ours, theirs, strict=True):
            assert [c["token_id"] for c in our_mask] == [
                c["token"] for c in their_mask
            ], text
            assert [c["token"] for c in our_mask] == [
                c["token_str"] for c in their_mask
            ], text
            np.testing.assert_allclose(
                [c["score"] for c in our_mask],
                [c["score"] for c in their_mask],
                atol=1e-5,
            )
    # Not a uniform guess: the first candidates are clearly preferred.
    assert answers[0][0]["score"] > 2 * answers[0][-1]["score"]


def hand_wired(fill, pieces, top_k):
    """Ids `[CLS] piece [MASK] piece ... [SEP]` built by hand, the model's
    softmax at the masks, and the `top_k` ids and probabilities."""
    tokenizer = fill.tokenizer
    ids = [2]
    for piece in pieces[:-1]:
        ids += tokenizer(piece).numpy().tolist() + [4]
    ids += tokenizer(pieces[-1]).numpy().tolist() + [3]
    positions = [i for i, token in enumerate(ids) if token == 4]
    inputs = {
        "token_ids": np.array([ids]),
        "segment_ids": np.zeros((1, len(ids)), "int32"),
        "padding_mask": np.ones((1, len(ids)), bool),
        "mask_positions": np.array([positions]),
    }
    logits = to_numpy(fill.model(inputs))[0]  # (P, V)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    best = np.argsort(-probabilities, axis=-1)[:, :top_k]
    return ids, positions, best, np.take_along_axis(probabilities, best, -1)


def test_predict_is_the_hand_wired_model_call(fill):
    cases = [
        ["the quick", " fox jumps!"],
        ["", " world , hello"],
        ["A dog", " over", "."],
        ["lazy dogs jumped", ""],
    ]
    texts = ["[MASK]".join(pieces) for pieces in cases]
    # Batches of 3: the second holds one text, cut to its own length.
    answers = fill.predict(texts, top_k=4, batch_size=3)
    tokenizer = fill.tokenizer
    for pieces, text, answer in zip(cases, texts, answers, strict=True):
        ids, positions, best, scores = hand_wired(fill, pieces, 4)
        masks = answer if len(positions) > 1 else [answer]
        for mask, position, mask_best, mask_scores in zip(
            masks, positions, best, scores, strict=True
        ):
            assert [c["token_id"] for c in mask] == mask_best.tolist(), text
            np.testing.assert_allclose(
                [c["score"] for c in mask], mask_scores, atol=1e-6
            )
            for candidate in mask:
                filled = list(ids)
                filled[position] = candidate["token_id"]
                sequence = tokenizer.detokenize(filled[1:-1]).numpy().decode()
                assert candidate["sequence"] == sequence
                assert candidate["token"] == tokenizer.id_to_token(
                    candidate["token_id"]
                )
    assert "[MASK]" in answers[2][0][0]["sequence"]  # the other mask stays
    single = fill.predict(texts[0], top_k=4)  # alone, cut to its own length
    for ours, batched in zip(single, answers[0], strict=True):
        assert ours == {**batched, "score": ours["score"]}
        np.testing.assert_allclose(ours["score"], batched["score"], atol=1e-6)


def test_save_and_load_give_identical_answers(fill, tmp_path):
    path = fill.save(tmp_path / "fill.keras")
    answers = fill.predict(REFERENCE["texts"])
    for restored in (kt.tasks.load(path), keras.saving.load_model(path)):
        assert type(restored) is kt.tasks.FillMask
        assert restored.predict(REFERENCE["texts"]) == answers


def test_export_served_without_the_library_gives_predict(fill, tmp_path):
    """The transformers fixture's texts: one answer list per text, its first
    mask's for the text with two."""
    path = fill.export(tmp_path / "fill", top_k=REFERENCE["top_k"])
    texts = REFERENCE["texts"]
    _, (served,) = run_export_test(path, [("fill_mask", {"text": texts})], tmp_path)
    answers = fill.predict(texts, top_k=REFERENCE["top_k"])
    for row, answer in enumerate(answers):
        first = answer[0] if isinstance(answer[0], list) else answer
        assert served["token_id"][row].tolist() == [c["token_id"] for c in first]
        np.testing.assert_allclose(
            served["score"][row], [c["score"] for c in first], atol=1e-6
        )
        for key in ("token", "sequence"):
            assert [s.decode() for s in served[key][row]] == [c[key] for c in first]
    assert served["error"].tolist() == [b""] * len(texts)


def test_bad_input_is_refused_before_any_work(fill):
    predict = fill.predict
    for texts, top_k, message in [
        ([], 5, r"`texts` must not be empty. Received: texts=\[\]"),
        (["the [MASK]", None], 5, r"texts\[1\]=None"),
        (["the [MASK]", "no mask"], 5, r"\[MASK\]. Received: texts\[1\]='no mask'"),
        ("the [mask]", 5, r"texts\[0\]='the \[mask\]'"),
        ("the [MASK]", 0, "top_k=0"),
        ("the [MASK]", 24, "top_k=24"),
        ("the [MASK]", 2.0, "top_k=2.0"),
    ]:
        with pytest.raises(ValueError, match=message):
            predict(texts, top_k=top_k)
    # The mask past the model's 16 positions: 15 words, then [MASK].
    late = "the " * 15 + "[MASK]"
    with pytest.raises(ValueError, match=r"max_sequence_length \(16.*texts\[1\]"):
        predict(["the [MASK]", late])
    with pytest.raises(ValueError, match="FillMask.*BERTMaskedLM.*'bert'"):
        kt.tasks.FillMask(fill.model.backbone, fill.tokenizer)
    vocabulary = fill.tokenizer.get_vocabulary()
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        no_mask = [t if t != "[MASK]" else "mask" for t in vocabulary]
        kt.tasks.FillMask(fill.model, kt.text.WordPieceTokenizer(no_mask))
    with pytest.raises(ValueError, match="eos_token='\\[SEP\\]'"):
        tokenizer = kt.text.WordPieceTokenizer(vocabulary, eos_token="[SEP]")
        kt.tasks.FillMask(fill.model, tokenizer)
