"""Whisper's front end: audio samples to a normalized log-mel spectrogram,
in the graph.

Shape legend: B batch, N samples, T frames, M mel bins, F frequency bins
(`frame_length // 2 + 1`).
"""

import math

import keras
import numpy as np
from keras import ops

from keras_transformer import _validation as validation


def _hertz_to_mel(hertz):
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), then
    logarithmic (27 mels per factor 6.4)."""
    hertz = np.asarray(hertz, "float64")
    linear = hertz * 3.0 / 200.0
    log = 15.0 + np.log(np.maximum(hertz, 1e-10) / 1000.0) * 27.0 / math.log(6.4)
    return np.where(hertz >= 1000.0, log, linear)


def _mel_to_hertz(mels):
    mels = np.asarray(mels, "float64")
    linear = mels * 200.0 / 3.0
    log = 1000.0 * np.exp((mels - 15.0) * math.log(6.4) / 27.0)
    return np.where(mels >= 15.0, log, linear)


def slaney_mel_filters(num_mel_bins, frame_length, sampling_rate):
    """The `(F, M)` float32 matrix of triangular mel filters on Slaney's
    scale, each divided by its width in Hz over two (Slaney's area
    normalization), from 0 Hz to half the sampling rate: what librosa's
    `filters.mel(norm="slaney")` and transformers'
    `mel_filter_bank(norm="slaney", mel_scale="slaney")` give, and what
    Whisper was trained with. (`tf.signal.linear_to_mel_weight_matrix` is
    the HTK scale, unnormalized.)"""
    frequencies = np.linspace(0.0, sampling_rate / 2.0, frame_length // 2 + 1)
    edges = _mel_to_hertz(
        np.linspace(
            _hertz_to_mel(0.0), _hertz_to_mel(sampling_rate / 2.0), num_mel_bins + 2
        )
    )  # (M + 2,): each filter rises from edges[m] to edges[m + 1], falls to m + 2
    widths = np.diff(edges)  # (M + 1,)
    offsets = edges[None, :] - frequencies[:, None]  # (F, M + 2)
    rising = -offsets[:, :-2] / widths[:-1]
    falling = offsets[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))  # (F, M)
    filters *= 2.0 / (edges[2:] - edges[:-2])  # equal area
    return filters.astype("float32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class LogMelSpectrogram(keras.layers.Layer):
    """Whisper's log-mel features of 16 kHz audio, as `WhisperFeatureExtractor`
    computes them, in the graph.

    Each clip is cut or zero-padded to `num_samples` (30 s), then: a
    short-time Fourier transform of `frame_length`-sample frames every
    `hop_length` samples (a periodic Hann window, the signal centred by
    reflecting `frame_length // 2` samples at each end), the power of each
    frequency, the last frame dropped (3,000 frames), Slaney-scale mel
    filters (`slaney_mel_filters`), `log10(max(x, 1e-10))`, each clip's
    values clamped to at least its maximum minus 8, and `(x + 4) / 4`.

    Args:
        num_mel_bins: mel bins M (80; Whisper large-v3: 128).
        sampling_rate: the audio's sampling rate in Hz.
        frame_length: samples per frame, also the FFT length (`n_fft`).
        hop_length: samples between frames.
        num_samples: the clip length every input is cut or padded to
            (`chunk_length` seconds times the rate).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        audio: float `(B, N)` samples in [-1, 1], or `(N,)` for one clip.

    Returns:
        float32 `(B, T, M)` features, frames first (what a Keras `Conv1D`
        reads; transformers' `input_features` are `(B, M, T)`).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> front = kt.layers.LogMelSpectrogram()
        >>> tone = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
        >>> tuple(front(tone[None].astype("float32")).shape)
        (1, 3000, 80)

    References:
        Radford et al., "Robust Speech Recognition via Large-Scale Weak
        Supervision", 2022. Slaney, "Auditory Toolbox", 1998.
    """

    def __init__(
        self,
        num_mel_bins=80,
        sampling_rate=16000,
        frame_length=400,
        hop_length=160,
        num_samples=480000,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in [
            ("num_mel_bins", num_mel_bins),
            ("sampling_rate", sampling_rate),
            ("frame_length", frame_length),
            ("hop_length", hop_length),
            ("num_samples", num_samples),
        ]:
            validation.check_positive_int(name, value)
        if num_samples <= frame_length // 2:
            raise ValueError(
                "`num_samples` must exceed half a frame (the centring pad "
                f"reflects that many). Received: num_samples={num_samples}, "
                f"frame_length={frame_length}"
            )
        self.num_mel_bins = num_mel_bins
        self.sampling_rate = sampling_rate
        self.frame_length = frame_length
        self.hop_length = hop_length
        self.num_samples = num_samples
        self._filters = slaney_mel_filters(num_mel_bins, frame_length, sampling_rate)

    @property
    def num_frames(self):
        """Frames T of every output: `num_samples // hop_length`."""
        return self.num_samples // self.hop_length

    def call(self, audio):
        audio = ops.cast(audio, "float32")
        single = len(audio.shape) == 1
        if single:
            audio = audio[None]
        audio = audio[:, : self.num_samples]
        audio = ops.pad(audio, [[0, 0], [0, self.num_samples - ops.shape(audio)[1]]])
        audio = ops.reshape(audio, (-1, self.num_samples))
        real, imaginary = ops.stft(
            audio,
            sequence_length=self.frame_length,
            sequence_stride=self.hop_length,
            fft_length=self.frame_length,
            window="hann",
            center=True,
        )  # (B, T + 1, F) each
        power = ops.square(real) + ops.square(imaginary)
        power = power[:, : self.num_frames]  # the last frame dropped
        mel = ops.matmul(power, ops.convert_to_tensor(self._filters))  # (B, T, M)
        log = ops.log(ops.maximum(mel, 1e-10)) / math.log(10.0)
        floor = ops.max(log, axis=(1, 2), keepdims=True) - 8.0
        features = (ops.maximum(log, floor) + 4.0) / 4.0
        return features[0] if single else features

    def compute_output_shape(self, audio_shape):
        shape = (self.num_frames, self.num_mel_bins)
        return shape if len(audio_shape) == 1 else (audio_shape[0], *shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_mel_bins": self.num_mel_bins,
                "sampling_rate": self.sampling_rate,
                "frame_length": self.frame_length,
                "hop_length": self.hop_length,
                "num_samples": self.num_samples,
            }
        )
        return config
