"""`export_speech_recognizer`: the SavedModel of a Whisper model and its
tokenizer whose signature takes the bytes of WAV files and returns their
text, served without the library or a Python audio stack: WAV decoding
(`tf.audio.decode_wav`), the log-mel front end, language detection and the
decode loop are all in the graph.

Whisper's plan (prompt, language detection, `generate`'s settings) is
`kt.pretrained.whisper_plan`'s, which `kt.tasks.SpeechRecognizer` calls too.

Shape legend: B batch, N samples (30 s: 480,000), F log-mel frames, P the
decoder prompt's length.
"""

from typing import NamedTuple

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import renamed
from keras_transformer.export import savedmodel
from keras_transformer.export.translator import NOT_SAMPLER_OPTIONS
from keras_transformer.generation import loop
from keras_transformer.generation.decode import decode_function
from keras_transformer.generation.registry import get_sampler
from keras_transformer.pretrained import whisper_plan as plan
from keras_transformer.pretrained.whisper_plan import RATE, STEREO_WEIGHT, WINDOW
from keras_transformer.text import tokenizer_checks
from keras_transformer.text.whisper_tokenizer import TASKS


@renamed(transcription_task="task")
def export_speech_recognizer(
    model,
    tokenizer,
    path,
    *,
    language=None,
    task="transcribe",
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
        task: `"transcribe"` or `"translate"`, as `transcribe` takes it
            (`transcription_task`, its old name, is deprecated).
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
    plan.check_pair(model, tokenizer)
    validation.check_choice("task", task, TASKS)
    language = plan.check_options(tokenizer, language, task, False, max_new_tokens)
    validation.check_bool("jit_compile", jit_compile)
    path = savedmodel.check_path(path, overwrite)
    function = transcribe_function(
        model, tokenizer, language, task, max_new_tokens, jit_compile
    )
    module = tf.Module()
    module.tokenizer = function.detokenizer
    module.features = function.features
    module.transcribe = function.run
    return savedmodel.save(
        module, {"serving_default": function.run, "transcribe": function.run}, path
    )


class _Transcription(NamedTuple):
    run: object  # the signature's tf.function
    features: object  # the log-mel layer it tracks
    detokenizer: object  # the tokenizer it tracks


def transcribe_function(model, tokenizer, language, task, max_new_tokens, jit_compile):
    """The `transcribe` signature: WAV bytes `(B,)` -> `{"text": (B,)}`,
    greedy, with the task's plan (`kt.pretrained.whisper_plan`)."""
    features = plan.features_layer(model)
    prompt_length = len(plan.prompt_ids(model, tokenizer, 0, task))
    options = plan.generate_options(
        model, tokenizer, prompt_length, False, max_new_tokens
    )
    stop = prompt_length + options["max_new_tokens"]
    end_id = options["end_token_id"]
    sampler = get_sampler(
        "greedy", **{k: v for k, v in options.items() if k not in NOT_SAMPLER_OPTIONS}
    )
    decode = tf.function(decode_function(model, sampler), jit_compile=jit_compile)
    detokenizer = tokenizer_checks.without_sequence_length(tokenizer)
    prompt = _prompt_function(model, tokenizer, language, task)

    def run(audio):
        samples = tf.map_fn(
            samples_of, audio, fn_output_signature=tf.TensorSpec([WINDOW], tf.float32)
        )
        frames = features(samples)  # (B, F, M)
        tokens = tf.pad(prompt(frames), [[0, 0], [0, stop - prompt_length]])
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

    run = tf.function(run, input_signature=[savedmodel.string_spec("audio")])
    return _Transcription(run, features, detokenizer)


def _prompt_function(model, tokenizer, language, task):
    """`frames (B, F, M) -> prompt (B, P)`: the plan's prompt in graph ops,
    each row's language detected unless `language` is fixed."""
    languages_of = plan.language_ids(model, tokenizer)
    fixed = None if language is None else tokenizer.token_to_id(language)
    template = plan.prompt_ids(model, tokenizer, 0, task)
    language_column = 1 if plan.multilingual(model) else None

    def prompt(frames):
        batch = tf.shape(frames)[0]
        rows = tf.tile(tf.constant([template], tf.int32), [batch, 1])
        if language_column is None:
            return rows
        if fixed is None:
            languages = plan.detect_language(model, frames, languages_of)
        else:
            languages = tf.fill([batch], fixed)
        return tf.concat(
            [rows[:, :1], languages[:, None], rows[:, language_column + 1 :]], axis=1
        )

    return prompt


def samples_of(data):
    """One WAV file's mono samples, cut or padded to 30 s (`(WINDOW,)`)."""
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
