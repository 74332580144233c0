"""Tokenizers of Llama, Mistral and Qwen2 checkpoint folders.

Two kinds, told apart by the folder's files, not by its model type:
- SentencePiece BPE with byte fallback (Llama-2, TinyLlama, Mistral): the
  `tokenizer.model`, read by `kt.text.LlamaTokenizer`; or its
  `tokenizer.json` (Gemma's always: spaces escaped, no "▁" put first);
- byte-level BPE from `tokenizer.json` (Qwen2, Llama-3, SmolLM2): a
  `kt.text.BytePairTokenizer` with the pre-tokenizer regex and normalizer
  the file declares.
Both match the folder's added tokens whole, put the begin-of-text token
first where the folder's tokenizer does, and carry its chat template.
Ids are the checkpoint's plus one (id 0 is padding here).
"""

import os

from keras_transformer._validation import read_json
from keras_transformer.text import hf_sentencepiece, pretokenizers
from keras_transformer.text.bpe import BytePairTokenizer
from keras_transformer.text.llama_tokenizer import LlamaTokenizer

TOKENIZER, CONFIG, SPM = "tokenizer.json", "tokenizer_config.json", "tokenizer.model"
TEMPLATE_FILE = "chat_template.jinja"
SPECIAL_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
# transformers' classes that rebuild a SentencePiece pipeline from the files.
SENTENCEPIECE_CLASSES = ("LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer")
# Classes that rebuild GPT-2's pipeline (transformers 5 keeps only the
# vocabulary, merges and post-processor of `tokenizer.json`): SmolLM2's.
GPT2_CLASSES = ("GPT2Tokenizer", "GPT2TokenizerFast")
GEMMA_CLASSES = ("GemmaTokenizer", "GemmaTokenizerFast")


def from_folder(path):
    """The tokenizer of a Llama / Mistral / Qwen2 folder (`path`)."""
    config = read_json(os.path.join(path, CONFIG), missing_ok=True) or {}
    data = read_json(os.path.join(path, TOKENIZER), missing_ok=True)
    chat = {
        "chat_template": _chat_template(path, config),
        "special_tokens_map": _special_tokens_map(path, config),
    }
    if data is None and not os.path.isfile(os.path.join(path, SPM)):
        raise FileNotFoundError(
            f"`path` must be a checkpoint folder with a {TOKENIZER} or a {SPM} "
            f"(it has neither). Received: path={path!r}"
        )
    model = (data or {}).get("model") or {}
    sentencepiece = config.get("tokenizer_class") in SENTENCEPIECE_CLASSES or (
        data is None or model.get("byte_fallback")
    )
    if sentencepiece:
        return _sentencepiece(path, config, data, chat)
    if config.get("tokenizer_class") in GPT2_CLASSES:
        data = {**data, "normalizer": None, "pre_tokenizer": {"type": "ByteLevel"}}
    return byte_level(data, os.path.join(path, TOKENIZER), config, chat)


def _chat_template(path, config):
    """The folder's chat template: `chat_template.jinja`, else the
    `tokenizer_config.json` entry (a string, or named templates, of which
    the one named "default"), else None."""
    file = os.path.join(path, TEMPLATE_FILE)
    if os.path.isfile(file):
        with open(file, encoding="utf-8") as f:
            return f.read()
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default")
    return template if isinstance(template, str) else None


def content(token):
    """A token of `tokenizer_config.json`: a string or an AddedToken dict."""
    return token.get("content") if isinstance(token, dict) else token


def _special_tokens_map(path, config):
    """transformers' `special_tokens_map`: the named special tokens set in
    `tokenizer_config.json` (else `special_tokens_map.json`)."""
    extra = read_json(os.path.join(path, "special_tokens_map.json"), missing_ok=True)
    tokens = {}
    for name in SPECIAL_NAMES:
        value = config[name] if name in config else (extra or {}).get(name)
        if isinstance(content(value), str):
            tokens[name] = content(value)
    return tokens


def added_tokens(data, file):
    """`(tokens, special)`: the `added_tokens` of `tokenizer.json` (`data`),
    all matched whole, and those marked special."""
    tokens, special = [], []
    for token in (data or {}).get("added_tokens") or []:
        for flag in ("lstrip", "rstrip", "single_word"):
            if token.get(flag):
                raise ValueError(
                    f"{file!r}: added tokens with `{flag}` are not supported. "
                    f"Received: {token!r}"
                )
        tokens.append(token["content"])
        if token.get("special"):
            special.append(token["content"])
    return tokens, special


