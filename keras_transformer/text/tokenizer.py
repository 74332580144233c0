"""The base of the tokenizers: strings in, int32 ids out, [PAD] = 0.

Shape legend: B batch, T tokens.
"""

import re

import keras
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text import checks

# transformers' `clean_up_tokenization`, replaced in this order.
CLEAN_UP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


class Tokenizer(keras.layers.Layer):
    """Base class of the tokenizer layers.

    A subclass sets `self._vocabulary` (a list of tokens, `[PAD]` first) and
    implements `_tokenize(strings)` (a rank-1 batch of valid UTF-8 strings to
    a `(B, None)` int32 `tf.RaggedTensor`) and `_detokenize(ids)` (a
    `(B, None)` int32 `tf.RaggedTensor` without padding to `(B,)` strings).

    Everything else is shared: input checks, invalid UTF-8 bytes replaced by
    U+FFFD before tokenizing, unbatched inputs, padding and truncation to
    `sequence_length`, and the vocabulary look-ups.

    Args:
        sequence_length: if set, `tokenize` returns dense `(B, sequence_length)`
            ids, truncated or padded with 0; if None, a `tf.RaggedTensor`
            `(B, None)` (a dense `(T,)` tensor for a single string).
        bos_token: a token of the vocabulary put before every sequence, or
            None (BART's `<s>`).
        eos_token: a token put after every sequence, or None (Marian's and
            BART's `</s>`). A sequence truncated to `sequence_length` (or by
            `truncate`) keeps both, as Hugging Face's tokenizers do.
        special_tokens: tokens of the vocabulary that
            `detokenize(..., skip_special_tokens=True)` drops, as Hugging
            Face's `decode(..., skip_special_tokens=True)` does (with
            `bos_token` and `eos_token`).
        clean_up_tokenization_spaces: `detokenize` removes the space before
            `.`, `?`, `!`, `,` and English contractions (`" n't"`), as
            transformers' `decode` does when a folder's
            `tokenizer_config.json` sets this flag.
        **kwargs: base `keras.layers.Layer` arguments.
    """

    def __init__(
        self,
        sequence_length=None,
        bos_token=None,
        eos_token=None,
        special_tokens=None,
        clean_up_tokenization_spaces=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int(
            "sequence_length", sequence_length, allow_none=True
        )
        for name, token in [("bos_token", bos_token), ("eos_token", eos_token)]:
            if token is not None and not isinstance(token, str):
                raise ValueError(
                    f"`{name}` must be a token (a string) or None. "
                    f"Received: {name}={token!r}"
                )
        added = (bos_token is not None) + (eos_token is not None)
        if sequence_length is not None and sequence_length <= added:
            raise ValueError(
                f"`sequence_length` must leave room for a token besides "
                f"bos_token and eos_token. Received: sequence_length={sequence_length}"
            )
        self.sequence_length = sequence_length
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.special_tokens = list(special_tokens or [])
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self._vocabulary = []
        self._token_to_id = {}

    def _set_vocabulary(self, tokens):
        self._vocabulary = list(tokens)
        self._token_to_id = {token: i for i, token in enumerate(tokens)}
        for name, token in [
            ("bos_token", self.bos_token),
            ("eos_token", self.eos_token),
            *(("special_tokens", t) for t in self.special_tokens),
        ]:
            if token is not None and token not in self._token_to_id:
                raise ValueError(
                    f"`{name}` must be a token of the vocabulary. "
                    f"Received: {name}={token!r}"
                )

    def _added_ids(self):
        """`(bos id or None, eos id or None)`."""
        return tuple(
            None if t is None else self._token_to_id[t]
            for t in (self.bos_token, self.eos_token)
        )

    def truncate(self, ids, length):
        """Ragged ids `(B, None)` from `tokenize` cut to at most `length`
        tokens, keeping `eos_token` at the end (and `bos_token` first)."""
        bos, eos = self._added_ids()
        if eos is None:
            return ids[:, :length]
        body = ids[:, :-1][:, : length - 1]  # without its eos, cut
        ends = tf.fill([body.nrows(), 1], tf.constant(eos, ids.dtype))
        return tf.concat([body, ends], axis=1)

    def _with_added(self, ids):
        """Puts `bos_token` and `eos_token` around each row of `ids`."""
        bos, eos = self._added_ids()
        rows = ids.nrows()
        parts = [ids]
        if bos is not None:
            parts.insert(0, tf.fill([rows, 1], tf.constant(bos, ids.dtype)))
        if eos is not None:
            parts.append(tf.fill([rows, 1], tf.constant(eos, ids.dtype)))
        return ids if len(parts) == 1 else tf.concat(parts, axis=1)

    def __call__(self, inputs, *args, **kwargs):
        # Keras reads a Python list as several inputs; here it is one batch.
        if isinstance(inputs, str | bytes | list | tuple):
            inputs = checks.as_strings(inputs)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs):
        return self.tokenize(inputs)

    def tokenize(self, inputs):
        """Strings to int32 token ids.

        Args:
            inputs: a string, or a rank-1 batch of strings (a list, numpy
                array or `tf.Tensor`). Invalid UTF-8 bytes are replaced by
                U+FFFD before tokenizing.

        Returns:
            For a batch: a `(B, None)` int32 `tf.RaggedTensor`, or dense
            `(B, sequence_length)` ids when `sequence_length` is set. For a
            single string: a dense `(T,)` or `(sequence_length,)` tensor.
        """
        strings = checks.as_strings(inputs)
        batch = checks.replace_invalid_utf8(tf.reshape(strings, [-1]))
        ids = self._tokenize(batch)  # (B, None)
        added = sum(i is not None for i in self._added_ids())
        if self.sequence_length is not None and added:
            ids = ids[:, : self.sequence_length - added]  # room for bos and eos
        ids = self._with_added(ids)
        if self.sequence_length is not None:
            ids = ids.to_tensor(shape=[None, self.sequence_length])  # pads 0
        if strings.shape.rank == 0:
            ids = ids[0]
        return ids

    def detokenize(self, inputs, skip_special_tokens=False):
        """Token ids back to strings, dropping padding (id 0).

        Ids outside the vocabulary decode as `[UNK]` (byte-level tokenizers,
        which have none, and T5's drop them, as transformers' fast
        tokenizers do). Special tokens are written out unless
        `skip_special_tokens`, as transformers' `decode` writes them.

        Args:
            inputs: int ids `(T,)`, or a batch `(B, T)` as a dense tensor,
                a `tf.RaggedTensor` or a list of lists.
            skip_special_tokens: drop `bos_token`, `eos_token` and
                `special_tokens` (transformers' argument of that name; its
                default, False, keeps them).

        Returns:
            A string scalar for `(T,)` ids, else a `(B,)` string tensor.
        """
        batch, rank = self.ragged_ids(inputs)
        batch = tf.ragged.boolean_mask(batch, tf.not_equal(batch, 0))
        dropped = [i for i in self._added_ids() if i is not None] + [
            self._token_to_id[t] for t in self.special_tokens
        ]
        if dropped and skip_special_tokens:
            keep = tf.reduce_all(batch.flat_values[:, None] != dropped, axis=1)
            batch = tf.ragged.boolean_mask(batch, batch.with_flat_values(keep))
        unknown, size = self._unknown_id(), self.vocabulary_size()
        if unknown is None:
            batch = tf.ragged.boolean_mask(batch, (batch > 0) & (batch < size))
        else:
            batch = tf.ragged.map_flat_values(
                lambda v: tf.where((v < 0) | (v >= size), unknown, v), batch
            )
        text = self._detokenize(batch)  # (B,)
        if self.clean_up_tokenization_spaces:
            for before, after in CLEAN_UP:
                text = tf.strings.regex_replace(text, re.escape(before), after)
        return text[0] if rank == 1 else text

    @staticmethod
    def ragged_ids(inputs):
        """`(ids as an int32 (B, None) tf.RaggedTensor, the inputs' rank)` of
        `detokenize`'s `inputs`: `(T,)` or `(B, T)` ids, dense, ragged or
        a list of lists (checked)."""
        ids = inputs
        if isinstance(ids, list | tuple):
            ids = tf.ragged.constant(ids, dtype=tf.int32)
        ids = checks.as_token_ids(ids)
        rank = ids.shape.rank
        batch = tf.cast(ids if rank == 2 else ids[None], tf.int32)
        if not isinstance(batch, tf.RaggedTensor):
            batch = tf.RaggedTensor.from_tensor(batch)
        return batch, rank

    def _unknown_id(self):
        """The id that ids outside the vocabulary decode as; None drops them."""
        return self._token_to_id[checks.UNK]

    def vocabulary_size(self):
        """The number of token ids."""
        return len(self._vocabulary)

    def emitted_vocabulary_size(self):
        """One more than the largest id `tokenize` can give: the
        `special_tokens` (which text never becomes) do not count, so a
        checkpoint's vocabulary may lack them (bart-large-cnn's `<mask>`)."""
        special = {self._token_to_id[t] for t in self.special_tokens}
        return 1 + max(
            (i for i in range(len(self._vocabulary)) if i not in special), default=-1
        )

    def get_vocabulary(self):
        """The tokens as a list; token `i` has id `i`."""
        return list(self._vocabulary)

    def id_to_token(self, id):
        """The token of an integer id."""
        # Not `validation.check_token_id`: padding (0) has a token here.
        if not validation.is_int(id) or not 0 <= id < self.vocabulary_size():
            raise ValueError(
                f"`id` must be an integer in [0, {self.vocabulary_size()}). "
                f"Received: id={id!r}"
            )
        return self._vocabulary[int(id)]

    def token_to_id(self, token):
        """The id of a token of the vocabulary."""
        if token not in self._token_to_id:
            raise ValueError(
                f"`token` is not in the vocabulary. Received: token={token!r}"
            )
        return self._token_to_id[token]

    def reserved_token_ids(self):
        """Sorted ids of the reserved tokens (`[PAD]`, `[CLS]` ...) present."""
        return sorted(
            self._token_to_id[t]
            for t in checks.RESERVED_TOKENS
            if t in self._token_to_id
        )

    def get_config(self):
        config = super().get_config()
        config.update({"sequence_length": self.sequence_length})
        for name in ("bos_token", "eos_token"):
            if getattr(self, name) is not None:
                config[name] = getattr(self, name)
        if self.special_tokens:
            config["special_tokens"] = list(self.special_tokens)
        if self.clean_up_tokenization_spaces:
            config["clean_up_tokenization_spaces"] = True
        return config

    def compute_output_spec(self, inputs):
        # Ragged outputs (no sequence_length) have a None last dimension.
        return keras.KerasTensor((*inputs.shape, self.sequence_length), dtype="int32")
