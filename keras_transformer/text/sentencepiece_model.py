"""SentencePiece model files (`sentencepiece_model.proto`), written and read
by hand: the few fields we set or check, without a protobuf dependency.

`kt.text.LlamaTokenizer` runs a serialized `ModelProto`; folders with only
a `tokenizer.json` (`hf_sentencepiece`) and GGUF files (`gguf_tokenizer`)
carry the pieces, not the proto, so `bpe_model` writes one from them.

ModelProto: pieces = 1 (SentencePiece: piece = 1, score = 2, type = 3),
trainer_spec = 2, normalizer_spec = 3.
"""

import os
import re
import struct

# SentencePiece.Type (llama.cpp's GGUF token types are the same numbers).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_PIECES, _TRAINER, _NORMALIZER = 1, 2, 3
# TrainerSpec: model_type 3 (BPE = 2), byte_fallback 35, and no begin /
# end / padding ids (bos_id 41, eos_id 42, pad_id 43 = -1): the tokenizer
# puts those tokens itself. vocab_size 4 and unk_id 40 are the model's.
_BPE_TRAINER = [(3, 2), (35, 1), (41, -1), (42, -1), (43, -1)]


def bpe_model(pieces, unknown, add_dummy_prefix):
    """A serialized SentencePiece BPE model with byte fallback.

    Args:
        pieces: `(piece, score, type)` for each id, in id order.
        unknown: the id of the unknown piece.
        add_dummy_prefix: the normalizer's flag (Llama's normalizer
            otherwise: identity, whitespace kept and escaped as "▁").
    """
    out = _pieces_field(pieces)
    trainer = int_field(4, len(pieces)) + int_field(40, unknown)
    trainer += b"".join(int_field(number, value) for number, value in _BPE_TRAINER)
    # NormalizerSpec: name 1, add_dummy_prefix 3, remove_extra_whitespaces
    # 4, escape_whitespaces 5.
    normalizer = string_field(1, b"identity") + int_field(3, int(add_dummy_prefix))
    normalizer += int_field(4, 0) + int_field(5, 1)
    return out + string_field(_TRAINER, trainer) + string_field(_NORMALIZER, normalizer)


def read_proto(proto):
    """`proto` (serialized bytes, or the path of a `.model` file) as bytes;
    a FileNotFoundError or ValueError naming it otherwise."""
    if isinstance(proto, str | os.PathLike):
        path = os.fspath(proto)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"SentencePiece model not found: {path!r}. Received: proto={path!r}"
            )
        with open(path, "rb") as f:
            proto = f.read()
    if not isinstance(proto, bytes) or not proto:
        raise ValueError(
            "`proto` must be a serialized SentencePiece model (bytes) or a "
            f"path to a .model file. Received: proto={proto!r:.80}"
        )
    return proto


def _pieces_field(pieces):
    """The ModelProto's `pieces` of `(piece, score, type)` entries."""
    entries = [
        string_field(1, piece.encode("utf-8"))
        + varint(2 << 3 | 5)
        + struct.pack("<f", score)
        + int_field(3, kind)
        for piece, score, kind in pieces
    ]
    return b"".join(string_field(_PIECES, entry) for entry in entries)


def int_field(number, value):
    """A varint field; negative int32 values as ten bytes, as protobuf does."""
    return varint(number << 3) + varint(value & (2**64 - 1))


def string_field(number, value):
    return varint(number << 3 | 2) + varint(len(value)) + value


def varint(value):
    out = b""
    while True:
        byte, value = value & 0x7F, value >> 7
        out += bytes([byte | (0x80 if value else 0)])
        if not value:
            return out


def _read_varint(data, i):
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError(
                "`proto` is not a valid SentencePiece model. Received: a varint "
                f"running past the end of {len(data)} bytes"
            )
        value |= (data[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not data[i - 1] & 0x80:
            return value, i


def fields(data):
    """`(number, wire type, value bytes, raw bytes)` of each field of a
    serialized protobuf message."""
    i = 0
    while i < len(data):
        start = i
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, end = _read_varint(data, i)
            value = data[i:end]
        elif wire in (1, 5):
            end = i + (8 if wire == 1 else 4)
            value = data[i:end]
        elif wire == 2:
            size, i = _read_varint(data, i)
            end = i + size
            value = data[i:end]
        else:
            raise ValueError(
                "`proto` is not a valid SentencePiece model. Received: wire type "
                f"{wire} at byte {start}"
            )
        if end > len(data):
            raise ValueError(
                "`proto` is not a valid SentencePiece model. Received: field "
                f"{number} ending at byte {end} of {len(data)}"
            )
        i = end
        yield number, wire, value, data[start:end]


def unigram_model(pieces, unknown, precompiled_charsmap):
    """A serialized SentencePiece unigram model (T5's), from a unigram
    `tokenizer.json`.

    Args:
        pieces: `(piece, score, type)` for each id, in id order.
        unknown: the id of the unknown piece.
        precompiled_charsmap: the normalizer's compiled character map
            (bytes; b"": none), as the `Precompiled` normalizer holds it.
    """
    out = _pieces_field(pieces)
    # TrainerSpec: model_type 3 (UNIGRAM = 1), vocab_size 4, unk_id 40, and
    # no begin / end / padding ids: the tokenizer puts those tokens itself.
    trainer = int_field(3, 1) + int_field(4, len(pieces)) + int_field(40, unknown)
    trainer += int_field(41, -1) + int_field(42, -1) + int_field(43, -1)
    # NormalizerSpec: name 1, precompiled_charsmap 2, add_dummy_prefix 3,
    # remove_extra_whitespaces 4, escape_whitespaces 5.
    name = b"nmt_nfkc" if precompiled_charsmap else b"identity"
    normalizer = string_field(1, name)
    if precompiled_charsmap:
        normalizer += string_field(2, precompiled_charsmap)
    normalizer += int_field(3, 1) + int_field(4, 1) + int_field(5, 1)
    return out + string_field(_TRAINER, trainer) + string_field(_NORMALIZER, normalizer)
