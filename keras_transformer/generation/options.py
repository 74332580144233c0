"""The checks of the options every sampler takes (`kt.generation.Sampler`'s
keyword arguments; `kt.generation.processors` applies them)."""

from keras_transformer import _validation as validation

# The generation_config keys that are `generate`'s own; the rest are the
# sampler's options.
NOT_SAMPLER_OPTIONS = ("end_token_id", "max_new_tokens", "sampler")


def check_temperature(temperature):
    """A number > 0."""
    number = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if not number or temperature <= 0:
        raise ValueError(
            f"`temperature` must be a number > 0. Received: temperature={temperature!r}"
        )
    return temperature


def check_count(name, value):
    """A non-negative int (0 turns the option off)."""
    if not validation.is_int(value) or value < 0:
        raise ValueError(
            f"`{name}` must be an integer >= 0. Received: {name}={value!r}"
        )
    return int(value)


def check_id_list(name, value):
    """A list of token ids, possibly empty (the option off)."""
    if validation.is_int(value):  # one id, which the shared check would take
        raise ValueError(
            f"`{name}` must be a list of token ids > 0. Received: {name}={value!r}"
        )
    if not isinstance(value, str | bytes) and getattr(value, "__len__", None):
        if len(value) == 0:
            return ()
    return validation.check_token_ids(name, value)
