"""GGUF files (llama.cpp's single-file checkpoints), read with the `gguf`
package (llama.cpp's own reader: numpy only, the file memory-mapped).

The one reader `kt.models`, `kt.text` and `kt.tasks` share: a file's
metadata as plain Python values (`{"llama.block_count": 30,
"tokenizer.ggml.tokens": [...], ...}`) and its tensors' descriptions.
No tensor is read here; `pretrained/gguf.py` reads and converts them.
"""

import os

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
    """A `gguf.GGUFReader` of the file at `path`.

    Raises:
        FileNotFoundError: no file at `path`, naming it.
        ImportError: the `gguf` package is missing.
        ValueError: the file is not a GGUF file (or is truncated).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No GGUF file at `path`. Received: path={path!r}")
    gguf = gguf_module()
    try:
        return gguf.GGUFReader(path)
    except Exception as error:  # the reader raises ValueError, struct errors...
        raise ValueError(
            f"Cannot read {path!r} as a GGUF file (broken or truncated?): {error}"
        ) from None


def metadata(reader):
    """The file's metadata as `{key: value}` (ints, floats, bools, strings
    and lists of them), without the header's own `GGUF.*` counts."""
    return {
        key: _value(field)
        for key, field in reader.fields.items()
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
