"""`kt.tasks.SpeechRecognizer`: audio in, transformers' text out (the
random Whisper fixture and the espeak-ng WAVs, references made by
tests/fixtures/hf/make_whisper_fixtures.py: greedy, 12 new tokens, a forced
or a detected language, with and without timestamps), every input form,
long audio, what is refused, `.keras` and the WAV-bytes SavedModel."""

import io
import json
import os
import wave

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
AUDIO = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "audio")
FOLDER = os.path.join(HF, "whisper_tiny_random")
CLIPS = [os.path.join(AUDIO, f"speech_{i}.wav") for i in range(3)]


def reference():
    with open(os.path.join(HF, "whisper_tiny_random_reference.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def recognizer():
    return kt.tasks.from_pretrained(FOLDER)


def samples(path):
    with wave.open(path, "rb") as f:
        data = f.readframes(f.getnframes())
    return np.frombuffer(data, "<i2").astype("float32") / 32768


@pytest.mark.parametrize(
    "key, options",
    [
        ("greedy_detect_language", {}),
        ("greedy_detect_language_translate", {"task": "translate"}),
        ("greedy_en_transcribe_timestamps",
         {"language": "en", "return_timestamps": True}),
        ("beam5_en_transcribe", {"language": "en", "num_beams": 5}),
    ],
)  # fmt: skip
def test_texts_equal_transformers(recognizer, key, options):
    assert isinstance(recognizer, kt.tasks.SpeechRecognizer)
    expected = reference()[key]
    results = recognizer.transcribe(CLIPS, max_new_tokens=12, **options)
    if not options.get("return_timestamps"):
        assert results == expected["text"]
        return
    assert [r["text"] for r in results] == expected["text"]
    for result, segments in zip(results, expected["segments"], strict=True):
        # transformers' segments (start, end, tokens), with their text.
        assert [c["timestamp"] for c in result["chunks"]] == [
            (s["start"], s["end"]) for s in segments
        ]
        texts = recognizer.tokenizer.detokenize(
            [[t + 1 for t in s["tokens"]] for s in segments], skip_special_tokens=True
        )
        assert [c["text"] for c in result["chunks"]] == [
            t.decode() for t in texts.numpy()
        ]


def test_the_detected_language_is_transformers(recognizer):
    frames = np.concatenate([recognizer.log_mel(clip) for clip in CLIPS])
    detected = recognizer.detect_language(frames) - 1
    assert detected.tolist() == reference()["detect_language"]["ids"]


def test_every_input_form_gives_the_same_text(recognizer):
    path = CLIPS[0]
    with open(path, "rb") as f:
        data = f.read()
    audio = samples(path)
    flac = os.path.join(AUDIO, "speech_0.flac")
    forms = [path, data, audio, {"array": audio, "sampling_rate": 16000}, flac]
    texts = [recognizer(form, language="en", max_new_tokens=6) for form in forms]
    assert len(set(texts)) == 1 and texts[0]
    # Two channels are averaged: the same speech in both gives the same text.
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        pcm = np.round(audio * 32768).astype("<i2")
        w.writeframes(np.stack([pcm, pcm], axis=1).tobytes())
    assert recognizer(buffer.getvalue(), language="en", max_new_tokens=6) == texts[0]


def test_long_audio_is_cut_into_30_second_windows(recognizer):
    """40 s of audio: two windows, decoded as one batch, tokens joined, as
    the two pieces transcribed one by one."""
    speech = np.concatenate([samples(clip) for clip in CLIPS])
    audio = np.concatenate([np.tile(speech, 4)[:480000], speech[:160000]])
    first, second = audio[:480000], audio[480000:]
    whole = recognizer.transcribe(audio, language="en", max_new_tokens=6)
    pieces = recognizer.transcribe([first, second], language="en", max_new_tokens=6)
    assert whole == "".join(pieces)
    stamped = recognizer.transcribe(
        audio, language="en", max_new_tokens=6, return_timestamps=True
    )
    assert stamped["text"] == "".join(c["text"] for c in stamped["chunks"])
    starts = [chunk["timestamp"][0] for chunk in stamped["chunks"]]
    assert starts == sorted(starts) and max(starts) >= 30.0  # the second window


@pytest.mark.parametrize(
    "audio, options, error, match",
    [
        (np.zeros(0, "float32"), {}, ValueError, "empty"),
        (np.zeros((2, 100), "float32"), {}, ValueError, r"shape \(2, 100\)"),
        (np.array([0.1, np.nan], "float32"), {}, ValueError, "NaN"),
        (np.zeros(100, "int16"), {}, ValueError, "dtype int16"),
        (b"not audio at all", {}, ValueError, "not a WAV or FLAC"),
        (os.path.join(AUDIO, "speech_8k.wav"), {}, ValueError, "8000 Hz"),
        (np.zeros(100, "float32"), {"sampling_rate": 8000}, ValueError,
         "sampling_rate=8000"),
        ("no/such/file.wav", {}, FileNotFoundError, "no/such/file.wav"),
        (np.zeros(100, "float32"), {"language": "xx"}, ValueError, "language='xx'"),
        (np.zeros(100, "float32"), {"task": "summarize"}, ValueError, "task="),
    ],
)  # fmt: skip
def test_bad_audio_is_refused_by_name(recognizer, audio, options, error, match):
    with pytest.raises(error, match=match):
        recognizer.transcribe(audio, **options)


def test_keras_file_and_the_wav_bytes_savedmodel(recognizer, tmp_path):
    """The `.keras` file gives the same logits, model and tokenizer; the
    SavedModel (WAV bytes in, the language detected in the graph) gives
    transformers' texts."""
    expected = reference()["greedy_detect_language"]["text"]
    path = recognizer.save(str(tmp_path / "asr.keras"))
    loaded = kt.tasks.load(path)
    assert isinstance(loaded, kt.tasks.SpeechRecognizer)
    frames = np.concatenate([loaded.log_mel(clip) for clip in CLIPS])
    inputs = {"encoder_features": frames, "decoder_token_ids": np.array([[50259]] * 3)}
    np.testing.assert_array_equal(loaded(inputs), recognizer(inputs))
    assert loaded.model.get_config() == recognizer.model.get_config()
    assert loaded.tokenizer.get_config() == recognizer.tokenizer.get_config()
    exported = recognizer.export(str(tmp_path / "asr"), max_new_tokens=12)
    served = tf.saved_model.load(exported)
    wavs = []
    for clip in CLIPS:
        with open(clip, "rb") as f:
            wavs.append(f.read())
    texts = served.transcribe(tf.constant(wavs))["text"].numpy()
    assert [t.decode() for t in texts] == expected
    with open(os.path.join(AUDIO, "speech_8k.wav"), "rb") as f:
        with pytest.raises(tf.errors.InvalidArgumentError, match="16000 Hz"):
            served.transcribe(tf.constant([f.read()]))
