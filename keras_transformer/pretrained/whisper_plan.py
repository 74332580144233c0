"""Whisper's decoding plan, written once for `kt.tasks.SpeechRecognizer`
(eager) and `kt.export.export_speech_recognizer` (in the graph): the
decoder prompt, the language ids and their detection, `generate`'s
settings for a transcription, and the timestamp rules (a logits processor,
as transformers' `WhisperTimeStampLogitsProcessor`).

Shape legend: B batch, N samples (30 s: 480,000), F log-mel frames, M mel
bins, P the decoder prompt's length, R rows, L buffer length, V vocabulary.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation import loop
from keras_transformer.generation.options import check_count
from keras_transformer.generation.processors import LogitsProcessor
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


# The samplers `transcribe` takes by name (beam search is `num_beams`).
SAMPLERS = ("greedy", "temperature", "top_k", "top_p")


def check_sampler(sampler, num_beams, seed, sampler_args):
    """`generate`'s sampler keywords of a transcription (empty for the
    default), checked: a sampler name, its arguments, a seed."""
    if sampler is None:
        if sampler_args:
            raise ValueError(
                "Sampler arguments need a `sampler`. Received: "
                f"sampler=None with {sampler_args}"
            )
        return {} if seed is None else {"seed": seed}
    validation.check_choice("sampler", sampler, SAMPLERS)
    if num_beams > 1:
        raise ValueError(
            "`sampler` decodes one beam: leave it out with `num_beams`. "
            f"Received: sampler={sampler!r} with num_beams={num_beams!r}"
        )
    get_sampler(sampler, **sampler_args)  # a ValueError naming a bad one
    return {"sampler": sampler, "seed": seed, **sampler_args}


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
        initial = (model.speech_settings or {}).get("max_initial_timestamp_index")
        options["logits_processors"] = [
            TimestampRules(tokenizer.timestamp_begin, initial)
        ]
    return options


def detect_language(model, frames, ids):
    """The ids of the language tokens `model` finds likeliest after
    `<|startoftranscript|>`, an int32 `(B,)` tensor for `frames` `(B, F, M)`
    (transformers' `detect_language`); `ids` are `language_ids`. Eager (the
    task) and in a graph (the SavedModel)."""
    ids = tf.constant(ids, tf.int32)
    frames = tf.convert_to_tensor(frames)
    starts = tf.fill([tf.shape(frames)[0], 1], model.decoder_start_token_id)
    logits = model({"encoder_features": frames, "decoder_token_ids": starts})
    scores = tf.gather(tf.cast(logits[:, 0], tf.float32), ids, axis=1)
    return tf.gather(ids, tf.argmax(scores, axis=1, output_type=tf.int32))


class TimestampRules(LogitsProcessor):
    """Whisper's timestamp rules (transformers'
    `WhisperTimeStampLogitsProcessor`), a logits processor for
    `kt.generation.Sampler(logits_processors=[...])`.

    The timestamp tokens fill the vocabulary from `timestamp_token_id`
    (`<|0.00|>`); the id before it (`<|notimestamps|>`) is never generated.
    A row starts with a timestamp (at most `timestamp_token_id +
    max_initial_timestamp_index`); timestamps come in pairs (start, end)
    except before the end token, never decrease, and one is chosen whenever
    the timestamps' total probability beats every text token's.

    Args:
        timestamp_token_id: our id of `<|0.00|>`.
        max_initial_timestamp_index: the latest first timestamp, in steps
            (0.02 s); None: no bound.

    Example:
        >>> import keras_transformer as kt
        >>> from keras_transformer.pretrained.whisper_plan import TimestampRules
        >>> sampler = kt.generation.GreedySampler(
        ...     logits_processors=[TimestampRules(50366, 50)])
        >>> sampler.token_ids()
        [('timestamp_token_id', 50366)]
    """

    def __init__(self, timestamp_token_id, max_initial_timestamp_index=None):
        self.begin = validation.check_token_id("timestamp_token_id", timestamp_token_id)
        if max_initial_timestamp_index is not None:
            check_count("max_initial_timestamp_index", max_initial_timestamp_index)
        self.max_initial_timestamp_index = max_initial_timestamp_index

    def token_ids(self):
        return [("timestamp_token_id", self.begin)]

    def __call__(self, scores, step):
        begin = self.begin
        tokens, index, prompt_lengths = step.tokens, step.index, step.prompt_lengths
        ids = tf.range(tf.shape(scores)[1])[None]  # (1, V)
        is_timestamp = ids >= begin
        scores = tf.where(ids == begin - 1, -loop.INF, scores)  # <|notimestamps|>
        new = index - prompt_lengths  # (R,): new tokens so far
        last = tokens[:, tf.maximum(index - 1, 0)]
        penultimate = tokens[:, tf.maximum(index - 2, 0)]
        last_was = tf.logical_and(new >= 1, last >= begin)[:, None]
        penultimate_was = tf.logical_or(new < 2, penultimate >= begin)[:, None]
        # In pairs: after two timestamps text, after one text a timestamp or
        # end (the ids below the end token are text).
        ends = tf.reshape(step.end_token_id, [-1])
        end = tf.reduce_min(tf.where(ends >= 0, ends, tf.reduce_max(ends)))
        pair_done = tf.logical_and(last_was, penultimate_was)
        scores = tf.where(tf.logical_and(pair_done, is_timestamp), -loop.INF, scores)
        opened = tf.logical_and(last_was, tf.logical_not(penultimate_was))
        scores = tf.where(tf.logical_and(opened, ids < end), -loop.INF, scores)
        # Never decreasing: below the last one (an opened pair may close at it).
        positions = tf.range(tf.shape(tokens)[1])[None]
        written = tf.logical_and(
            positions >= prompt_lengths[:, None], positions < index
        )
        stamps = tf.where(tf.logical_and(written, tokens >= begin), tokens, -1)
        latest = tf.reduce_max(stamps, axis=1)[:, None]  # (R, 1), -1: none
        lowest = tf.where(latest < 0, begin, tf.where(opened, latest, latest + 1))
        scores = tf.where(tf.logical_and(is_timestamp, ids < lowest), -loop.INF, scores)
        # The first new token is a timestamp, at most the initial bound.
        first = (new == 0)[:, None]
        scores = tf.where(tf.logical_and(first, ids < begin), -loop.INF, scores)
        if self.max_initial_timestamp_index is not None:
            late = ids > begin + self.max_initial_timestamp_index
            scores = tf.where(tf.logical_and(first, late), -loop.INF, scores)
        # A timestamp when their total probability beats every text token's.
        logprobs = tf.nn.log_softmax(scores, axis=-1)
        timestamp = tf.reduce_logsumexp(
            tf.where(is_timestamp, logprobs, -loop.INF), axis=-1
        )
        text = tf.reduce_max(tf.where(is_timestamp, -loop.INF, logprobs), axis=-1)
        return tf.where(
            tf.logical_and((timestamp > text)[:, None], tf.logical_not(is_timestamp)),
            -loop.INF,
            scores,
        )
