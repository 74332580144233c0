"""GGUF files (llama.cpp's single-file checkpoints), read with the `gguf`
package (llama.cpp's own reader: numpy only, the file memory-mapped).

The one reader `kt.models`, `kt.text` and `kt.tasks` share: a file's
metadata as plain Python values (`{"llama.block_count": 30,
"tokenizer.ggml.tokens": [...], ...}`) and its tensors' descriptions.
Tensors are read by `TensorBytes`: the file memory-mapped once more, each
tensor's bytes a view of the map, and its pages given back once the
tensor is converted, so reading a file never keeps it resident.
`pretrained/gguf.py` converts them.
"""

import mmap
import os
import re
import struct
from typing import NamedTuple

import numpy as np

INSTALL = 'pip install "keras-transformer[gguf]"'
SUFFIX = ".gguf"


def is_gguf(path):
    """Whether `path` names a GGUF file (by its `.gguf` suffix), whether or
    not it exists."""
    return isinstance(path, str | os.PathLike) and os.fspath(path).endswith(SUFFIX)


def gguf_module():
    """The `gguf` package, or an ImportError saying how to install it."""
    try:
        import gguf
    except ImportError as error:
        raise ImportError(
            f"Reading GGUF files needs the `gguf` package: {INSTALL}"
        ) from error
    return gguf


def open_file(path):
    """The `GGUFFile` (metadata and tensor descriptions) at `path`.

    Raises:
        FileNotFoundError: no file at `path`, naming it.
        ImportError: the `gguf` package is missing.
        ValueError: the file is not a GGUF file (or is truncated).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No GGUF file at `path`. Received: path={path!r}")
    gguf_module()  # its tensor types name ours, and it dequantizes
    split = SPLIT.fullmatch(os.path.basename(path))
    if split is None:
        return _read(path)
    # llama.cpp's split files (`gguf-split`): one model in N files, each
    # with its own header; the first holds the metadata.
    count = int(split["count"])
    shards = [
        os.path.join(
            os.path.dirname(path), f"{split['stem']}-{i:05d}-of-{count:05d}.gguf"
        )
        for i in range(1, count + 1)
    ]
    for shard in shards:
        if not os.path.isfile(shard):
            raise FileNotFoundError(
                f"A split GGUF file's part is missing: {shard!r} (the model is "
                f"{count} files). Received: path={path!r}"
            )
    parts = [_read(shard) for shard in shards]
    for number, part in enumerate(parts):
        found = (part.metadata.get("split.no"), part.metadata.get("split.count"))
        if found != (number, count):
            raise ValueError(
                f"{shards[number]!r} is not part {number + 1} of {count} of a split "
                f"GGUF file (its split.no, split.count: {found}). "
                f"Received: path={path!r}"
            )
    return GGUFFile.joined(parts)


# llama.cpp's names of split files: `name-00001-of-00003.gguf`.
SPLIT = re.compile(r"(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")


def _read(path):
    try:
        return GGUFFile(path)
    except (ValueError, struct.error, UnicodeDecodeError, OverflowError) as error:
        raise ValueError(
            f"Cannot read {path!r} as a GGUF file (broken or truncated?): {error}. "
            f"Received: path={path!r}"
        ) from None


# GGUF's value types (gguf.GGUFValueType): struct formats of the scalars.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?"}
SCALARS.update({10: "Q", 11: "q", 12: "d"})
STRING, ARRAY = 8, 9


class GGUFFile:
    """A GGUF file's header: `metadata` (`{key: value}`, plain Python
    values, without the header's own counts) and `tensors` (`Tensor`s in
    the file's order).

    Read here rather than by `gguf.GGUFReader`, which makes a numpy view
    per value of every field: for a 150k-token vocabulary that is 12 s
    and half a GB that stays resident (the model then loads beside it).
    The header is read once from the file's start, little-endian
    (versions 2 and 3, as llama.cpp writes them); tests check it against
    `gguf.GGUFReader` field by field.
    """

    def __init__(self, path):
        with open(path, "rb") as f:
            self._f = f
            magic = f.read(4)
            if magic != b"GGUF":
                raise ValueError(f"no GGUF magic. Received: magic={magic!r}")
            version, count, fields = self._read("<IQQ")
            if version not in (2, 3):
                raise ValueError(
                    f"GGUF version {version} (this reads 2 and 3). "
                    f"Received: version={version!r}"
                )
            self.metadata = {}
            for _ in range(fields):
                key = self._string()
                self.metadata[key] = self._value(self._read("<I")[0])
            infos = []
            for _ in range(count):
                name = self._string()
                dims = self._read(f"<{self._read('<I')[0]}Q")
                kind, offset = self._read("<IQ")
                infos.append((name, tuple(dims), kind, offset))
            alignment = self.metadata.get("general.alignment", 32)
            start = -(-f.tell() // alignment) * alignment
        del self._f
        size = os.path.getsize(path)
        self.tensors = [self._tensor(*info, start, size, path) for info in infos]

    @classmethod
    def joined(cls, parts):
        """One model's `GGUFFile` of its split files' (in order): the
        first's metadata without the `split.*` keys, every file's
        tensors."""
        joined = cls.__new__(cls)
        joined.metadata = {
            k: v for k, v in parts[0].metadata.items() if not k.startswith("split.")
        }
        joined.tensors = [tensor for part in parts for tensor in part.tensors]
        return joined

    def _read(self, fmt):
        size = struct.calcsize(fmt)
        data = self._f.read(size)
        if len(data) != size:
            raise ValueError(
                f"the header ends early. Received: {len(data)} of {size} bytes"
            )
        return struct.unpack(fmt, data)

    def _string(self):
        (size,) = self._read("<Q")
        data = self._f.read(size)
        if len(data) != size:
            raise ValueError(
                f"the header ends early. Received: {len(data)} of {size} bytes"
            )
        return data.decode("utf-8")

    def _value(self, kind):
        if kind in SCALARS:
            return self._read("<" + SCALARS[kind])[0]
        if kind == STRING:
            return self._string()
        if kind != ARRAY:
            raise ValueError(f"metadata value type {kind}. Received: kind={kind!r}")
        kind, count = self._read("<IQ")
        if kind in SCALARS:  # numbers in one read
            return list(self._read(f"<{count}{SCALARS[kind]}"))
        return [self._value(kind) for _ in range(count)]

    @staticmethod
    def _tensor(name, dims, kind, offset, start, size, path):
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        kind = GGMLQuantizationType(kind)
        block, block_bytes = GGML_QUANT_SIZES[kind]
        n_bytes = int(np.prod(dims, dtype=np.int64)) * block_bytes // block
        if start + offset + n_bytes > size:
            raise ValueError(
                f"tensor {name!r} runs past the file's end. Received: "
                f"offset={start + offset}, n_bytes={n_bytes} in a file of {size} bytes"
            )
        return Tensor(name, kind, dims, n_bytes, start + offset, path)


def metadata(source):
    """The metadata of a `GGUFFile`, or of a `gguf.GGUFReader` (read its
    way: the tests compare the two) as `{key: value}` (ints, floats,
    bools, strings and lists of them), without the header's own counts."""
    if isinstance(source, GGUFFile):
        return source.metadata
    return {
        key: _value(field)
        for key, field in source.fields.items()
        if not key.startswith("GGUF.")
    }


