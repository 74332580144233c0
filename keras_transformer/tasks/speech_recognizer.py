"""`SpeechRecognizer`: a Whisper model and its tokenizer, audio in, text
out, as transformers' `automatic-speech-recognition` pipeline."""

import keras
import numpy as np

from keras_transformer.export import speech_recognizer as exporter
from keras_transformer.generation import generate
from keras_transformer.layers import LogMelSpectrogram
from keras_transformer.models.whisper import Whisper
from keras_transformer.tasks import audio as audio_inputs
from keras_transformer.tasks.base import Task
from keras_transformer.text.whisper_tokenizer import TASKS, WhisperTokenizer

WINDOW = 480000  # samples of 30 s at 16 kHz: what Whisper reads at once
HOP = 160  # samples per log-mel frame


@keras.saving.register_keras_serializable(package="keras_transformer")
class SpeechRecognizer(Task):
    """Speech to text with a `kt.models.Whisper`: `transcribe(audio)`.

    The audio (a WAV or FLAC path, a file's bytes, or float samples at 16
    kHz) becomes log-mel frames in the graph (`kt.layers.LogMelSpectrogram`),
    and the model decodes from `<|startoftranscript|>`, the language and
    task tokens and `<|notimestamps|>`, with the checkpoint's
    `suppress_tokens` and `begin_suppress_tokens`, greedily, as
    transformers' `generate` does. Without a `language`, each input's
    language is detected from the language tokens' logits after
    `<|startoftranscript|>` (transformers' `detect_language`). Audio longer
    than 30 s is cut into 30 s windows, transcribed as one batch, and the
    windows' tokens joined. `return_timestamps=True` decodes with Whisper's
    timestamp tokens and gives the segments between them.

    Args:
        model: a `kt.models.Whisper`.
        tokenizer: its `kt.text.WhisperTokenizer`.
        **kwargs: base `keras.Model` arguments (`name`).

    Examples:
        >>> import keras_transformer as kt
        >>> recognizer = kt.tasks.SpeechRecognizer.from_pretrained(
        ...     "tests/fixtures/hf/whisper_tiny_random")
        >>> text = recognizer.transcribe("tests/fixtures/audio/speech_0.wav",
        ...                              language="en", max_new_tokens=4)
        >>> isinstance(text, str)  # a random model's words
        True
    """

    model_classes = (Whisper,)

    def __init__(self, model, tokenizer, **kwargs):
        if not isinstance(tokenizer, WhisperTokenizer):
            raise ValueError(
                "`tokenizer` must be a kt.text.WhisperTokenizer. Received: "
                f"tokenizer={tokenizer!r}"
            )
        super().__init__(model, tokenizer, **kwargs)
        self.features = LogMelSpectrogram(
            num_mel_bins=model.num_mel_bins, num_samples=model.num_frames * HOP
        )

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, dict) and "decoder_token_ids" in inputs:
            return super().__call__(inputs, *args, **kwargs)
        return self.transcribe(inputs, *args, **kwargs)

    # === Settings ===

    def _settings(self):
        return dict(self.model.speech_settings or {})

    def language_ids(self):
        """Our ids of the model's language tokens (its `lang_to_id`, else
        the tokenizer's language tokens)."""
        ids = self._settings().get("lang_to_id")
        if ids:
            return sorted(ids.values())
        return [self.tokenizer.token_to_id(t) for t in self.tokenizer.language_tokens()]

    def _multilingual(self):
        return bool(self._settings().get("is_multilingual", True))

    def _check(self, language, task, return_timestamps, max_new_tokens, num_beams=1):
        if task not in (None, *TASKS):
            raise ValueError(
                f"`task` must be None or one of {list(TASKS)}. Received: task={task!r}"
            )
        if language is not None:
            language = self.tokenizer.language_token(language)
        if not isinstance(return_timestamps, bool):
            raise ValueError(
                "`return_timestamps` must be a bool. Received: "
                f"return_timestamps={return_timestamps!r}"
            )
        if max_new_tokens is not None and (
            not isinstance(max_new_tokens, int)
            or isinstance(max_new_tokens, bool)
            or max_new_tokens < 1
        ):
            raise ValueError(
                "`max_new_tokens` must be a positive integer or None. Received: "
                f"max_new_tokens={max_new_tokens!r}"
            )
        if (
            not isinstance(num_beams, int)
            or isinstance(num_beams, bool)
            or num_beams < 1
        ):
            raise ValueError(
                "`num_beams` must be a positive integer. Received: "
                f"num_beams={num_beams!r}"
            )
        return language

    def prompt_ids(self, language_id, task="transcribe", timestamps=False):
        """The decoder prompt (our ids) for one language token id."""
        tokens = [self.model.decoder_start_token_id]
        if self._multilingual():
            tokens += [int(language_id), self.tokenizer.token_to_id(f"<|{task}|>")]
        if not timestamps:
            tokens.append(self.tokenizer.timestamp_begin - 1)  # <|notimestamps|>
        return tokens

    def generate_options(
        self, prompt_length, return_timestamps, max_new_tokens, num_beams=1
    ):
        """`kt.generation.generate`'s keyword arguments: the checkpoint's
        settings, timestamps, beams, and at most the decoder positions
        left."""
        options = dict(self.model.generation_config or {})
        if num_beams > 1:  # transformers' beam search
            options.update(sampler="beam", num_beams=num_beams, rules="transformers")
            options.setdefault("length_penalty", 1.0)
            options.setdefault("early_stopping", False)
        limit = self.model.max_sequence_length - prompt_length
        own = options.pop("max_new_tokens", limit)
        options["max_new_tokens"] = min(max_new_tokens or own, limit)
        if return_timestamps:
            options["timestamp_token_id"] = self.tokenizer.timestamp_begin
            initial = self._settings().get("max_initial_timestamp_index")
            if initial is not None:
                options["max_initial_timestamp_index"] = initial
        return options

    # === Audio to text ===

    def log_mel(self, audio, sampling_rate=None):
        """The log-mel frames `(W, F, M)` of one input's 30 s windows
        (`audio` as `transcribe` takes one input)."""
        samples = audio_inputs.read(audio, sampling_rate)
        windows = max(1, -(-len(samples) // WINDOW))
        samples = np.pad(samples, (0, windows * WINDOW - len(samples)))
        return self.features(samples.reshape(windows, WINDOW)).numpy()

    def detect_language(self, frames):
        """Our ids of the language tokens the model finds most likely after
        `<|startoftranscript|>`, one per row of `frames` `(B, F, M)`."""
        start = np.full((len(frames), 1), self.model.decoder_start_token_id)
        logits = self.model(
            {"encoder_features": frames, "decoder_token_ids": start}
        ).numpy()[:, 0]
        ids = np.array(self.language_ids())
        return ids[np.argmax(logits[:, ids], axis=-1)]

    def transcribe(
        self,
        audio,
        *,
        sampling_rate=None,
        language=None,
        task=None,
        return_timestamps=False,
        max_new_tokens=None,
        num_beams=1,
    ):
        """Text of speech.

        Args:
            audio: a WAV or FLAC file path, a file's bytes, float samples
                `(N,)` (at `sampling_rate`, 16 kHz by default), a dict
                `{"array", "sampling_rate"}`, or a list of these (a batch).
            sampling_rate: the rate of float samples; must be 16000.
            language: a language code (`"en"`) or token (`"<|en|>"`); None
                detects each input's language.
            task: `"transcribe"` (the default) or `"translate"` (to
                English).
            return_timestamps: give `{"text", "chunks"}` with each
                segment's `"timestamp": (start, end)` in seconds and
                `"text"`, instead of the text alone.
            max_new_tokens: tokens decoded per 30 s window at most (None:
                the checkpoint's `max_length`, within the 448 positions).
            num_beams: 1 decodes greedily (`generate`'s default with
                Whisper's generation config); more searches that many beams
                as transformers' beam search does (its
                `automatic-speech-recognition` pipeline searches 5 where
                the folder sets no `num_beams`).

        Returns:
            A string (or dict) for one input, else a list of them.

        Raises:
            ValueError: empty audio, samples of another rank or with NaN, a
                file that is not WAV or FLAC, another sampling rate, or an
                unknown language or task, naming the argument and value.
            FileNotFoundError: a path that is not a file.
        """
        language = self._check(
            language, task, return_timestamps, max_new_tokens, num_beams
        )
        single = audio_inputs.is_single(audio)
        inputs = [audio] if single else list(audio)
        # Every input is read and checked before any is computed with.
        inputs = [audio_inputs.read(item, sampling_rate) for item in inputs]
        frames = [self.log_mel(samples) for samples in inputs]
        counts = [len(f) for f in frames]
        frames = np.concatenate(frames)  # (W, F, M): every window of every input
        if language is not None:
            languages = np.full(len(frames), self.tokenizer.token_to_id(language))
        elif self._multilingual():  # each input's first window decides
            firsts = np.cumsum([0, *counts[:-1]])
            detected = self.detect_language(frames[firsts])
            languages = np.repeat(detected, counts)
        else:
            languages = np.zeros(len(frames), "int64")
        prompts = np.array(
            [
                self.prompt_ids(i, task or "transcribe", return_timestamps)
                for i in languages
            ]
        )
        options = self.generate_options(
            prompts.shape[1], return_timestamps, max_new_tokens, num_beams
        )
        tokens = generate(
            self.model,
            {"encoder_features": frames, "decoder_token_ids": prompts},
            **options,
        )[:, prompts.shape[1] :]
        end = options["end_token_id"]
        results, row = [], 0
        for count in counts:
            windows = [_until_end(tokens[row + i], end) for i in range(count)]
            row += count
            results.append(self._result(windows, return_timestamps))
        return results[0] if single else results

    def _result(self, windows, return_timestamps):
        joined = [t for window in windows for t in window]
        text = self.tokenizer.detokenize([joined or [0]], skip_special_tokens=True)
        text = text.numpy()[0].decode("utf-8")
        if not return_timestamps:
            return text
        chunks = [
            {"timestamp": (s["start"], s["end"]), "text": s["text"]}
            for i, window in enumerate(windows)
            for s in self.tokenizer.segments(window, time_offset=30.0 * i)
        ]
        return {"text": text, "chunks": chunks}

    def export(self, path, **options):
        """Writes the audio-bytes SavedModel of this task
        (`kt.export.export_speech_recognizer`): served, WAV bytes in, text
        out, as `transcribe` gives for audio of at most 30 s."""
        return exporter.export_speech_recognizer(self, path, **options)


def _until_end(row, end):
    """A generated row's ids before its end token (and padding)."""
    ends = np.reshape(end, [-1])
    row = [int(t) for t in row]
    for i, t in enumerate(row):
        if t in ends or t == 0:
            return row[:i]
    return row
