"""BERT's WordPiece tokenizer, in-graph on tensorflow-text."""

import keras
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text import checks
from keras_transformer.text._lazy import tf_text
from keras_transformer.text.tokenizer import Tokenizer


@keras.saving.register_keras_serializable(package="keras_transformer")
class WordPieceTokenizer(Tokenizer):
    """WordPiece tokenization with BERT's normalisation, as a Keras layer.

    Text is normalised as BERT's `BertTokenizer` does (with `lowercase=True`:
    lower-casing, NFD and accent stripping; control characters become
    spaces), split on
    whitespace, punctuation and each CJK character, and every word is split
    into the longest vocabulary pieces left to right (`"playing"` ->
    `"play", "##ing"`); a word that cannot be split becomes `[UNK]`.
    Runs in-graph (tensorflow-text's `FastBertTokenizer`), so it works in
    `tf.data.Dataset.map`, in `tf.function` and in exported SavedModels.

    Invalid UTF-8 bytes are replaced by U+FFFD, which is `[UNK]` unless the
    vocabulary has it. Reserved tokens written in the text (`"[MASK]"`) are
    split like any text, so input cannot forge them. `detokenize` joins
    pieces into words separated by spaces: it undoes the word splitting, not
    the normalisation (`"Héllo, world!"` -> `"hello , world !"`).

    Args:
        vocabulary: a list of tokens or a path to a BERT `vocab.txt` (one
            token a line). Token 0 must be `[PAD]` and `[UNK]` must be present.
        sequence_length: if set, outputs are padded with 0 or truncated to
            this length; otherwise batches give ragged ids.
        lowercase: BERT "uncased" normalisation (lower-case, strip accents).
            Use False for cased vocabularies.
        suffix_indicator: prefix of pieces that continue a word.
        max_bytes_per_word: longer words become `[UNK]`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: a string or a rank-1 batch of strings.

    Returns:
        int32 ids: `(B, None)` ragged, `(B, sequence_length)` dense, or `(T,)`
        for a single string.

    Examples:
        >>> import keras_transformer as kt
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "play",
        ...          "##ing", ",", "!", "你", "好"]
        >>> tokenizer = kt.text.WordPieceTokenizer(vocab)
        >>> tokenizer.tokenize("Héllo, WORLD! Playing 你好").numpy().tolist()
        [4, 8, 5, 9, 6, 7, 10, 11]
        >>> tokenizer.detokenize([4, 8, 5, 9, 6, 7, 0, 0]).numpy().decode()
        'hello , world ! playing'

    References:
        Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers
        for Language Understanding", 2019. Song et al., "Fast WordPiece
        Tokenization", 2021.
    """

    def __init__(
        self,
        vocabulary,
        sequence_length=None,
        lowercase=True,
        suffix_indicator="##",
        max_bytes_per_word=100,
        **kwargs,
    ):
        super().__init__(sequence_length=sequence_length, **kwargs)
        validation.check_positive_int("max_bytes_per_word", max_bytes_per_word)
        if not isinstance(suffix_indicator, str) or not suffix_indicator:
            raise ValueError(
                "`suffix_indicator` must be a non-empty string. "
                f"Received: suffix_indicator={suffix_indicator!r}"
            )
        tokens = checks.read_vocabulary(vocabulary)
        checks.check_vocabulary(tokens)
        self.lowercase = bool(lowercase)
        self.suffix_indicator = suffix_indicator
        self.max_bytes_per_word = max_bytes_per_word
        self._set_vocabulary(tokens)
        # Built here, outside any graph, so tf.data and tf.function capture
        # the compiled model as a constant.
        try:
            self._wordpiece = tf_text.FastBertTokenizer(
                vocab=tokens,
                suffix_indicator=suffix_indicator,
                max_bytes_per_word=max_bytes_per_word,
                token_out_type=tf.int32,
                unknown_token=checks.UNK,
                support_detokenization=True,
                # Our own normalisation below: tensorflow-text's also folds
                # compatibility forms (full-width "，" -> ","), BERT's does not.
                lower_case_nfd_strip_accents=False,
            )
        except RuntimeError as error:  # e.g. only bracketed special tokens
            raise ValueError(
                f"`vocabulary` has no usable WordPiece token ({error}). "
                f"Received: vocabulary={checks.preview(tokens)}"
            ) from error

    def _tokenize(self, strings):
        if self.lowercase:  # BertTokenizer: lower-case, NFD, drop accents
            strings = tf_text.normalize_utf8(
                tf.strings.lower(strings, encoding="utf-8"), "NFD"
            )
            strings = tf.strings.regex_replace(strings, r"\p{Mn}", "")
        return self._wordpiece.tokenize(strings)  # (B, None) int32

    def _detokenize(self, ids):
        return self._wordpiece.detokenize(ids)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                # The tokens themselves, so a `.keras` file carries them.
                "vocabulary": self.get_vocabulary(),
                "lowercase": self.lowercase,
                "suffix_indicator": self.suffix_indicator,
                "max_bytes_per_word": self.max_bytes_per_word,
            }
        )
        return config
