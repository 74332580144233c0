"""Hugging Face checkpoint folders on disk: `config.json` and the weights in
`model.safetensors` (or shards listed in `model.safetensors.index.json`),
read and written with the `safetensors` package's numpy API (no torch)."""

import collections.abc
import json
import os

import numpy as np
import tensorflow as tf

from keras_transformer._validation import read_json
from keras_transformer.pretrained.row_source import RowSource

INDEX = "model.safetensors.index.json"
WEIGHTS = "model.safetensors"


def check_folder(path):
    """`path` as a string, or a FileNotFoundError naming it."""
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            "`path` must be a checkpoint folder with a config.json. "
            f"Received: path={path!r}"
        )
    return path


def read_config(path):
    """The folder's `config.json` as a dict."""
    return _read_object(os.path.join(path, "config.json"))


def read_generation_config(path):
    """The folder's `generation_config.json` as a dict, or None."""
    return _read_object(os.path.join(path, "generation_config.json"), missing_ok=True)


def _read_object(file, missing_ok=False):
    """A JSON file holding an object: a dict, or None when `missing_ok` and
    the file is missing; errors name the file."""
    data = read_json(file, missing_ok=missing_ok)
    if data is not None and not isinstance(data, dict):
        raise ValueError(
            f"{file!r} must hold a JSON object. Received: {type(data).__name__}"
        )
    return data


def _shards(path):
    """The shard files a `model.safetensors.index.json` names, each checked
    to lie inside the checkpoint folder (a `..`, an absolute path or a
    symbolic link out of it is refused, naming it) before any is read."""
    index = os.path.join(path, INDEX)
    weight_map = _read_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(name, str) for name in weight_map.values()
    ):
        raise ValueError(
            f"{index!r} must map tensor names to shard files in `weight_map`. "
            f"Received: weight_map={weight_map!r}"
        )
    folder = os.path.realpath(path)
    names = sorted(set(weight_map.values()))
    for name in names:
        file = os.path.realpath(os.path.join(folder, name))
        if os.path.isabs(name) or os.path.commonpath([folder, file]) != folder:
            raise ValueError(
                f"{index!r} names a shard outside the checkpoint folder; shards "
                f"must lie in it. Received: {name!r}"
            )
    return names


def read_weights(path, dtype="float32"):
    """All tensors of the folder as a dict of numpy arrays, cast to `dtype`
    (`"float32"`, `"float16"` or `"bfloat16"`; None keeps each tensor's
    stored type). With `dtype=None`, files holding bfloat16 tensors are
    not read here: the mapping reads each tensor when it is looked up
    (`TensorFile`), so a loader that assigns one tensor at a time holds
    one at a time."""
    from safetensors.numpy import load_file

    if os.path.isfile(os.path.join(path, INDEX)):
        files = _shards(path)
    elif os.path.isfile(os.path.join(path, WEIGHTS)):
        files = [WEIGHTS]
    else:
        hint = ""
        if os.path.isfile(os.path.join(path, "pytorch_model.bin")):
            hint = (
                " It has a pytorch_model.bin: convert it to safetensors first "
                "(transformers' `save_pretrained` writes model.safetensors)."
            )
        raise FileNotFoundError(
            f"No {WEIGHTS} or {INDEX} in the checkpoint folder.{hint} "
            f"Received: path={path!r}"
        )
    weights = TensorFile()
    for name in files:
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise FileNotFoundError(
                f"The checkpoint's {INDEX} names a shard that is missing: {file!r}. "
                f"Received: path={path!r}"
            )
        try:
            size, header = _header(file)
            if any(entry.get("dtype") == "BF16" for entry in header.values()):
                weights.add_file(file, size, header)
            else:
                weights.add_arrays(load_file(file))
        except Exception as error:  # safetensors raises its own error types
            raise ValueError(
                f"Cannot read {file!r} as safetensors (broken or truncated?): {error}. "
                f"Received: path={path!r}"
            ) from None
    if dtype is None:
        return weights
    dtype = numpy_dtype(dtype)
    return {k: weights[k].astype(dtype, copy=False) for k in weights}


