"""Tokenizers of Hugging Face checkpoint folders, in-graph.

BERT-style folders (`vocab.txt` with `tokenizer_config.json`) give a
`WordPieceTokenizer` with the folder's lower-casing. The ids are the
folder's own (BERT vocabularies put `[PAD]` at id 0, as this library does).
GPT-2-style folders (`vocab.json` + `merges.txt`) give a
`BytePairTokenizer`, whose ids are the folder's plus one (id 0 is padding
here; GPT-2 has none). Either kind may come as a `tokenizer.json` instead,
which is what recent `transformers` versions write.
"""

import json
import os

from keras_transformer.text.bpe import BytePairTokenizer
from keras_transformer.text.wordpiece import WordPieceTokenizer

VOCABULARY = "vocab.txt"
BPE_VOCABULARY = "vocab.json"
MERGES = "merges.txt"
CONFIG = "tokenizer_config.json"
TOKENIZER = "tokenizer.json"
END = "<|endoftext|>"


def tokenizer_from_pretrained(path):
    """The in-graph tokenizer of a Hugging Face checkpoint folder.

    Args:
        path: a folder with a BERT `vocab.txt` (and usually a
            `tokenizer_config.json`, whose `do_lower_case` and
            `strip_accents` are followed; lower-casing defaults to True, as
            in `BertTokenizer`), a GPT-2 `vocab.json` and `merges.txt`, or a
            WordPiece or byte-level BPE `tokenizer.json` (what recent
            `transformers` versions write).

    Returns:
        A `kt.text.WordPieceTokenizer` giving the ids `BertTokenizer` gives,
        or a `kt.text.BytePairTokenizer` giving `GPT2Tokenizer`'s ids plus
        one.

    Raises:
        FileNotFoundError: `path` has none of these files.
        ValueError: a file is malformed, or asks for what we do not compute.

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
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"`path` must be a checkpoint folder. Received: path={path!r}"
        )
    config = _read_json(os.path.join(path, CONFIG)) or {}
    if os.path.isfile(os.path.join(path, BPE_VOCABULARY)) and os.path.isfile(
        os.path.join(path, MERGES)
    ):
        return BytePairTokenizer(
            os.path.join(path, BPE_VOCABULARY), os.path.join(path, MERGES)
        )
    if os.path.isfile(os.path.join(path, VOCABULARY)):
        with open(os.path.join(path, VOCABULARY), encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
        while tokens and not tokens[-1]:
            tokens.pop()
        lowercase = config.get("do_lower_case", True)
        strip_accents = config.get("strip_accents")
        chinese = config.get("tokenize_chinese_chars", True)
    else:
        data = _tokenizer_json(path)
        if (data.get("model") or {}).get("type") == "BPE":
            return _bpe_from_tokenizer_json(data, path)
        tokens, lowercase, strip_accents, chinese = _from_tokenizer_json(data, path)
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
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path!r} is not valid JSON: {error}") from None


def _tokenizer_json(path):
    data = _read_json(os.path.join(path, TOKENIZER))
    if data is None:
        raise FileNotFoundError(
            f"`path` must be a checkpoint folder with a {VOCABULARY}, a "
            f"{BPE_VOCABULARY} and {MERGES}, or a {TOKENIZER}. "
            f"Received: path={path!r}"
        )
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") not in ("WordPiece", "BPE"):
        raise ValueError(
            f"{os.path.join(path, TOKENIZER)!r}: only WordPiece and byte-level BPE "
            "tokenizers are read. Received: model type "
            f"{(model or {}).get('type') if isinstance(model, dict) else model!r}"
        )
    return data


def _bpe_from_tokenizer_json(data, path):
    """A `BytePairTokenizer` from a byte-level BPE `tokenizer.json`."""
    model, file = data["model"], os.path.join(path, TOKENIZER)
    pre = data.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space"):
        raise ValueError(
            f"{file!r}: only GPT-2's byte-level pre-tokenizer without an added "
            f"prefix space is supported. Received: pre_tokenizer={pre!r}"
        )
    if model.get("ignore_merges") or data.get("normalizer"):
        raise ValueError(
            f"{file!r}: `ignore_merges` and normalizers are not supported "
            "(GPT-2 uses neither)."
        )
    vocabulary = dict(model.get("vocab") or {})
    for token in data.get("added_tokens") or []:
        vocabulary.setdefault(token["content"], token["id"])
    return BytePairTokenizer(vocabulary, model.get("merges") or [])


def _from_tokenizer_json(data, path):
    """Vocabulary and normalisation from a WordPiece `tokenizer.json` (what
    recent `transformers` write instead of `vocab.txt`)."""
    model = data["model"]
    vocabulary = model["vocab"]
    tokens = sorted(vocabulary, key=vocabulary.get)
    normalizer = data.get("normalizer") or {}
    return (
        tokens,
        normalizer.get("lowercase", True),
        normalizer.get("strip_accents"),
        normalizer.get("handle_chinese_chars", True),
    )


def check_savable(tokenizer, kind=WordPieceTokenizer | BytePairTokenizer):
    if not isinstance(tokenizer, kind):
        raise ValueError(
            "`tokenizer` must be a kt.text.WordPieceTokenizer (for BERT) or a "
            "kt.text.BytePairTokenizer (for GPT-2). Received: "
            f"tokenizer={tokenizer!r}"
        )


def save_tokenizer(tokenizer, path):
    """Writes the tokenizer's files into `path`: `vocab.txt` and
    `tokenizer_config.json` (WordPiece), or `vocab.json`, `merges.txt` and
    `tokenizer_config.json` (byte-level BPE, ids back to GPT-2's)."""
    check_savable(tokenizer)
    if isinstance(tokenizer, BytePairTokenizer):
        _save_bpe(tokenizer, path)
        return
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


def _save_bpe(tokenizer, path):
    tokens = tokenizer.get_vocabulary()[1:]  # without our padding id 0
    with open(os.path.join(path, BPE_VOCABULARY), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(path, MERGES), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(m + "\n" for m in tokenizer.get_merges()))
    special = END if END in tokens else None
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "add_prefix_space": False,
        "bos_token": special,
        "eos_token": special,
        "unk_token": special,
    }
    with open(os.path.join(path, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
