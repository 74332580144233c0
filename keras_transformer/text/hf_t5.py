"""The tokenizer of a Hugging Face T5 folder (`model_type: t5`) <->
`kt.text.T5Tokenizer`.

A folder holds T5's unigram SentencePiece model as `spiece.model` (the
hub's form), or only as a `tokenizer.json` whose `Unigram` model lists the
pieces and scores and whose `Precompiled` normalizer carries the
SentencePiece character map (what `tokenizers` converted); from the latter
the SentencePiece model is written back. `save_tokenizer` writes
`spiece.model` and the `tokenizer_config.json` transformers reads it with.
"""

import base64
import json
import os
import re

from keras_transformer._validation import read_json
from keras_transformer.text import sentencepiece_model as spm
from keras_transformer.text.t5_tokenizer import T5Tokenizer, sentinel

SPM = "spiece.model"
TOKENIZER = "tokenizer.json"
CONFIG = "tokenizer_config.json"
SENTINEL = re.compile(r"<extra_id_(\d+)>")


def from_folder(path):
    """The `T5Tokenizer` of a T5 folder (`path`)."""
    spiece = os.path.join(path, SPM)
    if os.path.isfile(spiece):
        config = read_json(os.path.join(path, CONFIG), missing_ok=True) or {}
        return T5Tokenizer(spiece, extra_ids=_extra_ids(config))
    file = os.path.join(path, TOKENIZER)
    data = read_json(file, missing_ok=True)
    if data is None:
        raise FileNotFoundError(
            f"A T5 folder needs a {SPM} or a {TOKENIZER} (it has neither). "
            f"Received: path={path!r}"
        )
    proto, extra_ids = proto_from_tokenizer_json(data, file)
    return T5Tokenizer(proto, extra_ids=extra_ids)


def _extra_ids(config):
    """The sentinels a `tokenizer_config.json` names (100 when it says
    nothing, as `T5Tokenizer`'s default)."""
    named = [
        t
        for key in ("additional_special_tokens", "extra_special_tokens")
        for t in config.get(key) or []
        if isinstance(t, str) and SENTINEL.fullmatch(t)
    ]
    return len(set(named)) or int(config.get("extra_ids", 100))


def _charsmap(normalizer, file):
    """The precompiled character map of a `tokenizer.json` normalizer
    (`Precompiled`, alone or in a `Sequence` with T5's whitespace
    `Replace`), or a ValueError."""
    parts = [normalizer or {}]
    if parts[0].get("type") == "Sequence":
        parts = parts[0].get("normalizers") or []
    charsmap = b""
    for part in parts:
        kind = part.get("type")
        if kind == "Precompiled":
            charsmap = base64.b64decode(part.get("precompiled_charsmap") or "")
        elif not (kind == "Replace" and part.get("content") == " "):
            raise ValueError(
                f"{file!r}: a T5 tokenizer's normalizer is `Precompiled` (and a "
                f"whitespace `Replace`). Received: normalizer={normalizer!r:.200}"
            )
    return charsmap


def proto_from_tokenizer_json(data, file):
    """`(serialized SentencePiece unigram model, number of sentinels)` of a
    T5 `tokenizer.json` (`data`, read from `file`); a ValueError names what
    it cannot be made from."""
    model = data.get("model") or {}
    if model.get("type") != "Unigram" or model.get("byte_fallback"):
        raise ValueError(
            f"{file!r}: a T5 tokenizer.json holds a Unigram model without byte "
            f"fallback. Received: type={model.get('type')!r}, "
            f"byte_fallback={model.get('byte_fallback')!r}"
        )
    vocabulary = model.get("vocab") or []
    unknown = model.get("unk_id")
    added = {t["content"]: t["id"] for t in data.get("added_tokens") or []}
    if [p for p, _ in vocabulary[:2]] != ["<pad>", "</s>"] or unknown is None:
        raise ValueError(
            f"{file!r}: a T5 vocabulary starts <pad>, </s> and has an unk_id. "
            f"Received: {[p for p, _ in vocabulary[:3]]}, unk_id={unknown!r}"
        )
    sentinels = sorted(
        int(m.group(1)) for m in map(SENTINEL.fullmatch, added) if m is not None
    )
    extra_ids = len(sentinels)
    # transformers 5 lists the sentinels in the vocabulary too, last.
    size = len(vocabulary)
    while size and SENTINEL.fullmatch(vocabulary[size - 1][0]):
        size -= 1
    kinds = {0: spm.CONTROL, 1: spm.CONTROL, unknown: spm.UNKNOWN}
    pieces = [
        (piece, float(score), kinds.get(i, spm.NORMAL))
        for i, (piece, score) in enumerate(vocabulary[:size])
    ]
    expected = {sentinel(n): size + extra_ids - 1 - n for n in sentinels}
    if sentinels != list(range(extra_ids)) or any(
        added[t] != i for t, i in expected.items()
    ):
        raise ValueError(
            f"{file!r}: T5's sentinels <extra_id_0> .. <extra_id_N> follow the "
            "pieces, <extra_id_0> last. Received: "
            f"{ {t: added[t] for t in list(expected)[:3]} }"
        )
    charsmap = _charsmap(data.get("normalizer"), file)
    return spm.unigram_model(pieces, unknown, charsmap), extra_ids


def check_tokenizer(tokenizer, vocabulary_size):
    """A ValueError unless `tokenizer` is a `T5Tokenizer` whose ids fit a
    model of `vocabulary_size` ids."""
    if not isinstance(tokenizer, T5Tokenizer):
        raise ValueError(
            "A T5 folder's tokenizer is a kt.text.T5Tokenizer. "
            f"Received: tokenizer={tokenizer!r}"
        )
    if tokenizer.vocabulary_size() > vocabulary_size:
        raise ValueError(
            f"`tokenizer` has {tokenizer.vocabulary_size()} ids but `model` only "
            f"{vocabulary_size}: they do not belong together. "
            f"Received: tokenizer={tokenizer!r}"
        )


def save_tokenizer(tokenizer, path, max_length):
    """Writes `spiece.model` and `tokenizer_config.json` of a `T5Tokenizer`."""
    with open(os.path.join(path, SPM), "wb") as f:
        f.write(tokenizer.proto)
    sentinels = [sentinel(n) for n in range(tokenizer.extra_ids)]
    config = {
        "tokenizer_class": "T5Tokenizer",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "extra_ids": tokenizer.extra_ids,
        "additional_special_tokens": sentinels,
        "model_max_length": max_length,
    }
    with open(os.path.join(path, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