def _value(field):
    """One metadata field as a Python value. `field.parts[i]` for `i` in
    `field.data` are its values: byte arrays for strings, one-element
    arrays for numbers; `field.types` is `[type]` or `[ARRAY, type]`."""
    from gguf import GGUFValueType

    kind = field.types[-1]
    values = [field.parts[i] for i in field.data]
    if kind == GGUFValueType.STRING:
        values = [bytes(v).decode("utf-8") for v in values]
    else:
        values = [v[0].item() for v in values]
    if field.types[0] == GGUFValueType.ARRAY:
        return values
    return values[0]


class Tensor(NamedTuple):
    """A tensor's description, without the reader (whose memory maps and
    metadata it would keep alive): ggml's `shape` (inputs first), its
    `tensor_type` (`gguf.GGMLQuantizationType`), where its bytes are."""

    name: str
    tensor_type: object
    shape: tuple
    n_bytes: int
    data_offset: int
    path: str  # the file holding it (split models have several)


class TensorBytes:
    """The raw bytes of a GGUF file's tensors, read through a memory map
    whose pages are released after each tensor (`release`), so that the
    file never stays resident: loading a model holds the model and one
    tensor being converted, not the file beside them.

    (The `gguf` reader maps the file too, as `numpy.memmap`; its tensor
    views keep every page they touched resident, and indexing a memmap
    costs a Python call per slice, which its dequantization does per 16
    rows.)
    """

    def __init__(self):
        self._maps = {}  # path -> map, opened when first read

    def _map(self, tensor):
        if tensor.path not in self._maps:
            with open(tensor.path, "rb") as f:
                self._maps[tensor.path] = mmap.mmap(
                    f.fileno(), 0, access=mmap.ACCESS_READ
                )
        return self._maps[tensor.path]

    def rows(self, tensor):
        """The tensor's bytes as a uint8 `(rows, row bytes)` array (a view
        of the map: valid until `close`): ggml's rows are its first
        dimension, `tensor.shape[0]` values each."""
        count = int(np.prod([int(n) for n in tensor.shape[1:]]))
        data = np.frombuffer(
            self._map(tensor), np.uint8, int(tensor.n_bytes), int(tensor.data_offset)
        )
        return data.reshape(count, -1)

    def release(self, tensor):
        """Drops the tensor's pages from this process's resident memory
        (the file stays mapped; a later read pages them in again)."""
        page = mmap.PAGESIZE
        start = int(tensor.data_offset) // page * page
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        self._map(tensor).madvise(mmap.MADV_DONTNEED, start, end - start)

    def close(self):
        for mapped in self._maps.values():
            mapped.close()
