"""Character-level tokenization for character language models."""

import collections

import keras
import tensorflow as tf

from keras_transformer.text import checks
from keras_transformer.text.tokenizer import Tokenizer


def build_char_vocabulary(
    data, vocabulary_size=None, reserved_tokens=checks.RESERVED_TOKENS
):
    """The characters of a corpus as a `CharTokenizer` vocabulary.

    Args:
        data: a `tf.data.Dataset` of strings (or of rank-1 batches of
            strings), or any iterable of strings.
        vocabulary_size: if set, keep only the most frequent characters so the
            vocabulary, reserved tokens included, has at most this size (the
            rest become `[UNK]`).
        reserved_tokens: tokens placed first, in order; must start with
            `"[PAD]", "[UNK]"`.

    Returns:
        A list: the reserved tokens, then the characters in code point order.

    Examples:
        >>> import keras_transformer as kt
        >>> kt.text.build_char_vocabulary(["abba", "cab"])[7:]
        ['a', 'b', 'c']
    """
    if vocabulary_size is None:
        reserved_tokens = checks.check_reserved_tokens(reserved_tokens, 2**31 - 1)
    else:
        reserved_tokens = checks.check_reserved_tokens(reserved_tokens, vocabulary_size)
    counts = collections.Counter()
    for texts in checks.text_batches(data):
        for text in texts:
            counts.update(text)
    for token in reserved_tokens:
        counts.pop(token, None)
    if vocabulary_size is not None:
        keep = vocabulary_size - len(reserved_tokens)
        counts = dict(counts.most_common(keep))
    return reserved_tokens + sorted(counts)


@keras.saving.register_keras_serializable(package="keras_transformer")
class CharTokenizer(Tokenizer):
    """One token per Unicode character, as a Keras layer.

    Each character (code point) of the vocabulary is a token; any other
    character is `[UNK]`. Multi-character tokens (the reserved `[CLS]`,
    `[END]` ...) are never produced from text, only placed by id, and
    `detokenize` writes them out. Without `[UNK]` in play, `detokenize`
    inverts `tokenize` exactly. Invalid UTF-8 bytes are replaced by U+FFFD.

    Args:
        vocabulary: a list of tokens or a path to a file with one token a line
            (see `kt.text.build_char_vocabulary`). Token 0 must be `[PAD]`
            and `[UNK]` must be present.
        sequence_length: if set, outputs are padded with 0 or truncated to
            this length; otherwise batches give ragged ids.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: a string or a rank-1 batch of strings.

    Returns:
        int32 ids: `(B, None)` ragged, `(B, sequence_length)` dense, or `(T,)`
        for a single string.

    Examples:
        >>> import keras_transformer as kt
        >>> vocab = kt.text.build_char_vocabulary(["héllo wörld"])
        >>> tokenizer = kt.text.CharTokenizer(vocab)
        >>> ids = tokenizer.tokenize("wörld?")
        >>> ids.numpy().tolist()
        [13, 15, 12, 10, 8, 1]
        >>> tokenizer.detokenize(ids).numpy().decode()
        'wörld[UNK]'
    """

    def __init__(self, vocabulary, sequence_length=None, **kwargs):
        super().__init__(sequence_length=sequence_length, **kwargs)
        tokens = checks.read_vocabulary(vocabulary)
        checks.check_vocabulary(tokens)
        self._set_vocabulary(tokens)
        self._tokens = tf.constant(tokens, tf.string)
        self._lookup = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._tokens, tf.range(len(tokens), dtype=tf.int64)
            ),
            default_value=self.token_to_id(checks.UNK),
        )

    def _tokenize(self, strings):
        chars = tf.strings.unicode_split(strings, "UTF-8")  # (B, None) strings
        ids = tf.ragged.map_flat_values(self._lookup.lookup, chars)
        return tf.cast(ids, tf.int32)

    def _detokenize(self, ids):
        return tf.strings.reduce_join(tf.gather(self._tokens, ids), axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary": self.get_vocabulary()})
        return config
