"""The compiled-function cache of generation and the tasks.

Compiled functions kept per model, and forgotten when its variables
change.

A `tf.function` traced on a model reads the variables the model had when
it was traced. `quantize`, `enable_lora`, `merge_lora` and `load_lora`
replace or add variables, so a function traced before them would keep
computing with the old ones: float weights after `quantize`, no adapter
after `enable_lora`. Each lookup therefore compares the model's variables
(which ones, not their values) with those the functions were traced on.
"""

import os

import tensorflow as tf

# TensorFlow's flag for its persistent XLA cache (read once per process).
CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def variables_signature(model):
    """Which variables `model` has: identity, dtype and shape of each."""
    return tuple((id(v), str(v.dtype), tuple(v.shape)) for v in model.weights)


class CompiledFunctions:
    """Dicts of compiled functions, one per owner (a model or a task),
    emptied when the owner's variables have changed.

    Each owner's dict is kept on the owner itself (an attribute Keras does
    not track), so it lives and dies with the owner. (A weak-keyed table
    did not free them: its values, functions closing over their owner, held
    the keys alive, and every model ever decoded stayed in memory.)

    Example:
        >>> import keras
        >>> from keras_transformer.generation.compiled import CompiledFunctions
        >>> cache = CompiledFunctions()
        >>> model = keras.Sequential([keras.layers.Dense(2)])
        >>> model.build((None, 3))
        >>> cache.of(model)["f"] = "traced"
        >>> cache.of(model)
        {'f': 'traced'}
        >>> model.layers[0].enable_lora(1)  # adds two variables
        >>> cache.of(model)
        {}
    """

    def __init__(self):
        self._attribute = f"_kt_compiled_functions_{id(self)}"

    def of(self, owner):
        """`owner`'s dict of functions (a new one if its variables changed)."""
        signature = variables_signature(owner)
        entry = owner.__dict__.get(self._attribute)
        if entry is None or entry[0] != signature:
            entry = (signature, {})
            object.__setattr__(owner, self._attribute, entry)  # untracked
        return entry[1]


def enable_compile_cache(directory=None):
    """Keeps XLA's compiled code on disk, so that a later process decoding
    the same model at the same shapes skips most of the compile.

    TensorFlow's persistent XLA cache (`TF_XLA_FLAGS`'s
    `--tf_xla_persistent_cache_directory`) is read when XLA first compiles
    in a process: call this before the first `generate`, `chat` or compiled
    call (importing the library compiles nothing). The files go into a
    folder per TensorFlow version under `directory`, since one version's
    compiled code is not another's. On this 2-core CPU machine it cut
    SmolLM2-135M's first reply in a second process by about a third (see
    docs/benchmarks.md); tracing the Python code and converting it for
    XLA still happen in every process.

    Args:
        directory: where to keep the cache; default
            `$XDG_CACHE_HOME/keras_transformer/xla` (`~/.cache/...`).

    Returns:
        The folder the compiled code goes to (made if missing).

    Raises:
        ValueError: `directory` is not a string or path, or is a file.

    Example:
        >>> import keras_transformer as kt
        >>> folder = kt.generation.enable_compile_cache("/tmp/kt-xla-cache")
        >>> folder.startswith("/tmp/kt-xla-cache/2.")  # the TF version
        True
    """
    if directory is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        directory = os.path.join(base, "keras_transformer", "xla")
    if not isinstance(directory, str | os.PathLike):
        raise ValueError(
            "`directory` must be a folder's path (a str or os.PathLike). "
            f"Received: directory={directory!r}"
        )
    if os.path.isfile(directory):
        raise ValueError(
            "`directory` must be a folder, not a file. "
            f"Received: directory={directory!r}"
        )
    folder = os.path.join(os.fspath(directory), tf.__version__)
    os.makedirs(folder, exist_ok=True)
    flags = [
        flag
        for flag in os.environ.get("TF_XLA_FLAGS", "").split()
        if not flag.startswith(f"{CACHE_FLAG}=")
    ]
    os.environ["TF_XLA_FLAGS"] = " ".join([*flags, f"{CACHE_FLAG}={folder}"])
    return folder
