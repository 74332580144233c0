"""What the exporters share: argument checks and writing a SavedModel whole.

Shape legend: B batch, T sequence length.
"""

import os
import shutil
import uuid

import tensorflow as tf

from keras_transformer import _validation as validation


def check_path(path, overwrite):
    """The absolute path to write, or a ValueError if it is taken."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise ValueError(
            "`path` must be a directory path (str or os.PathLike). "
            f"Received: path={path!r}"
        )
    validation.check_bool("overwrite", overwrite)
    path = os.path.abspath(os.fspath(path))
    taken = os.path.lexists(path) and not (
        os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)
    )
    if taken and not overwrite:
        raise ValueError(
            "`path` already exists and is not an empty directory; pass "
            f"overwrite=True to replace it. Received: path={path!r}"
        )
    return path


def string_spec(name):
    return tf.TensorSpec([None], tf.string, name=name)


def save(module, signatures, path):
    """Saves `module` next to `path`, then moves it there in one rename.

    A failed export removes its temporary directory and leaves `path` as it
    was. An existing `path` (already checked by `check_path`) is replaced.
    Every export's `serving_default` takes one string tensor and nothing
    else, so a client that sends only its inputs (TF Serving's
    `{"instances": [...]}`) is served.
    """
    serving = signatures["serving_default"].input_signature
    if len(serving) != 1 or serving[0].dtype != tf.string:
        raise ValueError(  # a defect of an exporter, never of a user's call
            "An export's serving_default must take one string tensor. "
            f"Received: input_signature={serving!r}"
        )
    # Track the tf.Variables the signatures read, as keras.Model.export does:
    # session-based loaders (TF Serving, `saved_model_cli run`) cannot find
    # them through the Keras variables that wrap them.
    variables = {}
    for function in signatures.values():
        for variable in function.get_concrete_function().variables:
            variables[id(variable)] = variable
    module.variables_read = list(variables.values())
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(
        parent, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp"
    )
    try:
        tf.saved_model.save(module, staging, signatures=signatures)
        if os.path.lexists(path):
            old = staging + ".old"
            os.rename(path, old)
            try:
                os.rename(staging, path)
            except OSError:
                os.rename(old, path)
                raise
            _remove(old)
        else:
            os.rename(staging, path)
    finally:
        if os.path.lexists(staging):
            _remove(staging)
    return path


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)