def _ends(data, config, default_bos, file):
    """`(bos, eos)` the tokenizer puts around each text: the config's
    `add_bos_token` / `add_eos_token` where set (transformers then rebuilds
    the post-processor), else the `tokenizer.json` post-processor's."""
    if "add_bos_token" in config or "add_eos_token" in config:
        bos = content(config.get("bos_token")) if config.get("add_bos_token") else None
        eos = content(config.get("eos_token")) if config.get("add_eos_token") else None
        return bos, eos
    if data is None:
        return default_bos, None
    processor = data.get("post_processor") or {}
    if processor.get("type") == "Sequence":
        # Llama-3's Sequence[ByteLevel, TemplateProcessing]: ByteLevel only
        # trims offsets, which leaves ids as they are.
        steps = [
            p for p in processor.get("processors") or [] if p.get("type") != "ByteLevel"
        ]
        if len(steps) <= 1:
            processor = (steps or [{}])[0]
    kind = processor.get("type")
    if kind in (None, "ByteLevel"):
        return None, None
    single = processor.get("single") if kind == "TemplateProcessing" else None
    names = [next(iter(item)) for item in single or []]
    if single is None or names.count("Sequence") != 1:
        raise ValueError(
            f"{file!r}: only ByteLevel and single-sequence TemplateProcessing "
            "post-processors (alone or in a Sequence) are supported. "
            f"Received: post_processor={processor!r:.300}"
        )
    at = names.index("Sequence")
    others = [n for i, n in enumerate(names) if i != at]
    if len(names) > 3 or any(n != "SpecialToken" for n in others):
        raise ValueError(
            f"{file!r}: the post-processor may add one token before and one "
            f"after the text. Received: single={single!r}"
        )
    before = [item["SpecialToken"]["id"] for item in single[:at]]
    after = [item["SpecialToken"]["id"] for item in single[at + 1 :]]
    return (before or [None])[0], (after or [None])[0]


def _sentencepiece(path, config, data, chat):
    file = os.path.join(path, SPM)
    scheme = None
    # transformers 5's GemmaTokenizer reads tokenizer.json, never the .model.
    gemma = data is not None and config.get("tokenizer_class") in GEMMA_CLASSES
    if gemma or not os.path.isfile(file):
        if data is None:
            raise FileNotFoundError(
                f"A SentencePiece tokenizer needs {SPM}; {file!r} is missing. "
                f"Received: path={path!r}"
            )
        # Only tokenizer.json: its own pipeline, as `tokenizers` runs it.
        file = os.path.join(path, TOKENIZER)
        scheme = _prepend_scheme(data, file)
    tokens, special = added_tokens(data, os.path.join(path, TOKENIZER))
    if data is None:  # transformers' LlamaTokenizer: its specials
        tokens = special = [
            t
            for t in (content(config.get(n, d)) for n, d in _SP_SPECIALS)
            if isinstance(t, str)
        ]
    bos, eos = _ends(data, config, content(config.get("bos_token", "<s>")), file)
    add_prefix_space = config.get("add_prefix_space")
    if scheme is None and (add_prefix_space is None or add_prefix_space):
        scheme = "always" if config.get("legacy", False) else "first"
    elif scheme is None:
        scheme = "never"
    proto = file
    if file.endswith(TOKENIZER):
        proto = hf_sentencepiece.proto_from_tokenizer_json(data, file)
    return LlamaTokenizer(
        proto,
        added_tokens=tokens,
        prepend_scheme=scheme,
        bos_token=bos,
        eos_token=eos,
        special_tokens=[t for t in special if t not in (bos, eos)],
        **chat,
    )


# The text pipelines of SentencePiece-BPE tokenizer.json files: the legacy
# normalizer of Llama-2 / Mistral repositories, or Metaspace (later saves).
_LEGACY_NORMALIZER = [
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
]
# Gemma's: spaces written "▁", then a split at spaces (there are none left).
_GEMMA_NORMALIZER = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
_GEMMA_SPLIT = {"type": "Split", "pattern": {"String": " "},
                "behavior": "MergedWithPrevious", "invert": False}  # fmt: skip
_DECODERS = ("Replace", "ByteFallback", "Fuse", "Strip", "Metaspace")


