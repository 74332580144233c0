"""A SentencePiece model built from a SentencePiece-BPE `tokenizer.json`.

Fine-tunes of Llama-2, Mistral and TinyLlama often ship only the
`tokenizer.json` that `tokenizers` converted from the `tokenizer.model`: a
BPE model with `byte_fallback`, its merges, and the text pipeline around it.
`kt.text.LlamaTokenizer` runs a SentencePiece model, so this module writes
one back from that file.

SentencePiece BPE merges, at each step, the adjacent pair whose joined piece
has the highest score; `tokenizers` merges the listed pair of lowest rank.
They agree when each piece's score is minus the rank of its first merge and
the merges list every split of a piece into two pieces of the vocabulary,
which is how the converter writes them (all splits, in score order). A file
whose merges leave a split out is refused, naming it, rather than tokenized
differently.
"""

import struct

from keras_transformer.text.llama_tokenizer import _BYTE_PIECE, _varint

# sentencepiece_model.proto: ModelProto.pieces = 1, .trainer_spec = 2,
# .normalizer_spec = 3; SentencePiece.piece = 1, .score = 2, .type = 3.
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
_BPE = 2  # TrainerSpec.model_type
# TrainerSpec fields: model_type 3, vocab_size 4, byte_fallback 35,
# unk_id 40, bos_id 41, eos_id 42, pad_id 43.
_TRAINER = [(3, _BPE), (35, 1), (41, -1), (42, -1), (43, -1)]


def proto_from_tokenizer_json(data, file):
    """The serialized SentencePiece model of a BPE `tokenizer.json` with
    byte fallback (`data`, read from `file`), its added tokens as control
    pieces. A ValueError names what it cannot be made from."""
    model = data["model"]
    vocabulary = dict(model.get("vocab") or {})
    added = {t["content"]: t for t in data.get("added_tokens") or []}
    for token in added.values():
        vocabulary.setdefault(token["content"], token["id"])
    tokens = sorted(vocabulary, key=vocabulary.get)
    if [vocabulary[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(f"{file!r}: the vocabulary's ids must be 0..N-1, each once.")
    unknown = model.get("unk_token")
    if unknown not in vocabulary:
        raise ValueError(
            f"{file!r}: a SentencePiece-BPE model needs its `unk_token` in the "
            f"vocabulary. Received: unk_token={unknown!r}"
        )
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ValueError(
                f"{file!r}: BPE models with `{key}` are not supported. "
                f"Received: {key}={model.get(key)!r}"
            )
    kinds = {}
    for token in tokens:
        if token == unknown:
            kinds[token] = UNKNOWN
        elif token in added:
            kinds[token] = CONTROL
        elif _BYTE_PIECE.fullmatch(token):
            kinds[token] = BYTE
        else:
            kinds[token] = NORMAL
    normal = {t for t, kind in kinds.items() if kind == NORMAL}
    scores = _scores(model.get("merges") or [], normal, file)
    pieces = b""
    for token in tokens:
        kind = kinds[token]
        piece = _string(1, token.encode("utf-8"))
        piece += _varint(2 << 3 | 5) + struct.pack("<f", scores.get(token, 0.0))
        piece += _int(3, kind)
        pieces += _string(1, piece)
    trainer = _int(4, len(tokens)) + _int(40, vocabulary[unknown])
    trainer += b"".join(_int(number, value) for number, value in _TRAINER)
    normalizer = _string(1, b"identity") + _int(3, 0) + _int(4, 0) + _int(5, 1)
    return pieces + _string(2, trainer) + _string(3, normalizer)


def _scores(merges, normal, file):
    """Each merged piece's score: minus the rank of its first merge. A
    ValueError where a piece of the vocabulary (`normal`: its pieces of
    text) has a split into two of them that the merges lack (SentencePiece
    would merge it, `tokenizers` not)."""
    first = {}
    listed = set()
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        listed.add((left, right))
        first.setdefault(left + right, rank)
    for piece in normal:
        for cut in range(1, len(piece)):
            split = (piece[:cut], piece[cut:])
            if split not in listed and all(p in normal for p in split):
                raise ValueError(
                    f"{file!r}: the merges lack {' '.join(split)!r}, a split of "
                    f"{piece!r} into two tokens, which SentencePiece would merge: "
                    "only merges converted from a SentencePiece model (every "
                    "split listed) are supported."
                )
    return {piece: -float(rank + 1) for piece, rank in first.items()}


def _int(number, value):
    """A varint field; negative int32 values as ten bytes, as protobuf does."""
    return _varint(number << 3) + _varint(value & (2**64 - 1))


def _string(number, value):
    return _varint(number << 3 | 2) + _varint(len(value)) + value
