"""Whisper decoding against transformers past the first new tokens
(references: tests/fixtures/hf/make_decoding_references.py, from the random
folder as transformers reloads it): generation that stops at the end token,
the later timestamp rules (a pair, text after it, never going back) in one
pass, greedy and with 2 and 3 beams, a timestamp written under
`<|notimestamps|>`, and audio longer than 30 s against the pipeline's
30 s chunks."""

import json
import os

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.pretrained import whisper_plan as plan

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
AUDIO = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "audio")
FOLDER = os.path.join(HF, "whisper_tiny_random")
PROMPT = [50258, 50259, 50359]  # transformers' ids: start, <|en|>, transcribe
_TASK = []


def reference():
    path = os.path.join(HF, "whisper_tiny_random_decoding.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def recognizer():
    if not _TASK:
        _TASK.append(kt.tasks.from_pretrained(FOLDER))
    return _TASK[0]


def noise():
    """The maker's 2 s of noise."""
    return (0.1 * np.random.default_rng(0).normal(size=32000)).astype(np.float32)


def long_audio():
    """The maker's 40 s: the three clips tiled to 30 s, then 10 s of them."""
    clips = [os.path.join(AUDIO, f"speech_{i}.wav") for i in range(3)]
    speech = np.concatenate([kt.tasks.audio.read(c) for c in clips])
    return np.concatenate([np.tile(speech, 4)[:480000], speech[:160000]])


def decode(frames, prompt, timestamps, max_new_tokens, num_beams=1, **options):
    """`generate` as `transcribe` calls it; transformers' ids of the new
    tokens (ours less one)."""
    task = recognizer()
    settings = plan.generate_options(
        task.model, task.tokenizer, len(prompt), timestamps, max_new_tokens, num_beams
    )
    settings.update(options)
    tokens = kt.generation.generate(
        task.model,
        {
            "encoder_features": frames,
            "decoder_token_ids": np.array([prompt] * len(frames)) + 1,
        },
        **settings,
    )
    return np.asarray(tokens)[:, len(prompt) :] - 1


def test_generation_stops_at_the_end_token_as_transformers():
    """With the end token one the random model writes (it never writes
    `<|endoftext|>`), clip 0 ends at its fifth new token and the others run
    to 12: transformers' ids, the end token kept, then padding."""
    case = reference()["end_token"]
    stored = np.load(os.path.join(AUDIO, "whisper_features.npz"))
    frames = np.stack([stored[f"speech_{i}"].T for i in range(3)])
    end = case["kwargs"]["eos_token_id"]
    ours = decode(frames, PROMPT + [50363], False, 12, end_token_id=end + 1)
    for row, expected in zip(ours.tolist(), case["dict_sequences"], strict=True):
        expected = expected[4:]
        if end in expected:
            stop = expected.index(end) + 1
            assert row[:stop] == expected[:stop] and stop < 12
            assert set(row[stop:]) == {-1}  # our padding (id 0)
        else:
            assert row == expected


@pytest.mark.parametrize("beams", [1, 2, 3])
def test_timestamps_in_one_pass_equal_transformers(beams):
    """`return_timestamps=True` on 2 s of noise, 40 new tokens: greedy
    reaches a pair of timestamps (51495, 51712) and text after it, beam
    search keeps the rules in every beam; transformers' ids of one pass
    (`force_unique_generate_call=True`)."""
    case = reference()["timestamps"][f"beams_{beams}"]
    frames = recognizer().log_mel(noise())
    ours = decode(frames, PROMPT, True, 40, beams)
    assert ours.tolist() == [row[3:] for row in case["ids"]]


def test_transcribe_with_timestamps_is_one_pass_per_window():
    """transformers' `generate` decodes again from the last pair's time
    (22.62 s) when a window ends inside a segment; `transcribe` keeps the
    window's one pass: its segments are the pass's, the text all of it."""
    case = reference()["timestamps"]["beams_1"]
    one = case["ids"][0][3:]
    assert case["segments_default"][0][: one.index(51712) + 1] == one[:16]
    assert case["segments_default"][0] != one  # transformers decodes again
    task = recognizer()
    result = task.transcribe(
        noise(), language="en", return_timestamps=True, max_new_tokens=40
    )
    ids = [t + 1 for t in one]
    expected = task.tokenizer.detokenize([ids], skip_special_tokens=True)
    assert result["text"] == expected.numpy()[0].decode()
    segments = task.tokenizer.segments(ids)
    assert [c["timestamp"] for c in result["chunks"]] == [
        (s["start"], s["end"]) for s in segments
    ]
    # One segment, 0.64 s to the pair's 22.62 s; the text after the pair
    # (no segment's) is in the text, as in transformers' one pass.
    assert [c["timestamp"] for c in result["chunks"]] == [(0.64, 22.62)]


def test_a_timestamp_under_notimestamps_stays_in_the_pass():
    """On 1 s of silence the model writes a timestamp (51657) under
    `<|notimestamps|>`, with no pair after it: transformers keeps the pass,
    and so do we; the text drops the timestamp."""
    case = reference()["notimestamps_stamp"]
    silence = np.zeros(16000, "float32")
    frames = recognizer().log_mel(silence)
    assert decode(frames, PROMPT + [50363], False, 40).tolist() == case["ids"]
    text = recognizer().transcribe(silence, language="en", max_new_tokens=40)
    assert text == case["text"][0]


def test_long_audio_text_equals_the_pipeline_in_30_second_chunks():
    """40 s: the pipeline with `chunk_length_s=30, stride_length_s=0` cuts
    our windows (each padded with silence) and joins their texts."""
    case = reference()["long_pipeline"]
    audio = long_audio()
    text = recognizer().transcribe(audio, language="en", max_new_tokens=8)
    assert text == case["text"]["text"] == "".join(case["chunk_ids"]["text"])
    # With timestamps the text is the pipeline's too; the chunks are
    # generate's segments per window (docs/whisper.md: Long audio).
    stamped = recognizer().transcribe(
        audio, language="en", max_new_tokens=8, return_timestamps=True
    )
    assert stamped["text"] == case["timestamps"]["text"]
    assert [c["timestamp"] for c in stamped["chunks"]] == [(0.0, 0.64), (30.0, 30.34)]
    assert [c["timestamp"] for c in case["timestamps"]["chunks"]] == [
        [0.64, 30.34],
        [None, None],
    ]