def _prepend_scheme(data, file):
    """The `LlamaTokenizer` prefix scheme of a SentencePiece-BPE
    `tokenizer.json`, or a ValueError naming the part it cannot run."""
    normalizer, pre = data.get("normalizer"), data.get("pre_tokenizer")
    steps = (normalizer or {}).get("normalizers")
    scheme = None
    if pre is None and steps == _LEGACY_NORMALIZER:
        scheme = "prepend"
    elif normalizer == _GEMMA_NORMALIZER and pre in (None, _GEMMA_SPLIT):
        scheme = "never"  # Gemma: spaces escaped, no "▁" put first
    elif normalizer is None and (pre or {}).get("type") == "Metaspace":
        if pre.get("replacement") == "\u2581" and pre.get("split") is False:
            scheme = pre.get("prepend_scheme", "always")
    if scheme is None:
        raise ValueError(
            f"{file!r}: a SentencePiece-BPE tokenizer.json must have the legacy "
            'normalizer (Prepend("▁"), Replace(" ", "▁")) and no pre-tokenizer, '
            "a Metaspace pre-tokenizer that does not split, or Gemma's "
            'Replace(" ", "▁") normalizer. Received: '
            f"normalizer={normalizer!r:.200}, pre_tokenizer={pre!r:.200}"
        )
    decoder = data.get("decoder") or {}
    kinds = [d.get("type") for d in decoder.get("decoders") or [decoder]]
    if not all(kind in _DECODERS for kind in kinds):
        raise ValueError(
            f"{file!r}: this decoder is not supported (only {', '.join(_DECODERS)}). "
            f"Received: decoder={decoder!r:.300}"
        )
    return scheme


_SP_SPECIALS = (("unk_token", "<unk>"), ("bos_token", "<s>"), ("eos_token", "</s>"))


def _one(item, kinds):
    """A `Sequence` of one item as the item (the others as they are)."""
    if isinstance(item, dict) and item.get("type") == "Sequence":
        inner = item.get(kinds) or []
        if len(inner) == 1:
            return inner[0]
    return item


def byte_level(data, file, config=None, chat=None):
    """A `BytePairTokenizer` from a byte-level BPE `tokenizer.json` (`data`,
    read from `file`): GPT-2's pre-tokenizer, or a Split by a regex of
    `kt.text.pretokenizers.PATTERNS` then ByteLevel without its own regex;
    no normalizer or a Unicode normalization form. Anything else is a
    ValueError naming it."""
    model = data["model"]
    normalizer = _one(data.get("normalizer"), "normalizers")
    form = (normalizer or {}).get("type")
    if normalizer is not None and form not in pretokenizers.NORMALIZERS:
        raise ValueError(
            f"{file!r}: this normalizer is not supported (only "
            f"{', '.join(pretokenizers.NORMALIZERS)}). Received: normalizer="
            f"{normalizer!r:.300}"
        )
    pattern = _split_pattern(data.get("pre_tokenizer"), file)
    for key, allowed in [
        ("byte_fallback", (False, None)),
        ("dropout", (None,)),
        ("continuing_subword_prefix", ("", None)),
        ("end_of_word_suffix", ("", None)),
    ]:
        if model.get(key) not in allowed:
            raise ValueError(
                f"{file!r}: BPE models with `{key}` are not supported. "
                f"Received: {key}={model.get(key)!r}"
            )
    decoder = (data.get("decoder") or {}).get("type")
    if decoder != "ByteLevel":
        raise ValueError(
            f"{file!r}: only the ByteLevel decoder is supported. "
            f"Received: decoder={data.get('decoder')!r:.300}"
        )
    vocabulary = dict(model.get("vocab") or {})
    tokens, special = added_tokens(data, file)
    for token in data.get("added_tokens") or []:
        vocabulary.setdefault(token["content"], token["id"])
    bos, eos = _ends(data, config or {}, None, file)
    return BytePairTokenizer(
        vocabulary,
        model.get("merges") or [],
        split_pattern=pattern,
        normalization=form,
        added_tokens=tokens,
        ignore_merges=bool(model.get("ignore_merges")),
        bos_token=bos,
        eos_token=eos,
        special_tokens=[t for t in special if t not in (bos, eos)],
        **(chat or {}),
    )


def _split_pattern(pre, file):
    """The `split_pattern` of a pre-tokenizer, or a ValueError naming it."""
    if isinstance(pre, dict) and pre.get("type") == "ByteLevel":
        if pre.get("use_regex", True) and not pre.get("add_prefix_space"):
            return None  # GPT-2's
    items = (pre or {}).get("pretokenizers") if isinstance(pre, dict) else None
    if items and len(items) == 2:
        split, level = items
        regex = (split.get("pattern") or {}).get("Regex")
        names = {p: n for n, p in pretokenizers.PATTERNS.items()}
        if (
            split.get("type") == "Split"
            and regex in names
            and split.get("behavior") == "Isolated"
            and not split.get("invert")
            and level.get("type") == "ByteLevel"
            and not level.get("add_prefix_space")
            and not level.get("use_regex", True)
        ):
            return names[regex]
    raise ValueError(
        f"{file!r}: this pre-tokenizer is not supported (only GPT-2's ByteLevel, "
        "or a Split by the Qwen2 or Llama-3 regex then ByteLevel). "
        f"Received: pre_tokenizer={pre!r:.400}"
    )
