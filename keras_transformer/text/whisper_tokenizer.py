"""`WhisperTokenizer`: GPT-2's byte-level BPE with Whisper's special and
timestamp tokens, in-graph.

Ids are the checkpoint's plus one (id 0 is padding), as every
`kt.text.BytePairTokenizer`'s.
"""

import keras
import tensorflow as tf

from keras_transformer.text.bpe import BytePairTokenizer, read_vocabulary

START = "<|startoftranscript|>"
END = "<|endoftext|>"
NO_TIMESTAMPS = "<|notimestamps|>"
PREVIOUS = "<|startofprev|>"
TASKS = ("transcribe", "translate")
TIME_STEP = 0.02  # seconds per timestamp token
NUM_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>


def timestamp_token(seconds):
    """The text of the timestamp token of `seconds` (`<|1.20|>`)."""
    return f"<|{seconds:.2f}|>"


def with_timestamps(vocabulary):
    """`vocabulary` (a dict token -> id, or a `vocab.json`) with Whisper's
    timestamp tokens. Files that list them are kept as they are. Files that
    end at `<|notimestamps|>` (the hub's older files, faster-whisper's
    `tokenizer.json`) get `<|0.00|>` ... `<|30.00|>` at the ids after it:
    transformers reads those ids as timestamps (`<|notimestamps|>` + 1 + i
    is `<|i * 0.02|>`), and text never gives them."""
    vocabulary = read_vocabulary(vocabulary)
    if timestamp_token(0) in vocabulary or NO_TIMESTAMPS not in vocabulary:
        return vocabulary  # the second: refused by name in WhisperTokenizer
    last = len(vocabulary) - 1
    if vocabulary[NO_TIMESTAMPS] != last:
        raise ValueError(
            f"`vocabulary` must hold Whisper's timestamp tokens "
            f"({timestamp_token(0)!r} ...), or end at {NO_TIMESTAMPS!r} (the ids "
            f"after it are the timestamps). Received: {NO_TIMESTAMPS!r} has id "
            f"{vocabulary[NO_TIMESTAMPS]}, the last id is {last}"
        )
    stamps = [timestamp_token(i * TIME_STEP) for i in range(NUM_TIMESTAMPS)]
    return {**vocabulary, **{t: last + 1 + i for i, t in enumerate(stamps)}}


