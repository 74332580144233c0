"""The tokenizer of a GGUF file, from its `tokenizer.ggml.*` metadata, as
transformers builds it (`AutoTokenizer.from_pretrained(folder,
gguf_file=name)`).

A GGUF file has no `tokenizer.json`: it lists the tokens, merges, token
types and special token ids. `tokenizer.ggml.model` names the kind:

- `"gpt2"` (byte-level BPE: GPT-2, SmolLM2, Qwen2, Llama-3) gives a
  `kt.text.BytePairTokenizer`: tokens not spelled in GPT-2's byte alphabet
  are respelled from their UTF-8 bytes, as transformers does; the words
  are cut by the regex `tokenizer.ggml.pre` names (`PRE_TOKENIZERS`);
  control tokens (type 3) are special, user-defined ones (type 4) plain,
  both matched whole; the begin-of-text token goes first with
  `tokenizer.ggml.add_bos_token`;
- `"llama"` (SentencePiece BPE with byte fallback: Llama-2, Mistral,
  TinyLlama) gives a `kt.text.LlamaTokenizer` running a SentencePiece model
  written from `tokenizer.ggml.tokens`, `.scores` and `.token_type`.
  transformers builds a `tokenizers` BPE whose merges are every split of a
  piece into two pieces, ranked by the piece's score: SentencePiece's own
  merge rule, as long as no two mergeable pieces share a score (a file
  where they do, or that lists `tokenizer.ggml.merges`, is refused by
  name). User-defined and unused pieces are normal pieces of the model
  (transformers merges into them like any other); control pieces and the
  named special tokens are special, user-defined ones plain added tokens,
  all matched whole. A "▁" goes before the first piece of text
  (`prepend_scheme="first"`: transformers' `LlamaTokenizer` defaults),
  whatever `tokenizer.ggml.add_space_prefix` says: transformers does not
  read it, llama.cpp does (a warning says so where it is false). The
  begin-of-text token goes first unless `add_bos_token` is false;
- `"llama"` in Gemma's files (`general.architecture` `gemma`, `gemma2`,
  `gemma3`) gives the same, as transformers' `GemmaTokenizer` reads them:
  no "▁" before the text, runs of spaces stored as spaces read as runs of
  "▁", and the merges ranked by the pieces' order in the file, not by
  their scores (which do not follow it);
- anything else (`"t5"`...) is refused, naming it.

The chat template is `tokenizer.chat_template`. Ids are the file's plus one
(id 0 is padding here).
"""

import logging

from keras_transformer import _gguf
from keras_transformer.text import sentencepiece_model as spm
from keras_transformer.text.bpe import BytePairTokenizer, bytes_to_unicode
from keras_transformer.text.llama_tokenizer import LlamaTokenizer

# `tokenizer.ggml.pre` -> our `split_pattern`, as transformers maps them:
# GPT-2's pattern for the names it has no regex for (llama.cpp's "gpt-2",
# "gpt2" and "smollm"), the Qwen2 and Llama-3 regexes for theirs.
PRE_TOKENIZERS = {
    "gpt2": None,
    "gpt-2": None,
    "smollm": None,
    "qwen2": "qwen2",
    "deepseek-r1-qwen": "qwen2",
    "llama-bpe": "llama3",
    "llama3": "llama3",
    "llama-v3": "llama3",
    "smaug-bpe": "llama3",
}
CONTROL, USER_DEFINED = spm.CONTROL, spm.USER_DEFINED  # llama.cpp's = SentencePiece's
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
    architecture = metadata.get("general.architecture")
    if kind == "llama" and architecture in SENTENCEPIECE_READERS:
        return SENTENCEPIECE_READERS[architecture](metadata, path)
    if kind not in READERS:
        raise ValueError(
            f"This GGUF file's tokenizer is not supported (supported: "
            f"{sorted(READERS)}). Received: tokenizer.ggml.model={kind!r} "
            f"in {path!r}"
        )
    return READERS[kind](metadata, path)


def _named(metadata, tokens):
    """transformers' named special tokens: `{"bos_token": "<s>", ...}`."""
    return {
        name: tokens[metadata[key]]
        for name, key in SPECIAL_IDS.items()
        if metadata.get(key) is not None and 0 <= metadata[key] < len(tokens)
    }


def _byte_level(metadata, path):
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
    named = _named(metadata, tokens)
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


