"""`kt.tasks.SpeechRecognizer`: audio in, transformers' text out (the
random Whisper fixture and the espeak-ng WAVs, references made by
tests/fixtures/hf/make_whisper_fixtures.py: greedy, 12 new tokens, a forced
or a detected language, with and without timestamps), every input form,
two channels, long audio, what is refused, cached decoding, `.keras` and
the WAV-bytes SavedModel (served by TensorFlow alone)."""

import io
import json
import os
import wave

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_export_test

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


def wav_bytes(*channels):
    """A 16 kHz 16-bit PCM WAV file of float channels `(N,)` each."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(len(channels))
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.round(np.stack(channels, 1) * 32768).astype("<i2").tobytes())
    return buffer.getvalue()


def stereo():
    """A file of speech on the left and silence on the right, and its mix
    as transformers' pipeline reads it: ffmpeg (`-ac 1`, float output, as
    its `ffmpeg_read`) gives (left + right) * sqrt(1/2), not their mean
    (measured with ffmpeg 9: equal to the float)."""
    speech = samples(CLIPS[0])
    return wav_bytes(speech, np.zeros_like(speech)), speech * np.float32(0.5**0.5)


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


def test_a_sampler_decodes_under_whispers_rules(recognizer):
    """`sampler` and `seed` as the other tasks take them: top-k 1 is
    greedy, under the same suppression and timestamp rules (transformers'
    segments); a seed repeats a draw."""
    expected = reference()["greedy_en_transcribe_timestamps"]
    options = dict(language="en", return_timestamps=True, max_new_tokens=12)
    results = recognizer.transcribe(CLIPS, sampler="top_k", top_k=1, seed=5, **options)
    assert [r["text"] for r in results] == expected["text"]
    drawn = [
        recognizer.transcribe(
            CLIPS[0], sampler="temperature", temperature=4.0, seed=9, **options
        )
        for _ in range(2)
    ]
    assert drawn[0] == drawn[1] and drawn[0]["text"] != expected["text"][0]


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


def test_two_channels_are_mixed_as_transformers_pipeline_mixes_them(recognizer):
    data, mix = stereo()
    frames = recognizer.log_mel(data)
    np.testing.assert_array_equal(frames, recognizer.log_mel(mix))
    speech = samples(CLIPS[0])
    others = [speech, speech / 2]  # the left channel alone; the mean
    for other in others:
        assert np.abs(recognizer.log_mel(other) - frames).max() > 0.05
    text = recognizer.transcribe(data, max_new_tokens=12)
    assert text == recognizer.transcribe(mix, max_new_tokens=12)
    assert text not in recognizer.transcribe(others, max_new_tokens=12)
    with pytest.raises(ValueError, match="Received: 3 channels"):
        recognizer.transcribe(wav_bytes(speech, speech, speech))


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
        (np.zeros(100, "float32"), {"sampler": "beam"}, ValueError,
         "sampler='beam'"),
        (np.zeros(100, "float32"), {"sampler": "top_k", "num_beams": 2},
         ValueError, "num_beams=2"),
        (np.zeros(100, "float32"), {"sampler": "top_k", "top_k": 0},
         ValueError, "top_k=0"),
        (np.zeros(100, "float32"), {"temperature": 0.5}, ValueError,
         "sampler=None"),
    ],
)  # fmt: skip
def test_bad_audio_is_refused_by_name(recognizer, audio, options, error, match):
    with pytest.raises(error, match=match):
        recognizer.transcribe(audio, **options)


def test_cached_decoding_equals_uncached(recognizer):
    """The self- and cross-attention caches give the logits of the whole
    prefix recomputed, step by step, and the same tokens."""
    model = recognizer.model
    frames = np.concatenate([recognizer.log_mel(clip) for clip in CLIPS[:2]])
    english = recognizer.tokenizer.token_to_id("<|en|>")
    prompt = np.array([recognizer.prompt_ids(english)] * 2)
    inputs = {"encoder_features": frames, "decoder_token_ids": prompt}
    tokens = kt.generation.generate(model, inputs, max_new_tokens=6)
    uncached = kt.generation.generate(model, inputs, 6, use_cache=False)
    np.testing.assert_array_equal(tokens, uncached)
    assert len(np.unique(tokens[:, prompt.shape[1] :])) > 2  # not one token
    source = model.pad_source(frames, 0)
    cached_state = model.start_decoding(
        tokens, source, use_cache=True, prefill=len(prompt[0])
    )
    state = model.start_decoding(tokens, source, use_cache=False)
    for index in range(prompt.shape[1], tokens.shape[1]):
        cached, cached_state = model.next_logits(tokens, cached_state, index, True)
        logits, state = model.next_logits(tokens, state, index, False)
        # Two orders of float32 sums: this fixture's sharp attention moves
        # them by up to 3.9e-4 (transformers' own float32 against float64,
        # tests/pretrained/test_whisper.py's LOGITS_ATOL); 2.2e-4 measured.
        np.testing.assert_allclose(cached, logits, rtol=0, atol=5e-4)
        np.testing.assert_array_equal(np.argmax(logits, -1), tokens[:, index])


def test_keras_file_and_the_wav_bytes_savedmodel(recognizer, tmp_path):
    """The `.keras` file gives the same logits, model and tokenizer; the
    SavedModel (WAV bytes in, the language detected in the graph), served
    by TensorFlow alone, gives transformers' texts, and a stereo file's
    text is the task's for the same file."""
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
    wavs = []
    for clip in CLIPS:
        with open(clip, "rb") as f:
            wavs.append(f.read())
    data, mix = stereo()
    left = recognizer.transcribe(samples(CLIPS[0]), max_new_tokens=12)
    mixed = recognizer.transcribe(mix, max_new_tokens=12)
    assert mixed != left  # the left channel alone would give another text
    requests = [("transcribe", {"audio": [*wavs, data]})]
    _, (served,) = run_export_test(exported, requests, tmp_path)
    assert [t.decode() for t in served["text"]] == [*expected, mixed]
    with open(os.path.join(AUDIO, "speech_8k.wav"), "rb") as f:
        eight_khz = f.read()
    speech = samples(CLIPS[0])
    for audio, match in [
        (eight_khz, "sampled at 16000 Hz"),
        (wav_bytes(speech, speech, speech), "one or two channels"),
    ]:
        with pytest.raises(AssertionError, match=match):  # the server's error
            run_export_test(exported, [("transcribe", {"audio": [audio]})], tmp_path)
