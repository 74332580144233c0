"""`export_speech_recognizer`: the SavedModel of a
`kt.tasks.SpeechRecognizer` whose signature takes the bytes of WAV files
and returns their text, served without the library or a Python audio
stack: WAV decoding (`tf.audio.decode_wav`), the log-mel front end,
language detection and the decode loop are all in the graph.

Shape legend: B batch, N samples (30 s: 480,000), F log-mel frames, P the
decoder prompt's length.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import savedmodel
from keras_transformer.generation import loop
from keras_transformer.generation.decode import decode_function
from keras_transformer.generation.registry import get_sampler

NOT_SAMPLER_OPTIONS = ("end_token_id", "max_new_tokens", "sampler")


def export_speech_recognizer(
    task,
    path,
    *,
    language=None,
    transcription_task="transcribe",
    max_new_tokens=None,
    overwrite=False,
    jit_compile=True,
):
    """Writes the audio-bytes SavedModel of a `kt.tasks.SpeechRecognizer`.

    Its signature `transcribe` (also `serving_default`) takes `audio`, a
    `(B,)` string tensor of WAV files' bytes (16 kHz, 16-bit PCM; several
    channels are averaged), and returns `{"text": (B,) strings}`: what
    `task.transcribe(...)` gives for audio of at most 30 s (longer audio
    is cut to its first 30 s). A file at another rate fails the call with
    an `InvalidArgumentError` naming the rate.

    Args:
        task: a `kt.tasks.SpeechRecognizer`.
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
        ...     recognizer, tempfile.mkdtemp() + "/asr", language="en",
        ...     max_new_tokens=4)
        >>> served = tf.saved_model.load(path)
        >>> wav = open("tests/fixtures/audio/speech_0.wav", "rb").read()
        >>> served.transcribe(tf.constant([wav]))["text"].shape
        TensorShape([1])
    """
    from keras_transformer.tasks.speech_recognizer import WINDOW, SpeechRecognizer

    if not isinstance(task, SpeechRecognizer):
        raise ValueError(
            "`task` must be a kt.tasks.SpeechRecognizer. Received: "
            f"task={validation.describe(task)}"
        )
    language = task._check(language, transcription_task, False, max_new_tokens)
    if transcription_task is None:
        raise ValueError("`transcription_task` must be 'transcribe' or 'translate'.")
    validation.check_bool("jit_compile", jit_compile)
    path = savedmodel.check_path(path, overwrite)
    model, tokenizer = task.model, task.tokenizer
    prompt_length = len(task.prompt_ids(0, transcription_task))
    options = task.generate_options(prompt_length, False, max_new_tokens)
    stop = prompt_length + options["max_new_tokens"]
    end_id = options["end_token_id"]
    sampler = get_sampler(
        "greedy", **{k: v for k, v in options.items() if k not in NOT_SAMPLER_OPTIONS}
    )
    decode = tf.function(decode_function(model, sampler), jit_compile=jit_compile)
    detokenizer = savedmodel.without_sequence_length(tokenizer)
    language_ids = tf.constant(task.language_ids(), tf.int32)
    fixed = None if language is None else tokenizer.token_to_id(language)
    multilingual = task._multilingual()
    start = model.decoder_start_token_id
    task_id = tokenizer.token_to_id(f"<|{transcription_task}|>")
    no_timestamps = tokenizer.timestamp_begin - 1

    def samples_of(data):
        wav, rate = tf.audio.decode_wav(data)  # (N, channels)
        tf.debugging.assert_equal(
            rate, 16000, message="`audio` must be WAV files sampled at 16000 Hz"
        )
        mono = tf.reduce_mean(wav, axis=1)[:WINDOW]
        return tf.pad(mono, [[0, WINDOW - tf.shape(mono)[0]]])

    def run(audio):
        samples = tf.map_fn(
            samples_of, audio, fn_output_signature=tf.TensorSpec([WINDOW], tf.float32)
        )
        frames = task.features(samples)  # (B, F, M)
        batch = tf.shape(frames)[0]
        starts = tf.fill([batch, 1], start)
        columns = [starts]
        if multilingual:
            if fixed is None:  # the likeliest language token after the start
                logits = model(
                    {"encoder_features": frames, "decoder_token_ids": starts}
                )
                scores = tf.gather(logits[:, 0], language_ids, axis=1)
                languages = tf.gather(language_ids, tf.argmax(scores, axis=1))
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
    module.features = task.features
    module.transcribe = function
    return savedmodel.save(
        module, {"serving_default": function, "transcribe": function}, path
    )
