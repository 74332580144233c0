"""What the tasks' text methods share: checking texts before any work,
tokenizing them to rows of ids, padding, stop strings.

Shape legend: B texts, P the longest row.
"""

import numpy as np
import tensorflow as tf

from keras_transformer.text.checks import is_string_spec, preview


def check_texts(name, texts):
    """`(single, list of str)`: whether `texts` was one string, and the
    strings; a ValueError for an empty list, a non-string or an empty
    string."""
    single = isinstance(texts, str)
    items = [texts] if single else texts
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(
            f"`{name}` must be a non-empty string or a non-empty list of them. "
            f"Received: {name}={preview(texts) if isinstance(texts, list) else texts!r}"
        )
    for index, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise ValueError(
                f"`{name}` must hold non-empty strings; item {index} is "
                f"{item!r}. Received: {name}={preview(list(items))}"
            )
    return single, list(items)


def check_stop(stop):
    """`stop` (None, a string, or a list of strings) as a tuple of
    non-empty strings."""
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stops, list | tuple)
        or not stops
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise ValueError(
            "`stop` must be a non-empty string or a list of them. "
            f"Received: stop={stop!r}"
        )
    return tuple(stops)


def cut_at_stop(text, stops):
    """`text` cut before the earliest occurrence of any of `stops`."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return text[: min(found)] if found else text


def tokenize(tokenizer, texts, name, keep_last=None):
    """Each text's ids, a list of int32 numpy rows; with `keep_last`, only
    the last `keep_last` ids of each. A text of no tokens is a ValueError."""
    ids = tokenizer.tokenize(tf.constant(texts)).to_list()
    rows = []
    for text, row in zip(texts, ids, strict=True):
        if not row:
            raise ValueError(
                f"`{name}` must each give at least one token; {text!r} gives "
                f"none. Received: {name}={preview(texts)}"
            )
        rows.append(np.asarray(row[-keep_last:] if keep_last else row, "int32"))
    return rows


def pad(rows):
    """Rows of ids as one int32 array `(B, P)`, 0-padded on the right."""
    out = np.zeros((len(rows), max(len(r) for r in rows)), "int32")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def text_dataset(x):
    """`x` as a `tf.data.Dataset` of single strings when it is texts (a
    list of strings, or such a dataset), else None."""
    if isinstance(x, tf.data.Dataset):
        return x if is_string_spec(x.element_spec) else None
    if isinstance(x, list | tuple) and x and all(isinstance(t, str) for t in x):
        check_texts("x", list(x))
        return tf.data.Dataset.from_tensor_slices(list(x))
    return None
