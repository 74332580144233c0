"""Whisper's log-mel front end equals transformers' `WhisperFeatureExtractor`
(its torch path, float32) within 1e-4 on real speech: espeak-ng sentences
at 16 kHz, committed with transformers' features by
tests/fixtures/audio/make_whisper_fixtures.py. Our Slaney filters equal
its `mel_filters`. Audio past 30 s: against the extractor itself, run
here (transformers and torch are test dependencies)."""

import json
import os
import wave

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.layers.log_mel import slaney_mel_filters
from tests.helpers import reference_import

AUDIO = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "audio")
# Measured 3.5e-5 at most (the largest near each clip's max - 8 floor, where
# float32 STFT rounding is a large part of a tiny power).
ATOL = 1e-4


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(os.path.join(AUDIO, "whisper_features.npz")))


def read_wav(name):
    with wave.open(os.path.join(AUDIO, name)) as f:
        assert (f.getframerate(), f.getnchannels(), f.getsampwidth()) == (16000, 1, 2)
        samples = np.frombuffer(f.readframes(f.getnframes()), "<i2")
    return samples.astype("float32") / 32768.0


@pytest.mark.parametrize("bins", [80, 128])
def test_slaney_filters_equal_transformers(reference, bins):
    np.testing.assert_allclose(
        slaney_mel_filters(bins, 400, 16000),
        reference[f"mel_filters_{bins}"],
        atol=1e-7,
    )


def test_features_of_speech_equal_transformers(reference):
    with open(os.path.join(AUDIO, "whisper_reference.json"), encoding="utf-8") as f:
        files = json.load(f)
    assert len(files["clips"]) == 3
    clips = [read_wav(f"speech_{i}.wav") for i in range(3)]
    for i, clip in enumerate(clips):
        np.testing.assert_array_equal(clip, reference[f"audio_{i}"])
    front = kt.layers.LogMelSpectrogram()
    batch = np.zeros((3, max(map(len, clips))), "float32")  # zero-padded: the same
    for row, clip in zip(batch, clips, strict=True):
        row[: len(clip)] = clip
    features = np.asarray(front(batch))  # (3, 3000, 80)
    for i in range(3):
        np.testing.assert_allclose(features[i].T, reference[f"speech_{i}"], atol=ATOL)
    one = np.asarray(front(clips[1]))  # one clip, unbatched
    np.testing.assert_allclose(one, features[1], atol=1e-6)
    edges = {"silence": np.zeros(8000, "float32"), "short": clips[0][:1000]}
    for name, clip in edges.items():
        np.testing.assert_allclose(
            np.asarray(front(clip)).T, reference[name], atol=ATOL, err_msg=name
        )
    large = kt.layers.LogMelSpectrogram(num_mel_bins=128)  # Whisper large-v3's
    np.testing.assert_allclose(
        np.asarray(large(clips[0])).T, reference["speech_0_128"], atol=ATOL
    )


def test_audio_past_30_seconds_is_cut_as_transformers_cuts_it():
    transformers = reference_import("transformers")
    # 33 s of speech (the clips over and over), the last 3 s four times
    # louder: features of the whole would clamp at another floor (max - 8)
    # and the last frames would see samples past the cut (0.58 apart).
    # Measured 4.4e-5, within the file's ATOL.
    audio = np.resize(
        np.concatenate([read_wav(f"speech_{i}.wav") for i in range(3)]), 16000 * 33
    )
    audio[16000 * 30 :] *= 4
    extractor = transformers.WhisperFeatureExtractor()  # its torch path
    (expected,) = extractor(audio, sampling_rate=16000, return_tensors="np")[
        "input_features"
    ]
    features = np.asarray(kt.layers.LogMelSpectrogram()(audio))  # (3000, 80)
    np.testing.assert_allclose(features.T, expected, atol=ATOL)


@pytest.mark.parametrize(
    "arguments, name",
    [
        (dict(num_mel_bins=0), "num_mel_bins"),
        (dict(hop_length=1.5), "hop_length"),
        (dict(num_samples=100), "num_samples"),
    ],
)
def test_bad_arguments_are_refused(arguments, name):
    with pytest.raises(ValueError, match=name):
        kt.layers.LogMelSpectrogram(**arguments)
