"""Argument checks that every subpackage shares (layers, models, text,
training, generation, export): each raises a ValueError that names the
argument and quotes the value received, before any work is done.

Also the one JSON reader every package uses (`read_json`), whose errors
name the file and the line.
"""

import contextvars
import copy
import functools
import json
import numbers
import os


def is_int(value):
    """An integer (Python or numpy) that is not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive integer. Received: {name}={value!r}"
        )


def check_positive_number(name, value):
    """An int or float > 0 (not a bool, not NaN)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not value > 0 or value == float("inf"):
        raise ValueError(
            f"`{name}` must be a finite number > 0. Received: {name}={value!r}"
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


def check_class(name, value, classes):
    """`value` is an instance of one of `classes` (our model classes), or a
    ValueError naming the argument and the classes."""
    if not isinstance(value, tuple(classes)):
        names = " or ".join(f"kt.models.{cls.__name__}" for cls in classes)
        raise ValueError(f"`{name}` must be a {names}. Received: {name}={value!r}")


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


def check_max_new_tokens(value, name="max_new_tokens"):
    """A whole number of tokens to generate, >= 0; returns it as an int."""
    if not is_int(value) or value < 0:
        raise ValueError(
            f"`{name}` must be an integer >= 0. Received: {name}={value!r}"
        )
    return int(value)


def check_model(model, classes, exporter):
    """Raises a ValueError unless `model` is an instance of `classes`."""
    if not isinstance(model, classes):
        classes = classes if isinstance(classes, tuple) else (classes,)
        names = " or ".join(f"kt.models.{c.__name__}" for c in classes)
        raise ValueError(
            f"`{exporter}` needs a {names}. Received: model={describe(model)}"
        )


def check_sequence_length(sequence_length, limit, minimum):
    """`sequence_length` (None: the model's `limit`) in `[minimum, limit]`."""
    if sequence_length is None:
        sequence_length = limit
    if (
        isinstance(sequence_length, bool)
        or not isinstance(sequence_length, int)
        or not minimum <= sequence_length <= limit
    ):
        raise ValueError(
            f"`sequence_length` must be an integer in [{minimum}, {limit}] (the "
            f"model's max_sequence_length is {limit}). "
            f"Received: sequence_length={sequence_length!r}"
        )
    return sequence_length


def check_max_new_tokens_fit(max_new_tokens, limit, first_position):
    """A generating export's cap on new tokens, in `[1, limit - 1]`: the
    first of the model's `limit` positions holds `first_position` (what the
    error says holds it)."""
    max_new_tokens = check_max_new_tokens(max_new_tokens)
    if not 1 <= max_new_tokens < limit:
        raise ValueError(
            "`max_new_tokens` must be in [1, max_sequence_length - 1] (the "
            f"model's max_sequence_length is {limit}, and {first_position} "
            f"takes one position). Received: max_new_tokens={max_new_tokens!r}"
        )
    return max_new_tokens


def check_top_k(top_k, vocabulary_size):
    """`top_k` as an int in `[1, vocabulary_size]`, or a ValueError."""
    if not is_int(top_k) or not 1 <= top_k <= vocabulary_size:
        raise ValueError(
            f"`top_k` must be an integer in [1, {vocabulary_size}] (the "
            f"vocabulary size). Received: top_k={top_k!r}"
        )
    return int(top_k)


def _is_token_id(value, vocabulary_size):
    return (
        is_int(value)
        and value > 0
        and (vocabulary_size is None or value < vocabulary_size)
    )


def _bound(vocabulary_size):
    return "" if vocabulary_size is None else f" and < {vocabulary_size}"


def check_token_id(name, value, vocabulary_size=None):
    """A token id > 0 (0 is padding), below `vocabulary_size` when given;
    returns it as an int."""
    if not _is_token_id(value, vocabulary_size):
        raise ValueError(
            f"`{name}` must be a token id > 0{_bound(vocabulary_size)} (0 is "
            f"padding). Received: {name}={value!r}"
        )
    return int(value)


def check_token_ids(name, value, vocabulary_size=None):
    """A non-empty iterable of token ids as `check_token_id` takes them (or
    one id); returns them sorted and without repeats, as a tuple."""
    if is_int(value):
        value = (value,)
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValueError(
            f"`{name}` must be a token id or a list of token ids > 0. "
            f"Received: {name}={value!r}"
        )
    ids = list(value)
    if not ids:
        raise ValueError(f"`{name}` must not be empty. Received: {name}={value!r}")
    if not all(_is_token_id(token_id, vocabulary_size) for token_id in ids):
        raise ValueError(
            f"`{name}` must hold token ids > 0{_bound(vocabulary_size)} (0 is "
            f"padding). Received: {name}={value!r}"
        )
    return tuple(sorted({int(i) for i in ids}))


# The JSON files read in the current `reads_once` scope: real path -> the
# parsed document (files of at most `ONCE_LIMIT` bytes).
_READ = contextvars.ContextVar("kt_json_read", default=None)
ONCE_LIMIT = 1 << 20


def reads_once(function):
    """Decorator: within a call of `function` (and the calls it makes), each
    small JSON file is read from disk once; later reads get a copy. A
    folder's loading goes through several levels (the task, the model, the
    family, the tokenizer) that each read `config.json`; they share one
    read. The next call reads the files again."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if _READ.get() is not None:  # an outer call's scope
            return function(*args, **kwargs)
        token = _READ.set({})
        try:
            return function(*args, **kwargs)
        finally:
            _READ.reset(token)

    return wrapper


def read_json(path, missing_ok=False):
    """The JSON document at `path`.

    A file that is not valid UTF-8 JSON raises a ValueError naming the file,
    the line and the column. A missing file returns None when `missing_ok`,
    and otherwise raises FileNotFoundError naming it. Inside a `reads_once`
    call, a small file is read once and each read gets its own copy.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        if missing_ok:
            return None
        raise FileNotFoundError(f"No such file: {path!r}. Received: path={path!r}")
    read = _READ.get()
    if read is None or os.path.getsize(path) > ONCE_LIMIT:
        return _read_json(path)
    key = os.path.realpath(path)
    if key not in read:
        read[key] = _read_json(path)
    return copy.deepcopy(read[key])


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path!r} is not valid JSON: {error.msg} at line {error.lineno}, "
            f"column {error.colno}. Received: path={path!r}"
        ) from None
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path!r} is not valid JSON: not UTF-8 text ({error.reason} at "
            f"byte {error.start}). Received: path={path!r}"
        ) from None
