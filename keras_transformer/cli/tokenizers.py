"""The tokenizers of `train`: learned from the training text, and kept in
the work folder as `tokenizer.json` (a Keras-serialized `kt.text` object)."""

import json

import keras

from keras_transformer import text
from keras_transformer.cli.errors import CommandError

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]")


def build_tokenizer(kind, texts, vocabulary_size, recipe):
    """A new tokenizer of `kind` learned from `texts` (a list of strings).

    `vocabulary_size` None: every character for `char`, the recipe's
    `subword_vocabulary_size` subwords otherwise; a SentencePiece model
    takes the recipe's `sentencepiece_options`."""
    if kind == "char":
        return text.CharTokenizer(text.build_char_vocabulary(texts, vocabulary_size))
    if vocabulary_size is None:
        vocabulary_size = recipe.subword_vocabulary_size
    if kind == "wordpiece":
        vocabulary = text.build_wordpiece_vocabulary(
            texts, vocabulary_size=vocabulary_size, verbose=0
        )
        return text.WordPieceTokenizer(vocabulary)
    if kind == "bpe":
        vocabulary, merges = text.build_bpe_vocabulary(
            texts, vocabulary_size, special_tokens=SPECIAL_TOKENS, verbose=0
        )
        return text.BytePairTokenizer(vocabulary, merges)
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        raise CommandError(
            "--tokenizer sentencepiece needs the sentencepiece package: "
            'pip install "keras-transformer[cli]" (or choose --tokenizer '
            "char, wordpiece or bpe)"
        ) from None
    proto = text.train_sentencepiece(
        texts, vocabulary_size, **recipe.sentencepiece_options
    )
    return text.SentencePieceTokenizer(proto)


def end_token(tokenizer):
    for token in ("[END]", "<|endoftext|>"):
        if token in tokenizer.get_vocabulary():
            return token
    return None


def save_tokenizer(tokenizer, path):
    with open(path, "w") as f:
        json.dump(keras.saving.serialize_keras_object(tokenizer), f)


def load_tokenizer(path):
    with open(path) as f:
        return keras.saving.deserialize_keras_object(json.load(f))
