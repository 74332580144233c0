"""The tokenizer of a GGUF file, from its `tokenizer.ggml.*` metadata, as
transformers builds it (`AutoTokenizer.from_pretrained(folder,
gguf_file=name)`).

A GGUF file has no `tokenizer.json`: it lists the tokens, merges, token
types and special token ids. `tokenizer.ggml.model` names the kind:

- `"gpt2"` (byte-level BPE: SmolLM2, Qwen2, Llama-3) gives a
  `kt.text.BytePairTokenizer`: tokens not spelled in GPT-2's byte alphabet
  are respelled from their UTF-8 bytes, as transformers does; the words
  are cut by the regex `tokenizer.ggml.pre` names (`PRE_TOKENIZERS`);
  control tokens (type 3) are special, user-defined ones (type 4) plain,
  both matched whole; the begin-of-text token goes first with
  `tokenizer.ggml.add_bos_token`;
- anything else (`"llama"`, SentencePiece, included) is refused, naming it.

The chat template is `tokenizer.chat_template`. Ids are the file's plus one
(id 0 is padding here).
"""

from keras_transformer import _gguf
from keras_transformer.text.bpe import BytePairTokenizer, bytes_to_unicode

# `tokenizer.ggml.pre` -> our `split_pattern`, as transformers maps them:
# GPT-2's pattern for the names it has no regex for (llama.cpp's "gpt2" and
# "smollm"), the Qwen2 and Llama-3 regexes for theirs.
PRE_TOKENIZERS = {
    "gpt2": None,
    "smollm": None,
    "qwen2": "qwen2",
    "deepseek-r1-qwen": "qwen2",
    "llama-bpe": "llama3",
    "llama3": "llama3",
    "llama-v3": "llama3",
    "smaug-bpe": "llama3",
}
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types
# transformers' named special tokens and the metadata keys of their ids.
SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


def from_file(path):
    """The in-graph tokenizer of the GGUF file at `path` (see the module).

    Raises:
        FileNotFoundError: no file at `path`.
        ImportError: the `gguf` package is missing.
        ValueError: a tokenizer kind or pre-tokenizer we do not compute,
            named.
    """
    return from_metadata(_gguf.metadata(_gguf.open_file(path)), path)


def from_metadata(metadata, path):
    """The tokenizer described by a GGUF file's `metadata` (from `path`)."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            "Only byte-level BPE tokenizers (tokenizer.ggml.model 'gpt2') are "
            f"read from GGUF files. Received: tokenizer.ggml.model={kind!r} "
            f"in {path!r}"
        )
    pre = metadata.get("tokenizer.ggml.pre", "gpt2")
    if pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"This GGUF file's pre-tokenizer is not supported (supported: "
            f"{sorted(PRE_TOKENIZERS)}). Received: tokenizer.ggml.pre={pre!r} "
            f"in {path!r}"
        )
    spelled = metadata["tokenizer.ggml.tokens"]
    tokens = _respelled(spelled)
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    # Tokens spelled in the byte alphabet: the only ones transformers
    # matches whole (another control token is a llama.cpp mislabel).
    whole = {t for t, s in zip(tokens, spelled, strict=True) if t == s}
    named = {
        name: tokens[metadata[key]]
        for name, key in SPECIAL_IDS.items()
        if metadata.get(key) is not None and 0 <= metadata[key] < len(tokens)
    }
    # Control tokens are special, user-defined ones plain added tokens.
    special = [
        t
        for t, kind in zip(tokens, types, strict=True)
        if kind == CONTROL and t in whole
    ]
    special += [t for t in named.values() if t in whole and t not in special]
    plain = [
        t
        for t, kind in zip(tokens, types, strict=True)
        if kind == USER_DEFINED and t in whole and t not in special
    ]
    bos = (
        named.get("bos_token") if metadata.get("tokenizer.ggml.add_bos_token") else None
    )
    eos = (
        named.get("eos_token") if metadata.get("tokenizer.ggml.add_eos_token") else None
    )
    return BytePairTokenizer(
        {t: i for i, t in enumerate(tokens)},
        metadata.get("tokenizer.ggml.merges") or [],
        split_pattern=PRE_TOKENIZERS[pre],
        added_tokens=special + plain,
        bos_token=bos,
        eos_token=eos,
        special_tokens=[t for t in special if t not in (bos, eos)],
        chat_template=metadata.get("tokenizer.chat_template"),
        special_tokens_map=named,
    )


def _respelled(tokens):
    """`tokens` in GPT-2's byte alphabet: one spelled otherwise is written
    as the characters of its UTF-8 bytes (transformers' reading)."""
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    return [
        t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8"))
        for t in tokens
    ]
