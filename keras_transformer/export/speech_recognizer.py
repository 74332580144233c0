"""`export_speech_recognizer`: the SavedModel of a Whisper model and its
tokenizer whose signature takes the bytes of WAV files and returns their
text, served without the library or a Python audio stack: WAV decoding
(`tf.audio.decode_wav`), the log-mel front end, language detection and the
decode loop are all in the graph.

This module also holds what `kt.tasks.SpeechRecognizer` and the export
share: Whisper's decoder prompt, the language ids, and `generate`'s
settings for a transcription.

Shape legend: B batch, N samples (30 s: 480,000), F log-mel frames, P the
decoder prompt's length.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import savedmodel
from keras_transformer.export.translator import NOT_SAMPLER_OPTIONS
from keras_transformer.generation import loop
from keras_transformer.generation.decode import decode_function
from keras_transformer.generation.registry import get_sampler
from keras_transformer.layers import LogMelSpectrogram
from keras_transformer.models.whisper import Whisper
from keras_transformer.text.whisper_tokenizer import TASKS, WhisperTokenizer

RATE = 16000  # Whisper's sampling rate
WINDOW = 480000  # samples of 30 s at 16 kHz: what Whisper reads at once
HOP = 160  # samples per log-mel frame
# Each channel's weight in a stereo file's mix: transformers' pipeline reads
# files with ffmpeg (`-ac 1`, float output), which mixes two channels as
# (left + right) / sqrt(2) (as `kt.tasks.audio` does).
STEREO_WEIGHT = 0.5**0.5


def check_pair(model, tokenizer):
    """A ValueError unless `model` is a `kt.models.Whisper` and `tokenizer`
    a `kt.text.WhisperTokenizer`."""
    validation.check_class("model", model, (Whisper,))
    if not isinstance(tokenizer, WhisperTokenizer):
        raise ValueError(
            "`tokenizer` must be a kt.text.WhisperTokenizer. Received: "
            f"tokenizer={validation.describe(tokenizer)}"
        )


def features_layer(model):
    """The `kt.layers.LogMelSpectrogram` of `model`'s frames (30 s)."""
    return LogMelSpectrogram(
        num_mel_bins=model.num_mel_bins, num_samples=model.num_frames * HOP
    )


def check_options(
    tokenizer, language, task, return_timestamps, max_new_tokens, num_beams=1
):
    """The checked decoding arguments of a transcription: the token of
    `language` (None: detected)."""
    if task is not None:
        validation.check_choice("task", task, TASKS)
    validation.check_bool("return_timestamps", return_timestamps)
    validation.check_positive_int("max_new_tokens", max_new_tokens, allow_none=True)
    validation.check_positive_int("num_beams", num_beams)
    return None if language is None else tokenizer.language_token(language)


def multilingual(model):
    """Whether the model's prompt names a language and a task (False for
    English-only checkpoints, `is_multilingual: false`)."""
    return bool((model.speech_settings or {}).get("is_multilingual", True))


def language_ids(model, tokenizer):
    """Our ids of the model's language tokens (its `lang_to_id`, else the
    tokenizer's language tokens)."""
    ids = (model.speech_settings or {}).get("lang_to_id")
    if ids:
        return sorted(ids.values())
    return [tokenizer.token_to_id(t) for t in tokenizer.language_tokens()]


def prompt_ids(model, tokenizer, language_id, task="transcribe", timestamps=False):
    """The decoder prompt (our ids) for one language token id."""
    tokens = [model.decoder_start_token_id]
    if multilingual(model):
        tokens += [int(language_id), tokenizer.token_to_id(f"<|{task}|>")]
    if not timestamps:
        tokens.append(tokenizer.timestamp_begin - 1)  # <|notimestamps|>
    return tokens


def generate_options(
    model, tokenizer, prompt_length, timestamps, max_new_tokens, num_beams=1
):
    """`kt.generation.generate`'s keyword arguments: the checkpoint's
    settings, timestamps, beams, and at most the decoder positions left."""
    options = dict(model.generation_config or {})
    if num_beams > 1:  # transformers' beam search
        options.update(sampler="beam", num_beams=num_beams, rules="transformers")
        options.setdefault("length_penalty", 1.0)
        options.setdefault("early_stopping", False)
    limit = model.max_sequence_length - prompt_length
    own = options.pop("max_new_tokens", limit)
    options["max_new_tokens"] = min(max_new_tokens or own, limit)
    if timestamps:
        options["timestamp_token_id"] = tokenizer.timestamp_begin
        initial = (model.speech_settings or {}).get("max_initial_timestamp_index")
        if initial is not None:
            options["max_initial_timestamp_index"] = initial
    return options


