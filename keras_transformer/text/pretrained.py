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
TOKENIZER = "tokenizer.json"


def tokenizer_from_pretrained(path):
    """The in-graph tokenizer of a Hugging Face checkpoint folder.

    Args:
        path: a folder with a BERT `vocab.txt` (and usually a
            `tokenizer_config.json`, whose `do_lower_case` and
            `strip_accents` are followed; lower-casing defaults to True, as
            in `BertTokenizer`), or with a WordPiece `tokenizer.json` (what
            recent `transformers` versions write).

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
    config = _read_json(os.path.join(path, CONFIG)) or {}
    if os.path.isfile(os.path.join(path, VOCABULARY)):
        with open(os.path.join(path, VOCABULARY), encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
        while tokens and not tokens[-1]:
            tokens.pop()
        lowercase = config.get("do_lower_case", True)
        strip_accents = config.get("strip_accents")
        chinese = config.get("tokenize_chinese_chars", True)
    else:
        tokens, lowercase, strip_accents, chinese = _from_tokenizer_json(path)
    if strip_accents is not None and strip_accents != lowercase:
        # tensorflow-text lower-cases and strips accents together.
        raise ValueError(
            "Lower-casing without stripping accents (or the reverse) is not "
            f"supported. Received: do_lower_case={lowercase!r}, "
            f"strip_accents={strip_accents!r} in {path!r}"
        )
    if not chinese:
        raise ValueError(
            f"`tokenize_chinese_chars=False` is not supported. Received in {path!r}"
        )
    return WordPieceTokenizer(tokens, lowercase=lowercase)


def _read_json(path):
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _from_tokenizer_json(path):
    """Vocabulary and normalisation from a `tokenizer.json` (what recent
    `transformers` write instead of `vocab.txt`)."""
    data = _read_json(os.path.join(path, TOKENIZER))
    if data is None:
        raise FileNotFoundError(
            f"`path` must be a checkpoint folder with a {VOCABULARY} or a "
            f"{TOKENIZER} (only BERT WordPiece tokenizers are read so far). "
            f"Received: path={path!r}"
        )
    model = data.get("model") or {}
    if model.get("type") != "WordPiece":
        raise ValueError(
            f"{os.path.join(path, TOKENIZER)!r}: only WordPiece tokenizers are read "
            f"so far. Received: model type {model.get('type')!r}"
        )
    vocabulary = model["vocab"]
    tokens = sorted(vocabulary, key=vocabulary.get)
    normalizer = data.get("normalizer") or {}
    return (
        tokens,
        normalizer.get("lowercase", True),
        normalizer.get("strip_accents"),
        normalizer.get("handle_chinese_chars", True),
    )


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
