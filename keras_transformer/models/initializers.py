"""The models' weight initializers and dtype policy while building.

`initializer` and `normal_initializer` give Keras initializers, or zeros
inside `placeholder_weights()` (where `from_pretrained` assigns every
weight afterwards); `global_dtype_policy` builds a model under the dtype
policy it was saved with.
"""

import contextlib
import threading

import keras

_PLACEHOLDERS = threading.local()


def initializer(identifier):
    """The Keras initializer `identifier`; zeros inside
    `placeholder_weights()`, where `from_pretrained` assigns every weight
    afterwards."""
    if getattr(_PLACEHOLDERS, "active", False):
        return keras.initializers.Zeros()
    return keras.initializers.get(identifier)


def normal_initializer(stddev=0.02):
    """BERT/GPT-2 initialize weights from N(0, 0.02²); zeros inside
    `placeholder_weights()`."""
    return initializer(keras.initializers.TruncatedNormal(stddev=stddev))


@contextlib.contextmanager
def placeholder_weights():
    """Models built inside start from zeros, not from random draws.

    For `from_pretrained`, which overwrites every weight it builds: drawing
    a GPT-2 small's 124M truncated-normal numbers takes about two seconds on
    two CPU cores, zeros almost nothing. Weights a checkpoint lacks must be
    drawn afterwards with `normal_initializer()`.
    """
    before = getattr(_PLACEHOLDERS, "active", False)
    _PLACEHOLDERS.active = True
    try:
        yield
    finally:
        _PLACEHOLDERS.active = before


@contextlib.contextmanager
def global_dtype_policy(name):
    """Sets Keras' global dtype policy to `name` inside (None: unchanged).

    Our models' layers take the global policy when they are built (none is
    given one but the float32 heads), so a model rebuilt from its config
    must be built under the policy it was built under, not the one that
    happens to be global when a `.keras` file is loaded.
    """
    before = keras.config.dtype_policy()
    if name is not None:
        keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)
