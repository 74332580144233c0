"""Tokenizers of Hugging Face checkpoint folders, in-graph.

BERT-style folders (`vocab.txt` with `tokenizer_config.json`) give a
`WordPieceTokenizer` with the folder's lower-casing. The ids are the
folder's own (BERT vocabularies put `[PAD]` at id 0, as this library does).
"""

import json
import os

from keras_transformer.text.wordpiece import WordPieceTokenizer

VOCABULARY = "vocab.txt"
CONFIG = "tokenizer_config.json"


def tokenizer_from_pretrained(path):
    """The in-graph tokenizer of a Hugging Face checkpoint folder.

    Args:
        path: a folder with a BERT `vocab.txt` (and usually a
            `tokenizer_config.json`, whose `do_lower_case` and
            `strip_accents` are followed; lower-casing defaults to True, as
            in `BertTokenizer`).

    Returns:
        A `kt.text.WordPieceTokenizer` giving the ids `BertTokenizer` gives.

    Examples:
        >>> import tempfile
        >>> import keras_transformer as kt
        >>> folder = tempfile.mkdtemp()
        >>> tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world"]
        >>> _ = open(f"{folder}/vocab.txt", "w").write("\\n".join(tokens))
        >>> tokenizer = kt.text.tokenizer_from_pretrained(folder)
        >>> tokenizer("Hello World").numpy().tolist()
        [4, 5]
    """
    path = os.fspath(path)
    vocabulary = os.path.join(path, VOCABULARY)
    if not os.path.isfile(vocabulary):
        raise FileNotFoundError(
            f"`path` must be a checkpoint folder with a {VOCABULARY} (only BERT "
            f"WordPiece tokenizers are read so far). Received: path={path!r}"
        )
    config = {}
    if os.path.isfile(os.path.join(path, CONFIG)):
        with open(os.path.join(path, CONFIG), encoding="utf-8") as f:
            config = json.load(f)
    lowercase = config.get("do_lower_case", True)
    strip_accents = config.get("strip_accents")
    if strip_accents is not None and strip_accents != lowercase:
        # tensorflow-text lower-cases and strips accents together.
        raise ValueError(
            "Lower-casing without stripping accents (or the reverse) is not "
            f"supported. Received: do_lower_case={lowercase!r}, "
            f"strip_accents={strip_accents!r} in {path!r}"
        )
    if not config.get("tokenize_chinese_chars", True):
        raise ValueError(
            f"`tokenize_chinese_chars=False` is not supported. Received in {path!r}"
        )
    with open(vocabulary, encoding="utf-8") as f:
        tokens = [line.rstrip("\r\n") for line in f]
    while tokens and not tokens[-1]:
        tokens.pop()
    return WordPieceTokenizer(tokens, lowercase=lowercase)


def check_savable(tokenizer):
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise ValueError(
            "`tokenizer` must be a kt.text.WordPieceTokenizer (the tokenizers "
            f"save_pretrained writes so far). Received: tokenizer={tokenizer!r}"
        )


def save_tokenizer(tokenizer, path):
    """Writes `vocab.txt` and `tokenizer_config.json` into `path`."""
    check_savable(tokenizer)
    with open(os.path.join(path, VOCABULARY), "w", encoding="utf-8") as f:
        f.write("\n".join(tokenizer.get_vocabulary()) + "\n")
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": tokenizer.lowercase,
        "strip_accents": None,
        "tokenize_chinese_chars": True,
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    with open(os.path.join(path, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
