"""Writing tokenizers as Hugging Face folders hold them: BERT's
`vocab.txt`, GPT-2's and BART's `vocab.json` + `merges.txt`, Marian's
`source.spm` / `target.spm` / `vocab.json`, each with its
`tokenizer_config.json` (read back by `hf_tokenizers`)."""

import json
import os

from keras_transformer.text.bpe import BytePairTokenizer
from keras_transformer.text.hf_tokenizers import (
    BPE_VOCABULARY,
    CONFIG,
    END,
    MERGES,
    SOURCE_SPM,
    TARGET_SPM,
    VOCABULARY,
)
from keras_transformer.text.sentencepiece import SentencePieceTokenizer
from keras_transformer.text.wordpiece import WordPieceTokenizer


def check_sentencepiece_pair(tokenizer, name):
    """A `(source, target)` pair of `SentencePieceTokenizer` sharing a
    vocabulary, as a Marian folder holds them; returns the ids it emits,
    or raises a ValueError naming the model family `name`."""
    good = (
        isinstance(tokenizer, tuple | list)
        and len(tokenizer) == 2
        and all(
            isinstance(t, SentencePieceTokenizer) and t.piece_vocabulary is not None
            for t in tokenizer
        )
        and tokenizer[0].piece_vocabulary == tokenizer[1].piece_vocabulary
    )
    _check_kind(
        good,
        tokenizer,
        name,
        "a (source, target) pair of kt.text.SentencePieceTokenizer sharing a "
        "vocabulary",
    )
    return tokenizer[0].emitted_vocabulary_size()


def check_byte_pair(tokenizer, name):
    """A `BytePairTokenizer`; returns the ids it emits, or raises a
    ValueError naming the model family `name`."""
    good = isinstance(tokenizer, BytePairTokenizer)
    _check_kind(good, tokenizer, name, "a kt.text.BytePairTokenizer")
    return tokenizer.emitted_vocabulary_size()


def _check_kind(good, tokenizer, name, what):
    if not good:
        raise ValueError(
            f"For a {name} model, `tokenizer` must be {what}. "
            f"Received: tokenizer={tokenizer!r}"
        )


def save_sentencepiece_pair(tokenizer, path, config):
    """Writes a `(source, target)` pair as a Marian folder holds it
    (`source.spm`, `target.spm`, the shared `vocab.json`) with `config` as
    its `tokenizer_config.json`."""
    source, target = tokenizer
    for name, spm in [(SOURCE_SPM, source), (TARGET_SPM, target)]:
        with open(os.path.join(path, name), "wb") as f:
            f.write(spm.proto)
    with open(os.path.join(path, BPE_VOCABULARY), "w", encoding="utf-8") as f:
        vocabulary = {t: i for i, t in enumerate(source.piece_vocabulary)}
        json.dump(vocabulary, f, ensure_ascii=False)
    write_tokenizer_config(config, path)


def write_tokenizer_config(config, path):
    """Writes `config` as the folder's `tokenizer_config.json`."""
    with open(os.path.join(path, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def check_savable(tokenizer, kind):
    """A ValueError unless `tokenizer` is a `kind`: a `WordPieceTokenizer`
    (BERT) or a `BytePairTokenizer` (GPT-2)."""
    if not isinstance(tokenizer, kind):
        raise ValueError(
            f"`tokenizer` must be a kt.text.{kind.__name__} for this model. "
            f"Received: tokenizer={tokenizer!r}"
        )


def save_wordpiece(tokenizer, path):
    """Writes a `WordPieceTokenizer` as `vocab.txt` and
    `tokenizer_config.json`, as `BertTokenizer` reads them."""
    check_savable(tokenizer, WordPieceTokenizer)
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
    write_tokenizer_config(config, path)


def save_byte_pair(tokenizer, path, config=None):
    """Writes a `BytePairTokenizer` as `vocab.json` and `merges.txt` (ids
    back to the folder's: minus one) with `config` as its
    `tokenizer_config.json`, by default `GPT2Tokenizer`'s."""
    check_savable(tokenizer, BytePairTokenizer)
    tokens = tokenizer.get_vocabulary()[1:]  # without our padding id 0
    with open(os.path.join(path, BPE_VOCABULARY), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(path, MERGES), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(m + "\n" for m in tokenizer.get_merges()))
    if config is None:
        special = END if END in tokens else None
        config = {
            "tokenizer_class": "GPT2Tokenizer",
            "add_prefix_space": False,
            "bos_token": special,
            "eos_token": special,
            "unk_token": special,
        }
    write_tokenizer_config(config, path)
