"""Argument checks that every subpackage shares (layers, models, text,
training, generation, export): each raises a ValueError that names the
argument and quotes the value received, before any work is done."""


def check_positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive integer. Received: {name}={value!r}"
        )


def check_bool(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")


def check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"`{name}` must be a float in [0, 1). Received: {name}={value!r}"
        )
    if not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {list(choices)}. Received: {name}={value!r}"
        )


def check_rank(name, shape, rank):
    """Checks a static shape's rank; `shape` may contain None dimensions."""
    if shape is None:
        return
    if len(shape) != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}. "
            f"Received: {name} with shape {tuple(shape)}"
        )


def check_mask_shape(name, mask_shape, expected_shape):
    """Checks that each known dimension of a mask matches `expected_shape`."""
    mask_shape = tuple(mask_shape)
    expected_shape = tuple(expected_shape)
    mismatch = len(mask_shape) != len(expected_shape) or any(
        m is not None and e is not None and m != e and m != 1
        for m, e in zip(mask_shape, expected_shape, strict=False)
    )
    if mismatch:
        raise ValueError(
            f"`{name}` must have shape {expected_shape} (None = any size). "
            f"Received: {name} with shape {mask_shape}"
        )


def describe(value):
    """A short description of `value` for error messages."""
    import keras

    if isinstance(value, keras.Model):
        return f"a {type(value).__name__} named {value.name!r}"
    return repr(value)
