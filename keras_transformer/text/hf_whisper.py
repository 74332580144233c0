"""The tokenizer of a Hugging Face Whisper folder (`model_type: whisper`)
<-> `kt.text.WhisperTokenizer`.

A hub folder holds GPT-2's `vocab.json` and `merges.txt` (50,257 tokens)
and lists the special and timestamp tokens in `tokenizer_config.json`'s
`added_tokens_decoder` (older saves: `added_tokens.json`); a folder that
transformers 5 saved may hold only a `tokenizer.json`, whose `added_tokens`
list them. Every added token is matched whole in text; those marked
`special` are dropped by `skip_special_tokens`. transformers'
`WhisperTokenizer` adds its `bos_token`, `eos_token` and `unk_token`
(`<|endoftext|>` unless the config names others) as special tokens too: in
an English-only folder `<|endoftext|>` is GPT-2's token of `vocab.json`,
not listed among the added ones, and still matched whole.

Older folders (the hub's until 2023, faster-whisper's `tokenizer.json`)
list no timestamp tokens: their ids follow `<|notimestamps|>`
(`kt.text.WhisperTokenizer` reads them so).
"""

import os

from keras_transformer._validation import read_json
from keras_transformer.text import hf_llama, hf_tokenizers, hf_writers
from keras_transformer.text.whisper_tokenizer import END, WhisperTokenizer

# The tokens transformers' WhisperTokenizer adds as special ones (each
# `<|endoftext|>` unless the config names another).
NAMED = ("bos_token", "eos_token", "unk_token")
VOCABULARY = "vocab.json"
MERGES = "merges.txt"
TOKENIZER = "tokenizer.json"
CONFIG = "tokenizer_config.json"


def from_folder(path):
    """The `WhisperTokenizer` of a Whisper folder (`path`)."""
    config = read_json(os.path.join(path, CONFIG), missing_ok=True) or {}
    vocabulary_file = os.path.join(path, VOCABULARY)
    if os.path.isfile(vocabulary_file) and os.path.isfile(os.path.join(path, MERGES)):
        vocabulary = read_json(vocabulary_file)
        merges = os.path.join(path, MERGES)
        added = hf_tokenizers.folder_added_tokens(path, config)
    else:
        data = read_json(os.path.join(path, TOKENIZER), missing_ok=True)
        if data is None or (data.get("model") or {}).get("type") != "BPE":
            raise FileNotFoundError(
                f"A Whisper folder needs {VOCABULARY} and {MERGES}, or a "
                f"byte-level BPE {TOKENIZER}. Received: path={path!r}"
            )
        vocabulary = data["model"]["vocab"]
        merges = data["model"].get("merges") or []
        added = data.get("added_tokens") or hf_tokenizers.folder_added_tokens(
            path, config
        )
    vocabulary = dict(vocabulary)
    for token in added:
        vocabulary.setdefault(token["content"], token["id"])
    listed = {t["content"] for t in added}
    for name in NAMED:
        token = hf_llama.content(config.get(name, END))
        if token in vocabulary and token not in listed:
            listed.add(token)
            added.append({"content": token, "id": vocabulary[token], "special": True})
    return WhisperTokenizer(
        vocabulary,
        merges,
        added_tokens=[t["content"] for t in added],
        special_tokens=[t["content"] for t in added if t.get("special")],
        clean_up_tokenization_spaces=hf_tokenizers.clean_up_bpe(config),
    )


def save_tokenizer(tokenizer, path):
    """Writes a `WhisperTokenizer` as the hub's files: `vocab.json`,
    `merges.txt` and a `tokenizer_config.json` listing the added tokens."""
    hf_writers.check_savable(tokenizer, WhisperTokenizer)
    special = set(tokenizer.special_tokens) | {tokenizer.eos_token}
    added = {
        str(tokenizer.token_to_id(token) - 1): {
            "content": token,
            "lstrip": False,
            "normalized": token not in special,
            "rstrip": False,
            "single_word": False,
            "special": token in special,
        }
        for token in tokenizer.added_tokens
    }
    config = {
        "tokenizer_class": "WhisperTokenizer",
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": END,
        "eos_token": END,
        "pad_token": END,
        "unk_token": END,
        "errors": "replace",
        "model_max_length": 1024,
    }
    hf_writers.save_byte_pair(tokenizer, path, config)