@keras.saving.register_keras_serializable(package="keras_transformer")
class WhisperTokenizer(BytePairTokenizer):
    """Whisper's tokenizer: GPT-2's byte-level BPE, the special tokens
    (`<|endoftext|>`, `<|startoftranscript|>`, the languages `<|en|>` ...,
    `<|translate|>`, `<|transcribe|>`, `<|notimestamps|>` ...) and the
    timestamp tokens `<|0.00|>` ... `<|30.00|>` (0.02 s apart), all
    matched whole in text, as transformers' `WhisperTokenizer`.

    `tokenize` puts the decoder prompt first (`<|startoftranscript|>`, the
    `language` and `task` tokens when set, `<|notimestamps|>` unless
    `predict_timestamps`) and `<|endoftext|>` last, as transformers'
    tokenizer does for its prefix tokens. `detokenize` drops the timestamp
    tokens unless `decode_with_timestamps`, and with `skip_special_tokens`
    the special tokens and a `<|startofprev|>` prompt, as transformers'
    `decode`. Ids are transformers' plus one.

    Args:
        vocabulary: a dict token -> id (the checkpoint's ids, special and
            timestamp tokens included), or the path of a `vocab.json`.
            Without timestamp tokens it must end at `<|notimestamps|>`:
            the ids after it are the timestamps, as transformers reads
            such files (the hub's older ones, faster-whisper's), written
            `<|0.00|>` ... `<|30.00|>` but never matched in text.
        merges: the merges (`"left right"` strings, rank order) or the
            path of a `merges.txt`.
        added_tokens: the tokens matched whole in text (the special and
            timestamp tokens).
        special_tokens: those `skip_special_tokens` drops.
        language: a language token (`"<|en|>"`) or code (`"en"`) the prompt
            names, or None.
        task: `"transcribe"`, `"translate"` or None.
        predict_timestamps: the prompt lacks `<|notimestamps|>`.
        **kwargs: `kt.text.BytePairTokenizer` arguments.

    Examples:
        >>> import keras_transformer as kt
        >>> tokenizer = kt.text.tokenizer_from_pretrained(
        ...     "tests/fixtures/hf/whisper_tiny_random")
        >>> ids = tokenizer("Hello world")
        >>> ids.numpy().tolist()  # transformers' [50258, 50363, 15947, 1002, 50257] + 1
        [50259, 50364, 15948, 1003, 50258]
        >>> tokenizer.detokenize(ids, skip_special_tokens=True).numpy().decode()
        'Hello world'
    """

    def __init__(
        self,
        vocabulary,
        merges,
        added_tokens=None,
        special_tokens=None,
        language=None,
        task=None,
        predict_timestamps=False,
        **kwargs,
    ):
        kwargs.setdefault("eos_token", END)
        super().__init__(
            with_timestamps(vocabulary),
            merges,
            added_tokens=added_tokens,
            special_tokens=special_tokens,
            **kwargs,
        )
        for token in (START, NO_TIMESTAMPS, timestamp_token(0)):
            if token not in self._token_to_id:
                raise ValueError(
                    f"`vocabulary` must hold Whisper's token {token!r} (the "
                    "special tokens, then the timestamps). Received: "
                    f"{len(self._token_to_id)} tokens without {token!r}"
                )
        if task is not None and task not in TASKS:
            raise ValueError(
                f"`task` must be None or one of {list(TASKS)}. Received: task={task!r}"
            )
        self.language = None if language is None else self.language_token(language)
        self.task = task
        self.predict_timestamps = bool(predict_timestamps)

    def language_token(self, language):
        """The token of `language` (`"en"` or `"<|en|>"`), or a
        ValueError naming it."""
        token = language if str(language).startswith("<|") else f"<|{language}|>"
        if token not in self.language_tokens():
            raise ValueError(
                f"`language` must be one of the model's languages "
                f"({', '.join(t[2:-2] for t in self.language_tokens())}). "
                f"Received: language={language!r}"
            )
        return token

    def language_tokens(self):
        """The language tokens, in id order (`<|en|>` first): those between
        `<|startoftranscript|>` and `<|translate|>`."""
        start = self._token_to_id[START]
        stop = self._token_to_id.get("<|translate|>", start + 1)
        return self._vocabulary[start + 1 : stop]

    @property
    def timestamp_begin(self):
        """Our id of `<|0.00|>`; the ids from it up are timestamps."""
        return self._token_to_id[timestamp_token(0)]

    def prompt_ids(self, language=None, task=None, timestamps=None):
        """The decoder prompt (our ids): `<|startoftranscript|>`, the
        language and task tokens when given (else the tokenizer's), and
        `<|notimestamps|>` unless timestamps are predicted."""
        language = self.language if language is None else self.language_token(language)
        task = self.task if task is None else task
        timestamps = self.predict_timestamps if timestamps is None else timestamps
        tokens = [START]
        if language is not None:
            tokens.append(language)
        if task is not None:
            tokens.append(f"<|{task}|>")
        if not timestamps:
            tokens.append(NO_TIMESTAMPS)
        return [self._token_to_id[t] for t in tokens]

    def _tokenize(self, strings):
        ids = super()._tokenize(strings)
        prompt = tf.constant(self.prompt_ids(), tf.int32)
        first = tf.tile(prompt[None], [ids.nrows(), 1])
        return tf.concat([tf.RaggedTensor.from_tensor(first), ids], axis=1)

    def detokenize(
        self, inputs, skip_special_tokens=False, decode_with_timestamps=False
    ):
        """Token ids back to text, as transformers' `decode`.

        Args:
            inputs: int ids `(T,)` or a batch `(B, T)` (dense, ragged or a
                list of lists).
            skip_special_tokens: drop the special tokens, and a prompt
                that `<|startofprev|>` opens (up to `<|startoftranscript|>`).
            decode_with_timestamps: write the timestamp tokens
                (`<|1.20|>`) instead of dropping them.

        Returns:
            A string scalar for `(T,)` ids, else a `(B,)` string tensor.
        """
        batch, rank = self.ragged_ids(inputs)
        keep = tf.ones_like(batch.flat_values, tf.bool)
        if not decode_with_timestamps:
            keep = batch.flat_values < self.timestamp_begin
        if skip_special_tokens and PREVIOUS in self._token_to_id:
            # A `<|startofprev|>` prompt ends at `<|startoftranscript|>`.
            start = self._token_to_id[START]
            positions = tf.ragged.range(batch.row_lengths())
            first_start = tf.reduce_min(
                tf.where(batch == start, positions, tf.int64.max), axis=1
            )
            prompted = batch[:, :1].to_tensor(-1)[:, 0] == self._token_to_id[PREVIOUS]
            prompt = tf.logical_and(prompted[:, None], positions < first_start[:, None])
            keep = tf.logical_and(keep, tf.logical_not(prompt.flat_values))
        batch = tf.ragged.boolean_mask(batch, batch.with_flat_values(keep))
        text = super().detokenize(batch, skip_special_tokens=skip_special_tokens)
        return text[0] if rank == 1 else text

    def segments(self, ids, time_offset=0.0, window=30.0):
        """The segments of one window's generated ids (our ids, a list,
        without the prompt), as transformers' `generate(...,
        return_timestamps=True)` cuts them: at each pair of consecutive
        timestamp tokens. Each is `{"start": s, "end": s, "tokens": [...],
        "text": str}`, times in seconds from `time_offset`. Ids without a
        pair make one segment, ending at their last timestamp (else at the
        `window`'s end)."""
        begin = self.timestamp_begin
        ids = [int(t) for t in ids if t > 0]
        if ids and ids[-1] == self._token_to_id[END]:
            ids = ids[:-1]
        stamp = [t >= begin for t in ids]

        def segment(tokens, start, end):
            text = self.detokenize([tokens], skip_special_tokens=True)
            return {
                "start": round(time_offset + start, 2),
                "end": round(time_offset + end, 2),
                "tokens": tokens,
                "text": text.numpy()[0].decode("utf-8"),
            }

        cuts = [i + 1 for i in range(len(ids) - 1) if stamp[i] and stamp[i + 1]]
        if not cuts:
            stamps = [t for t in ids if t >= begin]
            end = window
            if stamps and stamps[-1] != begin:
                end = (stamps[-1] - begin) * TIME_STEP
            return [segment(ids, 0.0, end)] if ids else []
        single_ending = stamp[-2:] == [False, True]
        if single_ending:
            cuts.append(len(ids))
        else:
            cuts[-1] += 1
        segments, last = [], 0
        for i, cut in enumerate(cuts):
            tokens = ids[last:cut]
            end = tokens[-1 if i < len(cuts) - 1 or single_ending else -2]
            segments.append(
                segment(
                    tokens, (tokens[0] - begin) * TIME_STEP, (end - begin) * TIME_STEP
                )
            )
            last = cut
        return segments

    def get_config(self):
        config = super().get_config()
        config.update(
            language=self.language,
            task=self.task,
            predict_timestamps=self.predict_timestamps,
        )
        return config
