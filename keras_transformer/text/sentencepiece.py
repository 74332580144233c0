"""SentencePiece tokenization on tensorflow-text, and training a model proto."""

import base64
import io
import json
import os

import keras
import tensorflow as tf

from keras_transformer.text import checks
from keras_transformer.text._lazy import tf_text
from keras_transformer.text.sentencepiece_model import read_proto
from keras_transformer.text.tokenizer import Tokenizer

# Piece 0 must be padding: ours, or the name other SentencePiece models use.
PAD_PIECES = (checks.PAD, "<pad>")
BYTE_PIECES = 256
MARIAN_UNK = "<unk>"


def train_sentencepiece(
    data,
    vocabulary_size,
    model_type="unigram",
    reserved_tokens=checks.RESERVED_TOKENS,
    byte_fallback=True,
    **trainer_options,
):
    """Trains a SentencePiece model with our reserved ids.

    Needs the optional `sentencepiece` package:
    `pip install "keras-transformer[sentencepiece]"`.

    The reserved tokens keep their order as the first ids: `[PAD]` is the
    padding piece (id 0), `[UNK]` the unknown piece, `[START]`/`[END]` (if
    reserved) the begin/end-of-sentence pieces, and the others control
    symbols, which text can never produce.

    Args:
        data: a `tf.data.Dataset` of strings (or of rank-1 batches of
            strings), or any iterable of strings; one sentence each.
        vocabulary_size: the largest vocabulary, reserved tokens (and the 256
            byte pieces with `byte_fallback`) included. A small corpus may
            give fewer pieces.
        model_type: `"unigram"`, `"bpe"`, `"char"` or `"word"`.
        reserved_tokens: must start with `"[PAD]", "[UNK]"`.
        byte_fallback: spell characters outside the vocabulary as UTF-8 byte
            pieces instead of `[UNK]`, so every text round-trips.
        **trainer_options: more `sentencepiece.SentencePieceTrainer.train`
            options. By default SentencePiece applies NFKC, squeezes runs of
            spaces and drops a leading space; `normalization_rule_name=
            "identity"`, `remove_extra_whitespaces=False` and
            `add_dummy_prefix=False` make `detokenize` give back exactly the
            text that was tokenized.

    Returns:
        The serialized model proto (`bytes`) for `SentencePieceTokenizer`.

    Examples:
        >>> import keras_transformer as kt
        >>> corpus = ["the cat sat on the mat", "the dog sat on the log"] * 50
        >>> proto = kt.text.train_sentencepiece(corpus, 300)
        >>> tokenizer = kt.text.SentencePieceTokenizer(proto)
        >>> tokenizer.get_vocabulary()[:7]
        ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '[START]', '[END]']
        >>> tokenizer.detokenize(tokenizer.tokenize("the cat 🐈")).numpy().decode()
        'the cat 🐈'
    """
    try:
        import sentencepiece
    except ImportError as error:
        raise ImportError(
            "`train_sentencepiece` needs the `sentencepiece` package: "
            'pip install "keras-transformer[sentencepiece]"'
        ) from error
    reserved_tokens = checks.check_reserved_tokens(reserved_tokens, vocabulary_size)
    if byte_fallback and vocabulary_size <= len(reserved_tokens) + BYTE_PIECES:
        raise ValueError(
            "`vocabulary_size` must be larger than the "
            f"{len(reserved_tokens)} reserved tokens plus {BYTE_PIECES} byte "
            "pieces with byte_fallback=True. "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    if model_type not in ("unigram", "bpe", "char", "word"):
        raise ValueError(
            '`model_type` must be one of ["unigram", "bpe", "char", "word"]. '
            f"Received: model_type={model_type!r}"
        )
    sentences = [text for texts in checks.text_batches(data) for text in texts]
    if not any(text.strip() for text in sentences):
        raise ValueError(
            "`data` has no text: the corpus is empty. Received: "
            f"{len(sentences)} blank text(s) in data={data!r:.80}"
        )

    def reserved_id(token):
        return reserved_tokens.index(token) if token in reserved_tokens else -1

    options = dict(
        vocab_size=vocabulary_size,
        model_type=model_type,
        pad_id=0,
        pad_piece=checks.PAD,
        unk_id=1,
        unk_piece=checks.UNK,
        bos_id=reserved_id(checks.START),
        bos_piece=checks.START,
        eos_id=reserved_id(checks.END),
        eos_piece=checks.END,
        control_symbols=[
            t for t in reserved_tokens[2:] if t not in (checks.START, checks.END)
        ],
        byte_fallback=byte_fallback,
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    options.update(trainer_options)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, **options
    )
    return model.getvalue()


def open_sentencepiece(proto, model=None):
    """tf-text's `SentencepieceTokenizer` (int32 ids) of `model` (by default
    `proto`, bytes), its pieces as strings in id order, and the id it gives
    an unknown piece; a ValueError naming `proto` if tf-text cannot read
    it."""
    try:
        tokenizer = tf_text.SentencepieceTokenizer(
            model=proto if model is None else model, out_type=tf.int32
        )
        size = int(tokenizer.vocab_size())
        pieces = tokenizer.id_to_string(tf.range(size)).numpy()
        unknown = int(tokenizer.string_to_id(""))
    except tf.errors.OpError as error:
        raise ValueError(
            f"`proto` is not a valid SentencePiece model. Received: proto={proto!r:.80}"
        ) from error
    return tokenizer, [p.decode("utf-8") for p in pieces], unknown


@keras.saving.register_keras_serializable(package="keras_transformer")
class SentencePieceTokenizer(Tokenizer):
    """SentencePiece tokenization from a model proto, as a Keras layer.

    Runs in-graph on tensorflow-text's `SentencepieceTokenizer`; the
    `sentencepiece` package is only needed to train a proto
    (`kt.text.train_sentencepiece`). The proto is stored in `get_config`, so
    `.keras` files carry it. Invalid UTF-8 bytes are replaced by U+FFFD.

    With a `vocabulary` (Marian's `vocab.json`), the proto only cuts the
    text into pieces and the ids come from the vocabulary, plus one (id 0
    is padding here): the pieces Hugging Face's `MarianTokenizer` finds, a
    piece outside the vocabulary as `<unk>`. `detokenize` then joins the
    pieces and turns `▁` into spaces, as `MarianTokenizer.decode` does.

    Args:
        proto: a serialized SentencePiece model (`bytes`) or the path of a
            `.model` file. Without `vocabulary`, piece 0 must be padding
            (`[PAD]` or `<pad>`).
        sequence_length: if set, outputs are padded with 0 or truncated to
            this length; otherwise batches give ragged ids.
        vocabulary: optionally a dict piece -> id (ids 0..N-1), or the path
            of a `vocab.json`, holding `<unk>`.
        **kwargs: `bos_token`, `eos_token`, `special_tokens` (see
            `kt.text.Tokenizer`) and base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: a string or a rank-1 batch of strings.

    Returns:
        int32 ids: `(B, None)` ragged, `(B, sequence_length)` dense, or `(T,)`
        for a single string.

    Examples:
        >>> import keras_transformer as kt
        >>> proto = kt.text.train_sentencepiece(["a b c", "b c a"] * 10, 270)
        >>> tokenizer = kt.text.SentencePieceTokenizer(proto, sequence_length=8)
        >>> tokenizer.detokenize(tokenizer(["c b a"])).numpy()
        array([b'c b a'], dtype=object)
    """

    def __init__(self, proto, sequence_length=None, vocabulary=None, **kwargs):
        super().__init__(sequence_length=sequence_length, **kwargs)
        self.proto = proto = read_proto(proto)
        self._sentencepiece, tokens, _ = open_sentencepiece(proto)
        if vocabulary is not None:
            self._set_piece_vocabulary(vocabulary)
            return
        self.piece_vocabulary = None
        if tokens[0] not in PAD_PIECES:
            raise ValueError(
                f"`proto` must have padding as piece 0 ({' or '.join(PAD_PIECES)}). "
                f"Received: a model whose pieces are {checks.preview(tokens)}"
            )
        self._set_vocabulary(tokens)
        if checks.UNK not in self._token_to_id:
            # Other models call it <unk>; detokenize maps bad ids to it.
            self._token_to_id[checks.UNK] = int(self._sentencepiece.string_to_id(""))

    def _set_piece_vocabulary(self, vocabulary):
        if isinstance(vocabulary, str | os.PathLike):
            path = os.fspath(vocabulary)
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"Vocabulary file not found: {path!r}. "
                    f"Received: vocabulary={path!r}"
                )
            try:
                with open(path, encoding="utf-8") as f:
                    vocabulary = json.load(f)
            except (ValueError, UnicodeDecodeError) as error:
                raise ValueError(
                    f"{path!r} is not valid JSON: {error}. "
                    f"Received: vocabulary={path!r}"
                ) from None
        if isinstance(vocabulary, list | tuple):  # tokens in id order
            vocabulary = {t: i for i, t in enumerate(vocabulary)}
        if (
            not isinstance(vocabulary, dict)
            or sorted(vocabulary.values()) != list(range(len(vocabulary)))
            or not all(isinstance(t, str) for t in vocabulary)
        ):
            raise ValueError(
                "`vocabulary` must map pieces to the ids 0..N-1. Received: "
                f"vocabulary={checks.preview(vocabulary or [])}"
            )
        if MARIAN_UNK not in vocabulary:
            raise ValueError(
                f"`vocabulary` must hold {MARIAN_UNK!r}. "
                f"Received: vocabulary={checks.preview(vocabulary)}"
            )
        tokens = sorted(vocabulary, key=vocabulary.get)
        self.piece_vocabulary = tokens
        self._set_vocabulary([checks.PAD, *tokens])  # our id = their id + 1
        self._pieces = tf_text.SentencepieceTokenizer(
            model=self.proto, out_type=tf.string
        )
        self._piece_ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(tokens), tf.range(1, len(tokens) + 1, dtype=tf.int32)
            ),
            default_value=self._token_to_id[MARIAN_UNK],
        )
        self._id_pieces = tf.constant(["", *tokens])

    def _tokenize(self, strings):
        if self.piece_vocabulary is None:
            return self._sentencepiece.tokenize(strings)
        pieces = self._pieces.tokenize(strings)  # (B, None) strings
        return tf.ragged.map_flat_values(self._piece_ids.lookup, pieces)

    def _detokenize(self, ids):
        if self.piece_vocabulary is None:
            return self._sentencepiece.detokenize(ids)
        pieces = tf.ragged.map_flat_values(tf.gather, self._id_pieces, ids)
        text = tf.strings.reduce_join(pieces, axis=-1)
        return tf.strings.strip(tf.strings.regex_replace(text, "\u2581", " "))

    def _unknown_id(self):
        if self.piece_vocabulary is None:
            return super()._unknown_id()
        return self._token_to_id[MARIAN_UNK]

    def get_config(self):
        config = super().get_config()
        config.update({"proto": base64.b64encode(self.proto).decode("ascii")})
        if self.piece_vocabulary is not None:
            config["vocabulary"] = list(self.piece_vocabulary)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["proto"] = base64.b64decode(config["proto"])
        return cls(**config)