def numpy_dtype(name):
    """The numpy dtype of a Keras dtype name; bfloat16 is ml_dtypes' (a
    Keras dependency), which TensorFlow and JAX take."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


# safetensors' dtype names of the tensors `TensorFile` reads and
# `_write_tensors` writes.
DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _header(file):
    """`(size, entries)` of a safetensors file's header: an 8-byte
    little-endian size, then a JSON object of tensor entries."""
    with open(file, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if size > os.path.getsize(file) - 8:
            raise ValueError(
                f"a header of {size} bytes in a shorter file. "
                f"Received: a file of {os.path.getsize(file)} bytes"
            )
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return size, header


class TensorFile(collections.abc.Mapping):
    """A checkpoint's tensors by name: arrays already read, and tensors of
    safetensors files read from the file each time they are looked up (the
    safetensors package's numpy API has no bfloat16). Nothing read is kept,
    so a loader's memory holds the tensors it holds, not the file."""

    def __init__(self):
        self._arrays = {}
        self._entries = {}  # name -> (file, offset, dtype, shape)

    def add_arrays(self, arrays):
        self._arrays.update(arrays)

    def add_file(self, file, size, header):
        """Adds the tensors of a safetensors file (its header's `size` and
        entries), checked against the file's length."""
        data_size = os.path.getsize(file) - 8 - size
        for name, entry in header.items():
            if entry.get("dtype") not in DTYPES:
                raise ValueError(
                    f"tensor {name!r} has dtype {entry.get('dtype')!r}. "
                    f"Received: dtype={entry.get('dtype')!r}"
                )
            start, end = entry["data_offsets"]
            dtype = numpy_dtype(DTYPES[entry["dtype"]])
            count = int(np.prod(entry["shape"]))
            if end > data_size or end - start != dtype.itemsize * count:
                raise ValueError(
                    f"tensor {name!r} does not fit its bytes. Received: "
                    f"data_offsets={[start, end]}, shape={entry['shape']}, "
                    f"dtype={entry['dtype']!r} in {data_size} data bytes"
                )
            shape = tuple(entry["shape"])
            self._entries[name] = (file, 8 + size + start, dtype, shape)

    def placeholder(self, name):
        """A zero-stride array of the tensor's shape and dtype (nothing
        read), for checks."""
        if name in self._arrays:
            return self._arrays[name]
        _, _, dtype, shape = self._entries[name]
        return np.broadcast_to(np.zeros((), dtype), shape)

    def __getitem__(self, name):
        if name in self._arrays:
            return self._arrays[name]
        file, offset, dtype, shape = self._entries[name]
        array = np.empty(shape, dtype)
        with open(file, "rb") as f:
            f.seek(offset)
            f.readinto(memoryview(array.reshape(-1).view(np.uint8)))
        return array

    def __contains__(self, name):  # Mapping's would read the tensor
        return name in self._arrays or name in self._entries

    def __iter__(self):
        return iter([*self._arrays, *self._entries])

    def __len__(self):
        return len(self._arrays) + len(self._entries)


def _write_tensors(weights, file, metadata):
    """Writes a safetensors file holding bfloat16 tensors (which the
    safetensors package's numpy API cannot write)."""
    names = {numpy_dtype(v): k for k, v in DTYPES.items()}
    # safetensors' order: wider types first, then by name.
    weights = dict(sorted(weights.items(), key=lambda i: (-i[1].itemsize, i[0])))
    header, offset = {"__metadata__": metadata}, 0
    for name, value in weights.items():
        size = value.nbytes
        header[name] = {
            "dtype": names[value.dtype],
            "shape": list(value.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(file, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for value in weights.values():
            f.write(np.ascontiguousarray(value).tobytes())


def write_folder(path, config, weights, generation=None):
    """Writes `config.json` and `model.safetensors` (and
    `generation_config.json`) into `path`; returns its absolute path."""
    from safetensors.numpy import save_file

    path = os.path.abspath(os.fspath(path))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    if generation is not None:
        with open(
            os.path.join(path, "generation_config.json"), "w", encoding="utf-8"
        ) as f:
            json.dump(generation, f, indent=2, sort_keys=True)
    file = os.path.join(path, WEIGHTS)
    if any(v.dtype == numpy_dtype("bfloat16") for v in weights.values()):
        _write_tensors(weights, file, {"format": "pt"})
    else:
        save_file(dict(weights), file, metadata={"format": "pt"})
    return path


def check_tokenizer_size(size, vocabulary_size, tokenizer):
    """A ValueError when a tokenizer of `size` ids has more than the
    model's `vocabulary_size`: they do not belong together."""
    if size > vocabulary_size:
        raise ValueError(
            f"`tokenizer` has {size} ids but `model` only {vocabulary_size}: "
            f"they do not belong together. Received: tokenizer={tokenizer!r}"
        )


# Converters `(to ours, to theirs)` between checkpoint and Keras layouts.
SAME = (lambda w: w, lambda w: w)


def head_converters(heads, size):
    """`(split, split_bias, merge)`: each a `(to ours, to theirs)` pair that
    maps an attention tensor between torch's `nn.Linear` layout and ours.

    `split` takes a query/key/value kernel, torch `(H*D, E)` <-> Keras
    `(E, H, D)`; `split_bias` its bias, `(H*D,)` <-> `(H, D)`; `merge` the
    output kernel, torch `(E, H*D)` <-> Keras `(H, D, E)`.
    """
    split = (
        lambda w: w.T.reshape(-1, heads, size),
        lambda w: w.reshape(w.shape[0], -1).T,
    )
    split_bias = (lambda b: b.reshape(heads, size), lambda b: b.reshape(-1))
    merge = (
        lambda w: w.T.reshape(heads, size, -1),
        lambda w: w.reshape(heads * size, -1).T,
    )
    return split, split_bias, merge


def norm_pairs(name, layer):
    """The two tensors of a LayerNorm, `{name}.weight` and `{name}.bias`."""
    return [
        (f"{name}.weight", layer.gamma, SAME),
        (f"{name}.bias", layer.beta, SAME),
    ]


def check_architecture(config, family, architectures):
    """The config's first `architectures` entry (default the first of
    `architectures`), or a ValueError listing the supported ones."""
    architecture = (config.get("architectures") or [architectures[0]])[0]
    if architecture not in architectures:
        raise ValueError(
            f"Unsupported {family} architecture (supported: {list(architectures)}). "
            f"Received: architectures={config.get('architectures')!r}"
        )
    return architecture


def check_supported(config, family, supported):
    """Each `key: allowed values` of `supported` holds in the config (a
    missing key takes its first allowed value), or a ValueError naming the
    key and value."""
    for key, allowed in supported.items():
        value = config.get(key, allowed[0])
        if value not in allowed:
            raise ValueError(
                f"This {family} checkpoint's `{key}` is not supported (supported: "
                f"{list(allowed)}). Received: {key}={value!r}"
            )


def assign(pairs, weights, find_key, ignored=()):
    """Assigns checkpoint tensors to our variables, all or none.

    Args:
        pairs: `(name, variables, (to_ours, to_theirs))` for every tensor:
            `variables` is one variable, or a tuple of them that one tensor
            is split into (`to_ours` then returns a tuple of arrays).
        weights: the checkpoint's tensors by name.
        find_key: `(weights, name) -> key`: the checkpoint's key for `name`
            (prefixes and old names), or a ValueError naming it.
        ignored: suffixes of keys that carry nothing (buffers, tied copies).

    Raises:
        ValueError: a tensor missing, of the wrong shape, or unused; checked
            for every tensor before anything is assigned.
    """
    # Checked first, one tensor at a time, on placeholders where `weights`
    # gives them (a tensor's shape and dtype, nothing read).
    look_up = getattr(weights, "placeholder", weights.__getitem__)
    values, used = [], set()
    for name, variables, (to_ours, _) in pairs:
        key = find_key(weights, name)
        used.add(key)
        several = isinstance(variables, tuple)
        try:
            arrays = to_ours(look_up(key))
        except ValueError:  # a reshape that the shape does not allow
            arrays = None
        if not several:
            variables, arrays = (variables,), (arrays,)
        elif arrays is None:
            arrays = (None,) * len(variables)
        for variable, value in zip(variables, arrays, strict=True):
            if value is None or tuple(value.shape) != tuple(variable.shape):
                raise ValueError(
                    f"Checkpoint tensor {key!r} has shape {look_up(key).shape}, "
                    "which disagrees with its config.json (expected "
                    f"{tuple(variable.shape)} in our layout"
                    + (f", {len(variables)} times" if several else "")
                    + f"). Received: {key}.shape={tuple(look_up(key).shape)}"
                )
        values.append((key, variables, to_ours, several))
        arrays = value = None  # not kept: converted again when assigned
    unused = sorted(
        key
        for key in set(weights) - used
        if not any(key.endswith(suffix) for suffix in ignored)
    )
    if unused:
        raise ValueError(
            f"The checkpoint has {len(unused)} tensor(s) this architecture does "
            f"not use: {unused[:5]}. Received: a checkpoint of "
            f"{len(weights)} tensor(s)"
        )
    for key, variables, to_ours, several in values:  # then assigned, one by one
        arrays = to_ours(weights[key])
        for variable, value in zip(
            variables, arrays if several else (arrays,), strict=True
        ):
            assign_value(variable, value)
        arrays = value = None


BLOCK_BYTES = 1 << 25  # a large tensor crosses into TensorFlow 32 MB at a time


def assign_value(variable, value):
    """`variable.assign(value)`, in blocks of rows when `value` is large:
    TensorFlow then never holds a second whole copy of a tensor beside the
    variable (a bfloat16 0.5B model's embedding is 272 MB), so loading
    needs little more memory than the weights themselves.

    `value` may also be a `RowSource` (a table read from its file a block
    of rows at a time, never whole)."""
    if not isinstance(value, RowSource):
        value = np.asarray(value)
    if value.ndim == 0 or value.nbytes <= BLOCK_BYTES:
        variable.assign(value)
        return
    rows = value.shape[0]
    step = max(1, rows * BLOCK_BYTES // value.nbytes)
    # The backend's variable, its rows updated in place by a scatter (a
    # sliced `assign` reads the variable first, and TensorFlow then keeps
    # a second copy of it: 0.6 GB more for a 0.5B model's embedding).
    target = variable.value
    for start in range(0, rows, step):
        rows_now = np.ascontiguousarray(value[start : start + step])
        target.scatter_update(
            tf.IndexedSlices(rows_now, tf.range(start, start + len(rows_now)))
        )


def in_variable_dtype(pairs):
    """`pairs` whose `to ours` also casts to its variable's dtype (a
    bfloat16 file into float32 variables is upcast exactly; a float32 one
    into bfloat16 variables rounded as `astype` rounds)."""
    cast = []
    for name, variable, (to_ours, to_theirs) in pairs:
        dtype = numpy_dtype(variable.dtype)
        cast.append(
            (
                name,
                variable,
                (lambda w, f=to_ours, d=dtype: f(w).astype(d, copy=False), to_theirs),
            )
        )
    return cast


def tensors(pairs):
    """The checkpoint's tensors of `pairs` (as `assign` takes them), from
    our variables' values."""
    result = {}
    for name, variables, (_, to_theirs) in pairs:
        if isinstance(variables, tuple):
            value = to_theirs(tuple(np.asarray(v) for v in variables))
        else:
            value = to_theirs(np.asarray(variables))
        result[name] = np.ascontiguousarray(value)
    return result
