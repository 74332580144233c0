"""Byte-level BPE tokenizers (GPT-2's, and Qwen2's and Llama-3's from a
`tokenizer.json`), in-graph on TensorFlow ops.

Text is split into words by GPT-2's pattern (or the regex a `tokenizer.json`
declares, `pretokenizers.py`), each word's UTF-8 bytes start
as one token each, and the adjacent pair with the lowest merge rank is
merged everywhere in the word until no pair has a rank. Every step is a
tensor op over all the (unique) words of a batch at once, so the tokenizer
runs in `tf.data`, `tf.function` and SavedModels.

Ids: this library's id 0 is padding, so token `t` of a `vocab.json` that
gives it id `i` has our id `i + 1` (`"!"`, GPT-2's id 0, is our id 1).

Shape legend: B batch, W words, N tokens.
"""

import json
import os

import keras
import tensorflow as tf

from keras_transformer.text import checks, pretokenizers
from keras_transformer.text.chat import ChatTemplateMixin, check_chat_template
from keras_transformer.text.pretokenizers import pretokenize, previous
from keras_transformer.text.tokenizer import Tokenizer

_NO_RANK = 2**63 - 1


def bytes_to_unicode():
    """GPT-2's map of the 256 byte values to printable characters, which
    `vocab.json` and `merges.txt` spell tokens in: printable Latin-1 bytes
    stand for themselves, the others for the characters from U+0100 on
    (a space is `"Ġ"`, a newline `"Ċ"`)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    characters, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            characters[byte] = chr(byte)
        else:
            characters[byte] = chr(256 + extra)
            extra += 1
    return characters


def _read(value, name, reader):
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"`{name}` file not found: {path!r}. Received: {name}={path!r}"
            )
        try:
            with open(path, encoding="utf-8") as f:
                return reader(f)
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(
                f"`{name}` file {path!r} is malformed: {error}. "
                f"Received: {name}={path!r}"
            ) from None
    return value


def read_vocabulary(vocabulary):
    """`vocab.json` as a dict token -> id (ids 0..N-1, each once)."""
    vocabulary = _read(vocabulary, "vocabulary", json.load)
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError(
            "`vocabulary` must be a non-empty dict of token -> id or the path of "
            f"a vocab.json. Received: vocabulary={vocabulary!r:.80}"
        )
    ids = sorted(vocabulary.values()) if _all_ints(vocabulary.values()) else None
    if ids != list(range(len(vocabulary))) or not _all_strings(vocabulary):
        raise ValueError(
            "`vocabulary` must map string tokens to the ids 0..N-1, each once. "
            f"Received: vocabulary={checks.preview(vocabulary.items())}"
        )
    return dict(vocabulary)


def read_merges(merges):
    """`merges.txt` as a list of `(left, right)` pairs, the first rank 0."""

    def lines(f):
        return [line.rstrip("\r\n") for line in f]

    merges = _read(merges, "merges", lines)
    if isinstance(merges, str | bytes) or not hasattr(merges, "__iter__"):
        raise ValueError(
            "`merges` must be a list of 'left right' strings or the path of a "
            f"merges.txt. Received: merges={merges!r:.80}"
        )
    pairs = []
    for number, line in enumerate(merges, 1):
        if isinstance(line, tuple | list) and len(line) == 2:
            line = " ".join(line)
        if not isinstance(line, str):
            raise ValueError(
                f"`merges` line {number} is not a string: {line!r}. "
                f"Received: merges[{number - 1}]={line!r}"
            )
        if (number == 1 and line.startswith("#version")) or not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(
                f"`merges` line {number} must be two tokens separated by one "
                f"space. Received: {line!r}"
            )
        pairs.append(tuple(parts))
    return pairs


def _all_ints(values):
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _all_strings(values):
    return all(isinstance(v, str) for v in values)


@keras.saving.register_keras_serializable(package="keras_transformer")
class BytePairTokenizer(ChatTemplateMixin, Tokenizer):
    """Byte-level BPE (GPT-2's `vocab.json` + `merges.txt`, or a Qwen2 /
    Llama-3 `tokenizer.json`) as a Keras layer.

    Gives the ids of Hugging Face's `GPT2Tokenizer` plus one (id 0 is
    padding here): words are split as GPT-2 splits them (contractions,
    letters, numbers, other symbols, each with one leading space; runs of
    whitespace), and each word's UTF-8 bytes are merged by rank. Any text
    has ids (there is no unknown token), and `detokenize` gives back exactly
    the text that was tokenized. Special tokens written in the text
    (`"<|endoftext|>"`) are split like any text, so input cannot forge
    them; their ids come from `token_to_id`. With `split_pattern`,
    `normalization`, `added_tokens` and `ignore_merges` (what
    `kt.text.tokenizer_from_pretrained` reads from a Qwen2 or Llama-3
    folder) it gives that folder's ids plus one, its added tokens matched
    whole as transformers matches them. Runs in-graph: in
    `tf.data.Dataset.map`, in `tf.function` and in SavedModels.

    Args:
        vocabulary: a dict token -> id (ids 0..N-1), or the path of a GPT-2
            `vocab.json`. Bytes it has no single-byte token for are
            dropped from the text, as Hugging Face's tokenizers drop them.
        merges: a list of `"left right"` strings (rank order), or the path
            of a `merges.txt`.
        sequence_length: if set, outputs are padded with 0 or truncated to
            this length; otherwise batches give ragged ids.
        split_pattern: how text is cut into words: None for GPT-2's
            pattern, or `"qwen2"` / `"llama3"` for the regexes of those
            `tokenizer.json` files (`kt.text.pretokenizers.PATTERNS`).
        normalization: None, or a Unicode form (`"NFC"`, as Qwen2's
            normalizer) applied to text before it is cut into words.
        added_tokens: tokens of the vocabulary matched as whole tokens
            before anything else, as Hugging Face matches a folder's added
            tokens (`"<|im_end|>"` in the text gives that token's id).
            None (the default): they are split like any text.
        ignore_merges: a word that is a token of the vocabulary is that
            token, without merging (Llama-3's `ignore_merges`).
        chat_template: the Jinja template of `apply_chat_template`, or None.
        special_tokens_map: the special tokens the template sees by name
            (`{"eos_token": "<|im_end|>"}`).
        **kwargs: `bos_token`, `eos_token`, `special_tokens` (see
            `kt.text.Tokenizer`) and base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: a string or a rank-1 batch of strings.

    Returns:
        int32 ids: `(B, None)` ragged, `(B, sequence_length)` dense, or `(T,)`
        for a single string.

    Examples:
        >>> import keras_transformer as kt
        >>> characters = kt.text.bytes_to_unicode()
        >>> vocabulary = {c: i for i, c in enumerate(characters.values())}
        >>> vocabulary.update({"Ġc": 256, "at": 257, "Ġcat": 258})
        >>> tokenizer = kt.text.BytePairTokenizer(
        ...     vocabulary, ["Ġ c", "a t", "Ġc at"])
        >>> ids = tokenizer("a cat")
        >>> ids.numpy().tolist()  # "a", " cat": their ids 97 and 258, plus 1
        [98, 259]
        >>> tokenizer.detokenize(ids).numpy().decode()
        'a cat'

    References:
        Sennrich et al., "Neural Machine Translation of Rare Words with
        Subword Units", 2016. Radford et al., "Language Models are
        Unsupervised Multitask Learners", 2019.
    """

    def __init__(
        self,
        vocabulary,
        merges,
        sequence_length=None,
        split_pattern=None,
        normalization=None,
        added_tokens=None,
        ignore_merges=False,
        chat_template=None,
        special_tokens_map=None,
        **kwargs,
    ):
        super().__init__(sequence_length=sequence_length, **kwargs)
        if split_pattern is not None and split_pattern not in pretokenizers.PATTERNS:
            raise ValueError(
                "`split_pattern` must be None (GPT-2's) or one of "
                f"{sorted(pretokenizers.PATTERNS)}. Received: "
                f"split_pattern={split_pattern!r}"
            )
        if normalization is not None and normalization not in pretokenizers.NORMALIZERS:
            raise ValueError(
                f"`normalization` must be None or one of {pretokenizers.NORMALIZERS}. "
                f"Received: normalization={normalization!r}"
            )
        self.split_pattern = split_pattern
        self.normalization = normalization
        self.ignore_merges = bool(ignore_merges)
        self.chat_template, self.special_tokens_map = check_chat_template(
            chat_template, special_tokens_map
        )
        vocabulary = read_vocabulary(vocabulary)
        pairs = read_merges(merges)
        tokens = sorted(vocabulary, key=vocabulary.get)
        self._set_vocabulary([checks.PAD, *tokens])  # our id = their id + 1
        self._merges = [" ".join(pair) for pair in pairs]
        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        # A byte the vocabulary lacks (real vocabularies trained without the
        # whole byte alphabet lack some, SmolLM2's 21) has id 0: it is
        # dropped before merging, as Hugging Face's BPE without an unknown
        # token drops a character it has no token for.
        byte_ids = [self._token_to_id.get(c, 0) for c in bytes_to_unicode().values()]
        # A token's bytes; a token that is not byte-level text (an added
        # special token) stands for its own UTF-8 text.
        token_bytes = [b""] + [
            bytes(to_byte[c] for c in t) if all(c in to_byte for c in t) else t.encode()
            for t in tokens
        ]
        size = len(self._vocabulary)
        # Pair key (left id * size + right id) -> rank * size + merged id:
        # one hash look-up gives both. A pair listed twice keeps its first rank.
        table = {}
        for rank, (left, right) in enumerate(pairs):
            for token in (left, right, left + right):
                if token not in self._token_to_id:
                    raise ValueError(
                        f"`merges` has the merge {left!r} {right!r} (rank {rank}), "
                        f"but `vocabulary` lacks the token {token!r}. Received: a "
                        f"vocabulary of {size} tokens without {token!r}"
                    )
            key = self._token_to_id[left] * size + self._token_to_id[right]
            table.setdefault(key, rank * size + self._token_to_id[left + right])
        self._size = size
        table = table or {-1: -1}  # a table cannot be empty; no key is -1
        self._pairs = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(table), tf.int64),
                tf.constant(list(table.values()), tf.int64),
            ),
            default_value=-1,
        )
        self._byte_ids = tf.constant(byte_ids, tf.int64)
        self._token_bytes = tf.constant(token_bytes, tf.string)
        self.added_tokens = list(added_tokens or [])
        for token in self.added_tokens:
            if token not in self._token_to_id:
                raise ValueError(
                    "`added_tokens` must be tokens of the vocabulary. "
                    f"Received: added_tokens={checks.preview(self.added_tokens)}"
                )
        # A word's bytes -> its token: added tokens, and with ignore_merges
        # every token (a word is never an added token's text).
        whole = {}  # the first token of the same bytes wins, as in the table
        for token in self.added_tokens + (tokens if self.ignore_merges else []):
            whole.setdefault(token_bytes[self._token_to_id[token]], token)
        whole = whole or {b"": None}  # a table cannot be empty; no word is ""
        self._whole = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(whole)),
                tf.constant(
                    [self._token_to_id.get(t, -1) for t in whole.values()], tf.int64
                ),
            ),
            default_value=-1,
        )

    def _tokenize(self, strings):
        if not self.added_tokens:
            return self._tokenize_text(strings)
        pieces, added = pretokenizers.split_added(strings, self.added_tokens)
        text = tf.where(added, "", pieces.flat_values)
        ids = self._tokenize_text(text)  # (N, None); none for added pieces
        found = self._whole.lookup(tf.where(added, pieces.flat_values, ""))
        single = tf.RaggedTensor.from_value_rowids(
            tf.cast(found[added], tf.int32),
            tf.where(added)[:, 0],
            nrows=tf.size(added, tf.int64),
        )
        ids = tf.concat([single, ids], axis=1)
        return pieces.with_flat_values(ids).merge_dims(1, 2)

    def _tokenize_text(self, strings):
        strings = pretokenizers.normalize(strings, self.normalization)
        if self.split_pattern is None:
            words = pretokenize(strings)  # (B, None) strings
        else:
            words = pretokenizers.split_words(strings, self.split_pattern)
        unique, index = tf.unique(words.flat_values)
        ids = self._merge(unique)  # (W, None)
        if self.ignore_merges:
            found = self._whole.lookup(unique)  # (W,), -1 where not a token
            whole = found >= 0
            keep = tf.gather(~whole, ids.value_rowids())
            ids = tf.ragged.boolean_mask(ids, ids.with_flat_values(keep))
            single = tf.RaggedTensor.from_value_rowids(
                found[whole], tf.where(whole)[:, 0], nrows=tf.size(unique, tf.int64)
            )
            ids = tf.concat([single, ids], axis=1)
        ids = tf.gather(ids, index)
        ids = words.with_flat_values(ids).merge_dims(1, 2)
        return tf.cast(ids, tf.int32)

    def _merge(self, words):
        """BPE of each word: `(W,)` strings to `(W, None)` int64 ids.

        Each token remembers the offset of its first byte; a word with no
        pair left to merge writes its tokens there in `final` and leaves the
        loop, so each step only works on the words still merging.
        """
        lengths = tf.strings.length(words)  # bytes
        data = tf.io.decode_raw(tf.strings.reduce_join(words), tf.uint8)
        values = tf.gather(self._byte_ids, tf.cast(data, tf.int32))  # (N,)
        byte_rows = tf.repeat(tf.range(tf.size(words)), lengths)  # (N,)
        offsets = tf.range(tf.size(values))
        final = tf.zeros_like(values)  # (N,) by byte offset
        known = values > 0  # bytes the vocabulary lacks are dropped
        values, rows, offsets = values[known], byte_rows[known], offsets[known]

        def body(values, rows, offsets, final):
            # The rank of each adjacent pair within a word, or _NO_RANK.
            query = values[:-1] * self._size + values[1:]  # (n - 1,)
            found = self._pairs.lookup(query)
            known = (found >= 0) & (rows[:-1] == rows[1:])
            rank = tf.where(known, found // self._size, _NO_RANK)
            best = tf.math.unsorted_segment_min(rank, rows[:-1], tf.size(words))
            finished = tf.gather(best, rows) == _NO_RANK  # (n,), whole words
            final = tf.tensor_scatter_nd_update(
                final, offsets[finished][:, None], values[finished]
            )
            match = known & (rank == tf.gather(best, rows[:-1]))
            # Consecutive matches are one pair repeated ("a a a"): merge
            # every other one from the start of the run, as the reference
            # merges them left to right.
            start = match & ~previous(match)
            run = tf.cumsum(tf.cast(start, tf.int32)) - 1
            starts = tf.concat([tf.where(start)[:, 0], [0]], 0)
            offset = tf.range(tf.size(match), dtype=tf.int64)
            offset -= tf.gather(starts, tf.maximum(run, 0))
            chosen = match & (offset % 2 == 0)
            merged = tf.where(chosen, found % self._size, 0)
            values = tf.where(
                tf.concat([chosen, [False]], 0), tf.concat([merged, [0]], 0), values
            )
            keep = ~tf.concat([[False], chosen], 0) & ~finished  # (n,)
            return values[keep], rows[keep], offsets[keep], final

        def cond(values, rows, offsets, final):
            return tf.size(values) > 0

        unknown = tf.TensorShape([None])
        *_, final = tf.while_loop(
            cond,
            body,
            (values, rows, offsets, final),
            shape_invariants=(unknown, unknown, unknown, unknown),
        )
        kept = final > 0  # token ids are >= 1; 0 marks a merged-away byte
        return tf.RaggedTensor.from_value_rowids(
            final[kept],
            tf.cast(byte_rows[kept], tf.int64),
            nrows=tf.size(words, tf.int64),
        )

    def _detokenize(self, ids):
        pieces = tf.gather(self._token_bytes, ids)
        return checks.replace_invalid_utf8(tf.strings.reduce_join(pieces, axis=-1))

    def _unknown_id(self):
        return None  # byte-level: every text has ids; bad ids are dropped

    def emitted_vocabulary_size(self):
        if self.added_tokens:  # text gives every token, special ones too
            return self.vocabulary_size()
        return super().emitted_vocabulary_size()

    def get_merges(self):
        """The merges as `"left right"` strings, in rank order."""
        return list(self._merges)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary": {t: i - 1 for i, t in enumerate(self._vocabulary) if i},
                "merges": self.get_merges(),
            }
        )
        options = {
            "split_pattern": self.split_pattern,
            "normalization": self.normalization,
            "added_tokens": self.added_tokens,
            "ignore_merges": self.ignore_merges,
        }
        config.update({k: v for k, v in options.items() if v})  # GPT-2's: none
        config.update(self._chat_config())
        return config
