"""Audio inputs of `kt.tasks.SpeechRecognizer`: a file path, the bytes of a
file, a float array (with its sampling rate) or a dict of those, read into
mono float32 samples at the model's rate, every input checked before any
work is done.

WAV files (integer PCM) are read with the standard library; FLAC and
other formats with `soundfile` (the `audio` extra:
`pip install "keras-transformer[audio]"`), when it is installed.
Two channels are mixed to one as transformers' pipeline mixes a file
(ffmpeg's `-ac 1` with float output): `(left + right) / sqrt(2)`, not
their mean. A file of more channels is refused: ffmpeg's weights for those
depend on the layout it guesses (of a three-channel WAV it drops the
third). Audio at another rate is refused: resample it first.
"""

import io
import os
import wave

import numpy as np

RATE = 16000  # Whisper's sampling rate
MAGIC = {b"RIFF": "WAV", b"fLaC": "FLAC", b"OggS": "Ogg", b"ID3": "MP3"}
STEREO_WEIGHT = np.float32(np.sqrt(0.5))  # ffmpeg's weight of each channel


def is_single(audio):
    """Whether `audio` is one input (not a list of inputs)."""
    if isinstance(audio, list | tuple):
        return not audio or not isinstance(
            audio[0], str | bytes | os.PathLike | np.ndarray | dict | list | tuple
        )
    return True


def read(audio, sampling_rate=None, name="audio", rate=RATE):
    """Mono float32 samples `(N,)` at `rate` of one input (see the module
    docstring), or a ValueError (FileNotFoundError for a missing file)
    naming `name` and the value received."""
    if isinstance(audio, dict):
        keys = {"array", "raw"} & set(audio)
        if len(keys) != 1 or "sampling_rate" not in audio:
            raise ValueError(
                f"`{name}` as a dict must hold 'array' (or 'raw') and "
                f"'sampling_rate'. Received: keys {sorted(audio)}"
            )
        return read(audio[keys.pop()], audio["sampling_rate"], name, rate)
    if isinstance(audio, str | os.PathLike):
        path = os.fspath(audio)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"`{name}` is not a file. Received: {name}={path!r}"
            )
        with open(path, "rb") as f:
            data = f.read()
        return _decode(data, f"{name}={path!r}", sampling_rate, rate)
    if isinstance(audio, bytes | bytearray):
        return _decode(bytes(audio), f"{name} (bytes)", sampling_rate, rate)
    samples = np.asarray(audio)
    _check_rate(name, sampling_rate if sampling_rate is not None else rate, rate)
    if samples.ndim != 1 or not np.issubdtype(samples.dtype, np.floating):
        raise ValueError(
            f"`{name}` must be one channel of float samples, shape (samples,). "
            f"Received: dtype {samples.dtype}, shape {samples.shape}"
        )
    return _check_samples(name, samples.astype("float32"))


def _check_rate(name, sampling_rate, rate):
    if sampling_rate != rate:
        raise ValueError(
            f"`{name}` must be sampled at {rate} Hz (resample it first). "
            f"Received: sampling_rate={sampling_rate!r}"
        )


def _check_samples(name, samples):
    if samples.size == 0:
        raise ValueError(f"`{name}` is empty. Received: 0 samples")
    if not np.isfinite(samples).all():
        bad = int(np.flatnonzero(~np.isfinite(samples))[0])
        raise ValueError(
            f"`{name}` holds NaN or infinite samples. Received: "
            f"{samples[bad]} at sample {bad}"
        )
    return samples


def _decode(data, described, sampling_rate, rate):
    kind = next((k for m, k in MAGIC.items() if data.startswith(m)), None)
    if kind == "WAV" and data[8:12] == b"WAVE":
        try:
            with wave.open(io.BytesIO(data), "rb") as w:
                width, channels = w.getsampwidth(), w.getnchannels()
                file_rate = w.getframerate()
                frames = w.readframes(w.getnframes())
        except (wave.Error, EOFError):  # float WAV and other encodings
            samples, file_rate = _soundfile(data, described, "this WAV encoding")
        else:
            samples = _pcm(frames, width).reshape(-1, channels)
    elif kind is not None:
        samples, file_rate = _soundfile(data, described, kind)
    else:
        raise ValueError(
            f"`{described}` is not a WAV or FLAC file (supported: WAV, and FLAC "
            "or other formats with the `audio` extra). Received: first bytes "
            f"{data[:8]!r}"
        )
    if sampling_rate is not None and sampling_rate != file_rate:
        raise ValueError(
            f"`sampling_rate` ({sampling_rate!r}) disagrees with the file's "
            f"({file_rate}) for {described}. "
            f"Received: sampling_rate={sampling_rate!r}"
        )
    name = described.split("=")[0].split(" ")[0]
    if file_rate != rate:
        raise ValueError(
            f"`{described}` must be sampled at {rate} Hz (resample it first). "
            f"Received: a file at {file_rate} Hz"
        )
    return _check_samples(name, _mono(samples, described))


def _mono(samples, described):
    """`(N, channels)` float32 samples of a file -> `(N,)`, mixed as
    transformers' pipeline mixes them (see the module docstring)."""
    channels = samples.shape[1]
    if channels > 2:
        raise ValueError(
            f"`{described}` must have one or two channels (mix more to one "
            f"first). Received: {channels} channels"
        )
    if channels == 1:
        return samples[:, 0]
    return samples[:, 0] * STEREO_WEIGHT + samples[:, 1] * STEREO_WEIGHT


def _pcm(frames, width):
    """Integer PCM frames -> float32 samples in [-1, 1), channels
    interleaved."""
    if width == 1:  # unsigned 8-bit
        values = (np.frombuffer(frames, "u1").astype("float32") - 128) / 128
    elif width == 3:  # 24-bit little-endian
        raw = np.frombuffer(frames, "u1").reshape(-1, 3).astype("int32")
        values = (raw[:, 0] << 8 | raw[:, 1] << 16 | raw[:, 2] << 24) / 2.0**31
    else:
        values = np.frombuffer(frames, f"<i{width}").astype("float64")
        values = values / 2.0 ** (8 * width - 1)
    return np.asarray(values, "float32")


def _soundfile(data, described, kind):
    try:
        import soundfile
    except ImportError:
        raise ValueError(
            f"Reading {kind} audio needs the `audio` extra (soundfile): "
            f'pip install "keras-transformer[audio]". Received: {described}'
        ) from None
    try:
        samples, file_rate = soundfile.read(io.BytesIO(data), dtype="float32")
    except Exception as error:  # soundfile raises its own LibsndfileError
        raise ValueError(
            f"`{described}` could not be read as audio: {error}. Received: {described}"
        ) from None
    return np.asarray(samples, "float32").reshape(len(samples), -1), int(file_rate)
