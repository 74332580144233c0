"""Tokenizers of Hugging Face checkpoint folders, in-graph.

BERT-style folders (`vocab.txt` with `tokenizer_config.json`) give a
`WordPieceTokenizer` with the folder's lower-casing. The ids are the
folder's own (BERT vocabularies put `[PAD]` at id 0, as this library does).
GPT-2-style folders (`vocab.json` + `merges.txt`) give a
`BytePairTokenizer`, whose ids are the folder's plus one (id 0 is padding
here; GPT-2 has none). Either kind may come as a `tokenizer.json` instead,
which is what recent `transformers` versions write; a BPE `tokenizer.json`
beside a `vocab.json` and `merges.txt` defines the tokenizer, its
`added_tokens` included, as transformers' fast tokenizers read it first. Marian folders
(`source.spm`, `target.spm`, `vocab.json`) give a source and a target
`SentencePieceTokenizer` whose ids are `vocab.json`'s plus one; BART
folders a `BytePairTokenizer` that puts `<s>` and `</s>` around each text,
as `BartTokenizer` does, with ids plus one. Folders whose family reads its
tokenizer itself (Llama, Mistral and Qwen2, by `config.json`'s
`model_type`: `hf_llama.py`) are read by the reader in its `Family` record.
"""

import os

from keras_transformer import _gguf
from keras_transformer import _validation as validation
from keras_transformer._validation import read_json
from keras_transformer.text import gguf_tokenizer, hf_llama
from keras_transformer.text.bpe import BytePairTokenizer, read_vocabulary
from keras_transformer.text.sentencepiece import SentencePieceTokenizer
from keras_transformer.text.wordpiece import WordPieceTokenizer

VOCABULARY = "vocab.txt"
BPE_VOCABULARY = "vocab.json"
MERGES = "merges.txt"
CONFIG = "tokenizer_config.json"
TOKENIZER = "tokenizer.json"
ADDED = "added_tokens.json"
END = "<|endoftext|>"
SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
# Hugging Face's special tokens of Marian and BART vocabularies.
MARIAN_SPECIAL = ("</s>", "<unk>", "<pad>")
BART_SPECIAL = ("<s>", "</s>", "<pad>", "<unk>", "<mask>")
BART_CLASSES = ("BartTokenizer", "BartTokenizerFast", "RobertaTokenizer")
# `model_type` -> `reader(path)`: the families' readers of folders read by
# their `model_type`, from their `Family` records (`use_model_type_readers`).
MODEL_TYPE_READERS = {}


def use_model_type_readers(readers):
    """Reads the folders of the `model_type`s in `readers` (`model_type`
    -> `reader(path)`) with those readers; keras_transformer's `__init__.py`
    hands over `pretrained.registry.tokenizer_readers()`."""
    MODEL_TYPE_READERS.update(readers)


