"""Hugging Face's `LlamaTokenizer` (Llama-2, TinyLlama, Mistral): a
SentencePiece BPE model with byte fallback, in-graph on tensorflow-text.

Shape legend: B batch, N pieces of text in all.
"""

import base64

import keras
import tensorflow as tf

from keras_transformer.text import checks, pretokenizers
from keras_transformer.text.chat import ChatTemplateMixin, check_chat_template
from keras_transformer.text.sentencepiece import open_sentencepiece
from keras_transformer.text.sentencepiece_model import (
    BYTE_PIECE,
    fields,
    read_proto,
    string_field,
)
from keras_transformer.text.tokenizer import Tokenizer

PREPEND_SCHEMES = ("first", "always", "never", "prepend")


@keras.saving.register_keras_serializable(package="keras_transformer")
class LlamaTokenizer(ChatTemplateMixin, Tokenizer):
    """The ids of Hugging Face's `LlamaTokenizer` plus one, as a Keras layer.

    The folder's added tokens (`<s>`, `</s>`, `<unk>`) are matched whole
    first, as transformers matches them. The text between them becomes
    SentencePiece pieces (tensorflow-text runs the `tokenizer.model`;
    characters outside the vocabulary become byte pieces `<0x..>`), with
    spaces written `"▁"` and a `"▁"` put before the text as Hugging Face's
    Metaspace pre-tokenizer does: before the first piece of text only
    (`prepend_scheme="first"`, `legacy=False` folders), before each piece
    of text (`"always"`, `legacy=True`) or never, and not where the piece
    already starts with a space; or before each piece of text even where it
    does (`"prepend"`: the `Prepend("▁")` normalizer of the `tokenizer.json`
    files that Llama-2 and Mistral repositories carry). `detokenize`
    gives what transformers' `decode` gives (byte pieces that form no
    character are one U+FFFD each, as its ByteFallback decoder writes
    them). Runs in `tf.data`, `tf.function` and SavedModels; the model
    travels in `get_config`.

    Args:
        proto: a serialized SentencePiece model (`bytes`) or the path of a
            `tokenizer.model`. It must not normalize text (Llama's does
            not), which transformers' tokenizer would not do either.
        sequence_length: if set, outputs are padded with 0 or truncated to
            this length; otherwise batches give ragged ids.
        added_tokens: pieces matched whole before anything else.
        prepend_scheme: `"first"`, `"always"`, `"never"` or `"prepend"`
            (see above).
        chat_template: the Jinja template of `apply_chat_template`, or None.
        special_tokens_map: the special tokens the template sees by name.
        **kwargs: `bos_token` (Llama's `"<s>"` goes first), `eos_token`,
            `special_tokens` (see `kt.text.Tokenizer`) and base
            `keras.layers.Layer` arguments.

    Example:

    >>> import keras_transformer as kt
    >>> proto = kt.text.train_sentencepiece(
    ...     ["a b c", "b c a"] * 10, 270, model_type="bpe",
    ...     reserved_tokens=["[PAD]", "[UNK]", "[START]"],
    ...     normalization_rule_name="identity", remove_extra_whitespaces=False)
    >>> tokenizer = kt.text.LlamaTokenizer(
    ...     proto, added_tokens=["[START]"], bos_token="[START]")
    >>> ids = tokenizer("c b a")
    >>> tokenizer.id_to_token(int(ids[0]))
    '[START]'
    >>> tokenizer.detokenize(ids).numpy().decode()
    '[START] c b a'
    >>> tokenizer.detokenize(ids, skip_special_tokens=True).numpy().decode()
    'c b a'
    """

    def __init__(
        self,
        proto,
        sequence_length=None,
        added_tokens=None,
        prepend_scheme="first",
        chat_template=None,
        special_tokens_map=None,
        **kwargs,
    ):
        super().__init__(sequence_length=sequence_length, **kwargs)
        if prepend_scheme not in PREPEND_SCHEMES:
            raise ValueError(
                f"`prepend_scheme` must be one of {PREPEND_SCHEMES}. "
                f"Received: prepend_scheme={prepend_scheme!r}"
            )
        self.prepend_scheme = prepend_scheme
        self.chat_template, self.special_tokens_map = check_chat_template(
            chat_template, special_tokens_map
        )
        self.proto = read_proto(proto)
        self._sentencepiece, tokens, unknown = open_sentencepiece(
            self.proto, _plain(self.proto)
        )
        self._set_vocabulary([checks.PAD, *tokens])  # our id = their id + 1
        self._unknown = unknown + 1
        self.added_tokens = list(added_tokens or [])
        for token in self.added_tokens:
            if token not in self._token_to_id:
                raise ValueError(
                    "`added_tokens` must be pieces of the model. "
                    f"Received: added_tokens={checks.preview(self.added_tokens)}"
                )
        self._added = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.added_tokens or [""]),
                tf.constant([self._token_to_id[t] for t in self.added_tokens] or [0]),
            ),
            default_value=self._unknown,
        )
        self._piece_bytes = tf.constant([b""] + [_bytes(t) for t in tokens])
        self._is_byte = tf.constant(
            [False] + [bool(BYTE_PIECE.fullmatch(t)) for t in tokens]
        )

    def _tokenize(self, strings):
        pieces, added = pretokenizers.split_added(strings, self.added_tokens)
        text = pieces.flat_values  # (N,)
        spaced = tf.strings.regex_full_match(text, "(?s)[ \u2581].*")
        if self.prepend_scheme == "first":
            index = tf.range(tf.size(text, tf.int64))
            first = index == tf.gather(pieces.row_starts(), pieces.value_rowids())
            prepend = first & ~spaced
        elif self.prepend_scheme == "prepend":  # non-empty pieces
            prepend = tf.strings.length(text) > 0
        else:
            prepend = ~spaced & (self.prepend_scheme == "always")
        text = tf.where(prepend, tf.strings.join([" ", text]), text)
        ids = self._sentencepiece.tokenize(tf.where(added, "", text)) + 1
        single = tf.RaggedTensor.from_value_rowids(
            self._added.lookup(pieces.flat_values[added]),
            tf.where(added)[:, 0],
            nrows=tf.size(added, tf.int64),
        )
        ids = tf.concat([single, ids], axis=1)  # (N, None)
        return pieces.with_flat_values(ids).merge_dims(1, 2)

    def _detokenize(self, ids):
        pieces = tf.gather(self._piece_bytes, ids.flat_values)  # (N,)
        # tokenizers' ByteFallback decoder: a run of byte pieces that is not
        # valid UTF-8 becomes one U+FFFD per piece, its valid start too.
        byte = tf.gather(self._is_byte, ids.flat_values)
        rows = ids.value_rowids()
        joins = byte[1:] & byte[:-1] & (rows[1:] == rows[:-1])
        starts = ~tf.concat([tf.zeros_like(byte[:1]), joins], 0)  # (N,), N may be 0
        run = tf.cumsum(tf.cast(starts, tf.int32)) - 1
        runs = tf.strings.unsorted_segment_join(pieces, run, tf.size(pieces))
        bad = tf.gather(checks.replace_invalid_utf8(runs) != runs, run)
        pieces = tf.where(bad, "\ufffd", pieces)
        text = tf.strings.reduce_join(ids.with_flat_values(pieces), axis=-1)
        if self.prepend_scheme != "never":  # transformers' Strip decoder
            text = tf.strings.regex_replace(text, "^ ", "", replace_global=False)
        return text

    def _unknown_id(self):
        return self._unknown

    def emitted_vocabulary_size(self):
        return self.vocabulary_size()  # added tokens come from text too

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "proto": base64.b64encode(self.proto).decode("ascii"),
                "added_tokens": list(self.added_tokens),
                "prepend_scheme": self.prepend_scheme,
            }
        )
        config.update(self._chat_config())
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["proto"] = base64.b64decode(config["proto"])
        return cls(**config)