def export_speech_recognizer(
    model,
    tokenizer,
    path,
    *,
    language=None,
    transcription_task="transcribe",
    max_new_tokens=None,
    overwrite=False,
    jit_compile=True,
):
    """Writes the audio-bytes SavedModel of a Whisper model and its
    tokenizer (`kt.tasks.SpeechRecognizer.export` calls it).

    Its signature `transcribe` (also `serving_default`) takes `audio`, a
    `(B,)` string tensor of WAV files' bytes (16 kHz, 16-bit PCM, one or
    two channels, mixed as `SpeechRecognizer` mixes them), and returns
    `{"text": (B,) strings}`: what `SpeechRecognizer.transcribe(...)`
    gives (greedy) for audio of at most 30 s (longer audio is cut to its
    first 30 s). A file at another rate, or of more channels, fails the
    call with an `InvalidArgumentError`.

    Args:
        model: a `kt.models.Whisper`.
        tokenizer: its `kt.text.WhisperTokenizer`.
        path: the SavedModel folder to write.
        language: a language code (`"en"`) fixed at export; None detects
            each file's language in the graph.
        transcription_task: `"transcribe"` or `"translate"`.
        max_new_tokens: tokens decoded at most (None: as `transcribe`).
        overwrite: replace an existing folder at `path`.
        jit_compile: compile the decode loop with XLA.

    Returns:
        The absolute path written.

    Examples:
        >>> import tempfile
        >>> import tensorflow as tf
        >>> import keras_transformer as kt
        >>> recognizer = kt.tasks.SpeechRecognizer.from_pretrained(
        ...     "tests/fixtures/hf/whisper_tiny_random")
        >>> path = kt.export.export_speech_recognizer(
        ...     recognizer.model, recognizer.tokenizer,
        ...     tempfile.mkdtemp() + "/asr", language="en", max_new_tokens=4)
        >>> served = tf.saved_model.load(path)
        >>> wav = open("tests/fixtures/audio/speech_0.wav", "rb").read()
        >>> served.transcribe(tf.constant([wav]))["text"].shape
        TensorShape([1])
    """
    check_pair(model, tokenizer)
    validation.check_choice("transcription_task", transcription_task, TASKS)
    language = check_options(
        tokenizer, language, transcription_task, False, max_new_tokens
    )
    validation.check_bool("jit_compile", jit_compile)
    path = savedmodel.check_path(path, overwrite)
    features = features_layer(model)
    prompt_length = len(prompt_ids(model, tokenizer, 0, transcription_task))
    options = generate_options(model, tokenizer, prompt_length, False, max_new_tokens)
    stop = prompt_length + options["max_new_tokens"]
    end_id = options["end_token_id"]
    sampler = get_sampler(
        "greedy", **{k: v for k, v in options.items() if k not in NOT_SAMPLER_OPTIONS}
    )
    decode = tf.function(decode_function(model, sampler), jit_compile=jit_compile)
    detokenizer = savedmodel.without_sequence_length(tokenizer)
    languages_of = tf.constant(language_ids(model, tokenizer), tf.int32)
    fixed = None if language is None else tokenizer.token_to_id(language)
    names_language = multilingual(model)
    start = model.decoder_start_token_id
    task_id = tokenizer.token_to_id(f"<|{transcription_task}|>")
    no_timestamps = tokenizer.timestamp_begin - 1

    def samples_of(data):
        wav, rate = tf.audio.decode_wav(data)  # (N, channels)
        tf.debugging.assert_equal(
            rate, RATE, message="`audio` must be WAV files sampled at 16000 Hz"
        )
        channels = tf.shape(wav)[1]
        tf.debugging.assert_less_equal(
            channels, 2, message="`audio` must be WAV files of one or two channels"
        )
        # Two channels mixed as transformers' pipeline (ffmpeg) mixes them.
        weight = tf.where(channels == 2, STEREO_WEIGHT, 1.0)
        mono = tf.reduce_sum(wav * weight, axis=1)[:WINDOW]
        return tf.pad(mono, [[0, WINDOW - tf.shape(mono)[0]]])

    def run(audio):
        samples = tf.map_fn(
            samples_of, audio, fn_output_signature=tf.TensorSpec([WINDOW], tf.float32)
        )
        frames = features(samples)  # (B, F, M)
        batch = tf.shape(frames)[0]
        starts = tf.fill([batch, 1], start)
        columns = [starts]
        if names_language:
            if fixed is None:  # the likeliest language token after the start
                logits = model(
                    {"encoder_features": frames, "decoder_token_ids": starts}
                )
                scores = tf.gather(logits[:, 0], languages_of, axis=1)
                languages = tf.gather(languages_of, tf.argmax(scores, axis=1))
            else:
                languages = tf.fill([batch], fixed)
            columns += [languages[:, None], tf.fill([batch, 1], task_id)]
        columns.append(tf.fill([batch, 1], no_timestamps))
        prompt = tf.concat(columns, axis=1)  # (B, P)
        tokens = tf.pad(prompt, [[0, 0], [0, stop - prompt_length]])
        tokens = decode(
            tokens,
            frames,
            tf.constant(prompt_length),
            tf.constant(stop),
            tf.constant(end_id),
            tf.zeros([2], tf.int32),
        )[:, prompt_length:]
        tokens = tf.where(loop.is_end(tokens, end_id), 0, tokens)
        return {"text": detokenizer.detokenize(tokens, skip_special_tokens=True)}

    function = tf.function(run, input_signature=[savedmodel.string_spec("audio")])
    module = tf.Module()
    module.tokenizer = detokenizer
    module.features = features
    module.transcribe = function
    return savedmodel.save(
        module, {"serving_default": function, "transcribe": function}, path
    )
