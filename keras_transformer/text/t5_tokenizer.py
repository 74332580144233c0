"""Hugging Face's `T5Tokenizer` (T5, T5 v1.1, FLAN-T5): a unigram
SentencePiece model and 100 sentinel tokens, in-graph on tensorflow-text.

Shape legend: B batch, N pieces of text in all.
"""

import base64

import keras
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text import checks, pretokenizers
from keras_transformer.text.sentencepiece import open_sentencepiece
from keras_transformer.text.sentencepiece_model import read_proto
from keras_transformer.text.tokenizer import Tokenizer


def sentinel(n):
    """The n-th sentinel token, `<extra_id_n>`."""
    return f"<extra_id_{n}>"


@keras.saving.register_keras_serializable(package="keras_transformer")
class T5Tokenizer(Tokenizer):
    """The ids of Hugging Face's `T5Tokenizer` plus one, as a Keras layer.

    The SentencePiece model (`spiece.model`: pieces, scores and T5's
    `nmt_nfkc` normalization) gives ids `1 .. P`; the `extra_ids` sentinels
    follow, `<extra_id_0>` last (transformers' layout: `<extra_id_99>` is
    the checkpoint's id P). The special tokens (`<pad>`, `</s>`, `<unk>`,
    the sentinels) are matched whole in the text first, as transformers
    matches its added tokens; the text between them is normalized, its
    whitespace runs collapsed and trimmed, and cut into pieces, each word
    after a `"▁"`. `</s>` ends every sequence. `detokenize` joins the pieces
    with `"▁"` read as a space, as transformers' `decode` does: with
    `skip_special_tokens=True` it drops `<unk>` like the other special
    tokens (the spaces around it stay), and ids past the vocabulary (the
    rows a checkpoint pads its vocabulary with, 32100 .. 32127 in T5, which
    a model may emit) are dropped, never written as `<unk>`.

    Args:
        proto: a serialized SentencePiece unigram model (`bytes`) or the
            path of a `spiece.model`: piece 0 is padding (T5's `<pad>`), and
            it has the `eos_token` (T5's `</s>`).
        sequence_length: if set, outputs are padded with 0 or truncated to
            this length (keeping `</s>`); otherwise batches give ragged ids.
        extra_ids: the number of sentinel tokens (100 in every T5).
        **kwargs: `eos_token` (`"</s>"`) and base `keras.layers.Layer`
            arguments.

    Call arguments:
        inputs: a string or a rank-1 batch of strings.

    Returns:
        int32 ids: `(B, None)` ragged, `(B, sequence_length)` dense, or `(T,)`
        for a single string.

    Examples:
        >>> import keras_transformer as kt
        >>> proto = kt.text.train_sentencepiece(
        ...     ["a b c", "b c a"] * 10, 270, model_type="unigram",
        ...     reserved_tokens=["[PAD]", "[UNK]", "</s>"])
        >>> tokenizer = kt.text.T5Tokenizer(proto, extra_ids=2)
        >>> ids = tokenizer("c <extra_id_0> a")
        >>> [tokenizer.id_to_token(int(i)) for i in ids]
        ['▁c', '<extra_id_0>', '▁a', '</s>']
        >>> tokenizer.detokenize(ids, skip_special_tokens=True).numpy().decode()
        'c a'
    """

    def __init__(self, proto, sequence_length=None, extra_ids=100, **kwargs):
        kwargs.setdefault("eos_token", "</s>")
        super().__init__(sequence_length=sequence_length, **kwargs)
        if not validation.is_int(extra_ids) or extra_ids < 0:
            raise ValueError(
                "`extra_ids` must be an integer >= 0. "
                f"Received: extra_ids={extra_ids!r}"
            )
        self.proto = proto = read_proto(proto)
        self.extra_ids = extra_ids
        self._sentencepiece, tokens, unknown = open_sentencepiece(proto)
        if tokens[0] not in ("<pad>", checks.PAD) or self.eos_token not in tokens:
            raise ValueError(
                "`proto` must have padding as piece 0 (<pad>, T5's, or [PAD]) and "
                f"the eos_token {self.eos_token!r}. Received: a model whose pieces "
                f"are {checks.preview(tokens)}"
            )
        sentinels = [sentinel(n) for n in reversed(range(extra_ids))]
        self._set_vocabulary([checks.PAD, *tokens, *sentinels])  # ours = theirs + 1
        self._unknown = unknown + 1
        self.added_tokens = [tokens[0], self.eos_token, tokens[unknown], *sentinels]
        self.special_tokens = list(
            dict.fromkeys(self.special_tokens + self.added_tokens)
        )
        self._added = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.added_tokens),
                tf.constant([self._token_to_id[t] for t in self.added_tokens]),
            ),
            default_value=self._unknown,
        )
        self._pieces = tf.constant(["", *tokens, *sentinels])

    def _tokenize(self, strings):
        pieces, added = pretokenizers.split_added(strings, self.added_tokens)
        text = tf.where(added, "", pieces.flat_values)  # (N,)
        ids = self._sentencepiece.tokenize(text) + 1
        single = tf.RaggedTensor.from_value_rowids(
            self._added.lookup(pieces.flat_values[added]),
            tf.where(added)[:, 0],
            nrows=tf.size(added, tf.int64),
        )
        ids = tf.concat([single, ids], axis=1)  # (N, None)
        return pieces.with_flat_values(ids).merge_dims(1, 2)

    def _detokenize(self, ids):
        text = tf.strings.reduce_join(tf.gather(self._pieces, ids), axis=-1)
        text = tf.strings.regex_replace(text, "\u2581", " ")
        return tf.strings.regex_replace(text, "^ ", "", replace_global=False)

    def _unknown_id(self):
        return None  # transformers' decode drops ids that have no piece

    def emitted_vocabulary_size(self):
        return self.vocabulary_size()  # sentinels come from text too

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "proto": base64.b64encode(self.proto).decode("ascii"),
                "extra_ids": self.extra_ids,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["proto"] = base64.b64decode(config["proto"])
        return cls(**config)