@validation.reads_once
def tokenizer_from_pretrained(path):
    """The in-graph tokenizer of a Hugging Face checkpoint folder.

    Args:
        path: a folder with a BERT `vocab.txt` (and usually a
            `tokenizer_config.json`, whose `do_lower_case` and
            `strip_accents` are followed; lower-casing defaults to True, as
            in `BertTokenizer`), a GPT-2 `vocab.json` and `merges.txt`, or a
            WordPiece or byte-level BPE `tokenizer.json` (what recent
            `transformers` versions write); or a Llama, Mistral or Qwen2
            folder (`model_type` in `config.json`); or a `.gguf` file with a
            byte-level BPE tokenizer (`kt.text.gguf_tokenizer`: a
            `BytePairTokenizer` giving the ids transformers' tokenizer of
            the file gives, plus one).

    Returns:
        A `kt.text.WordPieceTokenizer` giving the ids `BertTokenizer` gives,
        or a `kt.text.BytePairTokenizer` giving `GPT2Tokenizer`'s ids plus
        one (for a BART folder, `BartTokenizer`'s plus one, `<s>` and
        `</s>` included); for a Marian folder a `(source, target)` pair of
        `kt.text.SentencePieceTokenizer`, giving `MarianTokenizer`'s ids
        plus one, `</s>` appended (Moses punctuation normalisation, which
        `MarianTokenizer` applies when `sacremoses` is installed, and
        `>>lang<<` codes of multilingual models are not reproduced). None
        truncates: cut ids to the model's length with
        `tokenizer.truncate(ids, model.max_sequence_length)`, which keeps
        `</s>`, as `truncation=True` does. A Llama / Mistral folder with a
        `tokenizer.model` gives a `kt.text.LlamaTokenizer`, a Qwen2 or
        Llama-3 `tokenizer.json` a `kt.text.BytePairTokenizer`: the ids of
        transformers' tokenizer plus one (the folder's begin-of-text token
        first where it puts one; its added tokens typed in the text are
        those tokens), and `detokenize` its `decode` (with
        `skip_special_tokens` as there); both carry the folder's chat
        template (`apply_chat_template`). A SentencePiece-BPE folder with
        only a `tokenizer.json` gives a `kt.text.LlamaTokenizer` built
        from it. GPT-2-style folders' added tokens that the vocabulary
        lacks are matched whole (docs/llama.md, "Folders as hub
        repositories carry them"); where a byte-level BPE `tokenizer.json`
        is there, it defines the tokenizer and its added tokens, even
        beside a `vocab.json` and `merges.txt`.

    Raises:
        FileNotFoundError: `path` has none of these files.
        ValueError: a file is malformed, asks for what we do not compute, or
            has more ids than the folder's `config.json` `vocab_size`.

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
    if _gguf.is_gguf(path):
        return gguf_tokenizer.from_file(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"`path` must be a checkpoint folder. Received: path={path!r}"
        )
    model_config = read_json(os.path.join(path, "config.json"), missing_ok=True) or {}
    reader = MODEL_TYPE_READERS.get(model_config.get("model_type"))
    if reader is not None:  # the family's own reader (pretrained/registry.py)
        tokenizer = reader(path)
        _check_size(tokenizer, model_config, path)
        return tokenizer
    return read_folder(path)


def read_folder(path, bart=False):
    """The tokenizer of a folder, by the files it holds (`bart`: BART's
    `<s> ... </s>` around each text, whatever the files say)."""
    config = read_json(os.path.join(path, CONFIG), missing_ok=True) or {}
    model_config = read_json(os.path.join(path, "config.json"), missing_ok=True) or {}
    if os.path.isfile(os.path.join(path, SOURCE_SPM)) or os.path.isfile(
        os.path.join(path, TARGET_SPM)
    ):
        tokenizers = _marian(path)
        _check_size(tokenizers[0], model_config, path)
        return tokenizers
    data = read_json(os.path.join(path, TOKENIZER), missing_ok=True)
    if ((data or {}).get("model") or {}).get("type") == "BPE":
        # transformers' fast tokenizers read tokenizer.json first: when it
        # is there, it defines the tokenizer, its added tokens included
        # (a vocab.json and merges.txt beside it may lack them).
        tokenizer = _bpe_from_tokenizer_json(
            data, path, config, bart or _is_bart(config, data)
        )
    elif os.path.isfile(os.path.join(path, BPE_VOCABULARY)) and os.path.isfile(
        os.path.join(path, MERGES)
    ):
        tokenizer = _bpe_from_files(path, config, bart or _is_bart(config))
    elif os.path.isfile(os.path.join(path, VOCABULARY)):
        # A WordPiece folder's vocab.txt, with tokenizer_config.json's
        # flags (which transformers 5 follows over tokenizer.json's).
        with open(os.path.join(path, VOCABULARY), encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
        while tokens and not tokens[-1]:
            tokens.pop()
        return _wordpiece(
            tokens,
            config.get("do_lower_case", True),
            config.get("strip_accents"),
            config.get("tokenize_chinese_chars", True),
            path,
        )
    else:
        return _wordpiece(*_from_tokenizer_json(_tokenizer_json(path), path), path)
    _check_size(tokenizer, model_config, path)
    return tokenizer


def _bpe_from_files(path, config, bart):
    """A `BytePairTokenizer` from a folder's `vocab.json` and `merges.txt`
    (without a BPE `tokenizer.json`), with the added tokens its config
    lists."""
    vocabulary = os.path.join(path, BPE_VOCABULARY)
    if bart:
        if config.get("add_prefix_space"):
            raise ValueError(
                "`add_prefix_space=True` is not supported. "
                f"Received in {os.path.join(path, CONFIG)!r}"
            )
        options = _special_options(BART_SPECIAL, vocabulary, "<s>")
    else:
        vocabulary, options = _with_added(
            read_vocabulary(vocabulary), folder_added_tokens(path, config), path
        )
    return BytePairTokenizer(
        vocabulary,
        os.path.join(path, MERGES),
        clean_up_tokenization_spaces=clean_up_bpe(config),
        **options,
    )


def _wordpiece(tokens, lowercase, strip_accents, chinese, path):
    """A `WordPieceTokenizer`, or a ValueError for what it cannot do."""
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


def _special_options(specials, vocabulary_file, bos=None, vocabulary=None):
    if vocabulary is None:
        vocabulary = read_json(vocabulary_file, missing_ok=True) or {}
    present = [t for t in specials if t in vocabulary]
    for token in ("</s>",) + ((bos,) if bos else ()):
        if token not in vocabulary:
            raise ValueError(
                f"{vocabulary_file!r} lacks the special token {token!r}. "
                f"Received: {len(vocabulary)} tokens without {token!r}"
            )
    return {
        "bos_token": bos,
        "eos_token": "</s>",
        "special_tokens": [t for t in present if t not in (bos, "</s>")],
    }


def _marian(path):
    """`(source, target)` SentencePiece tokenizers of a Marian folder."""
    files = [
        os.path.join(path, name) for name in (SOURCE_SPM, TARGET_SPM, BPE_VOCABULARY)
    ]
    for file in files:
        if not os.path.isfile(file):
            raise FileNotFoundError(
                f"A Marian tokenizer needs {SOURCE_SPM}, {TARGET_SPM} and "
                f"{BPE_VOCABULARY}; {file!r} is missing. Received: path={path!r}"
            )
    if os.path.isfile(os.path.join(path, "target_vocab.json")):
        raise ValueError(
            "Marian tokenizers with separate vocabularies (target_vocab.json) are "
            f"not supported. Received: path={path!r}"
        )
    options = _special_options(MARIAN_SPECIAL, files[2])
    return tuple(
        SentencePieceTokenizer(spm, vocabulary=files[2], **options) for spm in files[:2]
    )


def _check_size(tokenizer, model_config, path):
    size = model_config.get("vocab_size")
    emitted = tokenizer.emitted_vocabulary_size() - 1  # their ids
    if size is not None and emitted > size:
        raise ValueError(
            f"The tokenizer files in {path!r} have {emitted} tokens, more than "
            f"the model's vocab_size={size} (config.json): they do not belong "
            f"together. Received: {emitted} tokens for vocab_size={size!r}"
        )


def _tokenizer_json(path):
    data = read_json(os.path.join(path, TOKENIZER), missing_ok=True)
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


def _is_bart(config, data=None):
    """Whether a BPE folder's files are BART's (`<s> ... </s>` around each
    text)."""
    processor = ((data or {}).get("post_processor") or {}).get("type")
    return config.get("tokenizer_class") in BART_CLASSES or (
        processor == "RobertaProcessing"
    )


def _bpe_from_tokenizer_json(data, path, config, bart=False):
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
            "(GPT-2 uses neither). Received: "
            f"ignore_merges={model.get('ignore_merges')!r}, "
            f"normalizer={data.get('normalizer')!r:.80}"
        )
    vocabulary = dict(model.get("vocab") or {})
    if bart:
        for token in data.get("added_tokens") or []:
            vocabulary.setdefault(token["content"], token["id"])
        options = _special_options(BART_SPECIAL, file, "<s>", vocabulary)
    else:
        added = data.get("added_tokens") or folder_added_tokens(path, config)
        vocabulary, options = _with_added(vocabulary, added, path)
    return BytePairTokenizer(
        vocabulary,
        model.get("merges") or [],
        clean_up_tokenization_spaces=clean_up_bpe(config),
        **options,
    )


def folder_added_tokens(path, config):
    """The added tokens of a folder without `tokenizer.json`, as
    `tokenizer.json` lists them (`{"content", "id", "special", ...}`):
    `tokenizer_config.json`'s `added_tokens_decoder`, and `added_tokens.json`
    (older saves; special when the config names them)."""
    added = {}
    for id, token in (config.get("added_tokens_decoder") or {}).items():
        if isinstance(token, dict) and isinstance(token.get("content"), str):
            added[token["content"]] = {**token, "id": int(id)}
    names = {hf_llama.content(config.get(n)) for n in hf_llama.SPECIAL_NAMES}
    names.update(map(hf_llama.content, config.get("additional_special_tokens") or []))
    older = read_json(os.path.join(path, ADDED), missing_ok=True) or {}
    for content, id in older.items():
        added.setdefault(
            content, {"content": content, "id": id, "special": content in names}
        )
    return sorted(added.values(), key=lambda t: t["id"])


def _with_added(vocabulary, added, path):
    """`(vocabulary, options)` of a GPT-2-style folder with its `added`
    tokens: those the vocabulary lacks join it at their ids and are matched
    whole in text, as transformers matches them (there is no other way to
    write them); those already in it stay text, as GPT-2's `<|endoftext|>`
    (the reference's `split_special_tokens=True`). Special ones are dropped
    by `detokenize(..., skip_special_tokens=True)`."""
    tokens, special = hf_llama.added_tokens(
        {"added_tokens": added}, os.path.join(path, TOKENIZER)
    )
    vocabulary = dict(vocabulary)
    ids = {t["content"]: t["id"] for t in added}
    whole = [t for t in tokens if t not in vocabulary]
    for token in whole:
        vocabulary[token] = ids[token]
    return vocabulary, {"added_tokens": whole, "special_tokens": special}


def clean_up_bpe(config):
    """transformers 5 applies `clean_up_tokenization_spaces` to a BPE
    tokenizer's text only when the folder also sets
    `clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output`
    (it would remove real spaces before punctuation)."""
    return bool(
        config.get("clean_up_tokenization_spaces")
        and config.get(
            "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
        )
    )


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