def _sentencepiece(metadata, path, prepend_scheme="first"):
    tokens = metadata["tokenizer.ggml.tokens"]
    types = metadata.get("tokenizer.ggml.token_type") or [spm.NORMAL] * len(tokens)
    scores = metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    if metadata.get("tokenizer.ggml.merges"):
        raise ValueError(
            "SentencePiece GGUF tokenizers with `tokenizer.ggml.merges` are not "
            f"supported (their merges, not their scores, rank the pairs). "
            f"Received: {len(metadata['tokenizer.ggml.merges'])} merges in {path!r}"
        )
    named = _named(metadata, tokens)
    unknown = metadata.get(SPECIAL_IDS["unk_token"])
    if unknown is None and spm.UNKNOWN in types:
        unknown = types.index(spm.UNKNOWN)
    if unknown is None or not 0 <= unknown < len(tokens):
        raise ValueError(
            "A SentencePiece GGUF tokenizer needs its unknown token (an id in "
            "`tokenizer.ggml.unknown_token_id` or a token of type 2). "
            f"Received: unknown_token_id={unknown!r} in {path!r}"
        )
    kinds = [_MODEL_TYPES.get(kind, kind) for kind in types]
    kinds[unknown] = spm.UNKNOWN
    _check_scores(tokens, scores, kinds, path)
    proto = spm.bpe_model(
        list(zip(tokens, scores, kinds, strict=True)),
        unknown,
        add_dummy_prefix=metadata.get("tokenizer.ggml.add_space_prefix", True),
    )
    space_prefix = metadata.get("tokenizer.ggml.add_space_prefix")
    if space_prefix is False and prepend_scheme != "never":
        logging.warning(
            "%s: tokenizer.ggml.add_space_prefix is false, but a space is put "
            "before the text, as transformers does (llama.cpp does not).",
            path,
        )
    special = [t for t, kind in zip(tokens, types, strict=True) if kind == CONTROL]
    special += [t for t in named.values() if t not in special]
    plain = [
        t
        for t, kind in zip(tokens, types, strict=True)
        if kind == USER_DEFINED and t not in special
    ]
    # transformers: llama.cpp puts the begin-of-text token first unless the
    # file says otherwise.
    bos = named.get("bos_token") if metadata.get(_ADD_BOS, True) else None
    eos = named.get("eos_token") if metadata.get(_ADD_EOS) else None
    return LlamaTokenizer(
        proto,
        added_tokens=special + plain,
        prepend_scheme=prepend_scheme,
        bos_token=bos,
        eos_token=eos,
        special_tokens=[t for t in special if t not in (bos, eos)],
        chat_template=metadata.get("tokenizer.chat_template"),
        special_tokens_map=named,
    )


_ADD_BOS, _ADD_EOS = "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"
# Token types as pieces of the model: transformers' BPE merges into
# user-defined and unused pieces by their scores, as into normal ones.
_MODEL_TYPES = {USER_DEFINED: spm.NORMAL, spm.UNUSED: spm.NORMAL}


def _check_scores(tokens, scores, kinds, path):
    """A ValueError where two pieces that merges can form share a score:
    transformers ranks their merges by piece length and id there,
    SentencePiece merges the leftmost pair, so they can differ."""
    normal = {t for t, kind in zip(tokens, kinds, strict=True) if kind == spm.NORMAL}
    seen = {}
    for token, score in zip(tokens, scores, strict=True):
        cuts = range(1, len(token))
        if token in normal and any(
            token[:i] in normal and token[i:] in normal for i in cuts
        ):
            if score in seen:
                raise ValueError(
                    f"{path!r}: the pieces {seen[score]!r} and {token!r} share "
                    f"the score {score}, which makes transformers' merges and "
                    "SentencePiece's differ: SentencePiece GGUF tokenizers need "
                    "a distinct score for each piece formed by merging. "
                    f"Received: score={score!r} for {seen[score]!r} and {token!r}"
                )
            seen[score] = token


def _gemma(metadata, path):
    """Gemma's files, as transformers reads them (`GemmaTokenizer`): no "▁"
    before the text; a run of spaces stored as spaces is the piece of as
    many "▁"; and the pieces' order, not their scores, ranks the merges."""
    tokens = [
        "\u2581" * len(t) if " " in t and not t.strip() else t
        for t in metadata["tokenizer.ggml.tokens"]
    ]
    order = [-float(i) for i in range(len(tokens))]
    metadata = {
        **metadata,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": order,
    }
    return _sentencepiece(metadata, path, prepend_scheme="never")


READERS = {"gpt2": _byte_level, "llama": _sentencepiece}
# SentencePiece files read by their architecture, as transformers does.
SENTENCEPIECE_READERS = {"gemma": _gemma, "gemma2": _gemma, "gemma3": _gemma}


def _respelled(tokens):
    """`tokens` in GPT-2's byte alphabet: one spelled otherwise is written
    as the characters of its UTF-8 bytes (transformers' reading)."""
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    return [
        t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8"))
        for t in tokens
    ]