def _bytes(piece):
    """What a piece decodes to: its byte for `<0x..>`, else its text with
    `"▁"` as a space."""
    match = BYTE_PIECE.fullmatch(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


# The model proto (sentencepiece_model.proto): ModelProto field 3 is the
# NormalizerSpec, whose fields 2, 3 and 4 are precompiled_charsmap,
# add_dummy_prefix and remove_extra_whitespaces.
_NORMALIZER, _CHARSMAP = 3, 2
_PLAIN = bytes([3 << 3, 0, 4 << 3, 0])  # add_dummy_prefix, remove_extra_ws: off


def _plain(proto):
    """`proto` with no dummy prefix and no whitespace squeezing (the
    tokenizer puts the prefix itself, as transformers does), or a
    ValueError if it normalizes text."""
    out, found = [], False  # joined once: `bytes +=` copied the whole
    # proto for each of its pieces (40 s for Gemma 3's 262,144)
    for number, wire, value, raw in fields(proto):
        if number == _NORMALIZER and wire == 2:
            found = True
            charsmap = [v for n, w, v, _ in fields(value) if n == _CHARSMAP]
            if any(charsmap):
                raise ValueError(
                    "`proto` normalizes text (its normalizer has a character "
                    "map, e.g. nmt_nfkc), which transformers' Llama tokenizer "
                    "does not do. Received: a model with a normalization rule"
                )
            value += _PLAIN
            raw = string_field(number, value)
        out.append(raw)
    if not found:
        out.append(string_field(_NORMALIZER, _PLAIN))
    return b"".join(out)
