"""`SpeechRecognizer`: a Whisper model and its tokenizer, audio in, text
out, as transformers' `automatic-speech-recognition` pipeline."""

import keras
import numpy as np

from keras_transformer.export.speech_recognizer import export_speech_recognizer
from keras_transformer.generation import generate
from keras_transformer.models.whisper import Whisper
from keras_transformer.pretrained import whisper_plan as plan
from keras_transformer.tasks import audio as audio_inputs
from keras_transformer.tasks.base import Task

WINDOW = plan.WINDOW


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
        plan.check_pair(model, tokenizer)
        super().__init__(model, tokenizer, **kwargs)
        self.features = plan.features_layer(model)

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, dict) and "decoder_token_ids" in inputs:
            return super().__call__(inputs, *args, **kwargs)
        return self.transcribe(inputs, *args, **kwargs)

    def language_ids(self):
        """Our ids of the model's language tokens (its `lang_to_id`, else
        the tokenizer's language tokens)."""
        return plan.language_ids(self.model, self.tokenizer)

    def prompt_ids(self, language_id, task="transcribe", timestamps=False):
        """The decoder prompt (our ids) for one language token id."""
        return plan.prompt_ids(
            self.model, self.tokenizer, language_id, task, timestamps
        )

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
        return plan.detect_language(self.model, frames, self.language_ids()).numpy()

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
        sampler=None,
        seed=None,
        **sampler_args,
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
            sampler: None decodes greedily (or with `num_beams`); a sampler
                name, `"greedy"`, `"temperature"`, `"top_k"` or `"top_p"`,
                samples (with one beam) under Whisper's rules, as the other
                tasks' `sampler` does. Only a name: the checkpoint's
                suppressed ids and the timestamp rules join it.
            seed: the seed of sampling samplers.
            **sampler_args: the sampler's arguments (`temperature`,
                `top_k`, `top_p`).

        Returns:
            A string (or dict) for one input, else a list of them.

        Raises:
            ValueError: empty audio, samples of another rank or with NaN, a
                file that is not WAV or FLAC, another sampling rate, or an
                unknown language or task, naming the argument and value.
            FileNotFoundError: a path that is not a file.
        """
        language = plan.check_options(
            self.tokenizer, language, task, return_timestamps, max_new_tokens, num_beams
        )
        sampling = plan.check_sampler(sampler, num_beams, seed, sampler_args)
        single = audio_inputs.is_single(audio)
        inputs = [audio] if single else list(audio)
        # Every input is read and checked before any is computed with.
        inputs = [audio_inputs.read(item, sampling_rate) for item in inputs]
        frames = [self.log_mel(samples) for samples in inputs]
        counts = [len(f) for f in frames]
        frames = np.concatenate(frames)  # (W, F, M): every window of every input
        if language is not None:
            languages = np.full(len(frames), self.tokenizer.token_to_id(language))
        elif plan.multilingual(self.model):  # each input's first window decides
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
        options = plan.generate_options(
            self.model,
            self.tokenizer,
            prompts.shape[1],
            return_timestamps,
            max_new_tokens,
            num_beams,
        )
        options.update(sampling)
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
        return export_speech_recognizer(self.model, self.tokenizer, path, **options)


def _until_end(row, end):
    """A generated row's ids before its end token (and padding)."""
    ends = np.reshape(end, [-1])
    row = [int(t) for t in row]
    for i, t in enumerate(row):
        if t in ends or t == 0:
            return row[:i]
    return row
