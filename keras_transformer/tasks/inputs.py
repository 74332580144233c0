"""What the tasks' text methods share: checking texts (or text pairs)
before any work, tokenizing them to rows of ids, padding, stop strings;
packing texts for BERT in the graph as the exporters do, and running a
compiled function batch by batch.

Shape legend: B texts, P the longest row, T sequence length.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text import checks as text_checks
from keras_transformer.text import packing
from keras_transformer.text.checks import is_string_spec, preview


def check_texts(name, texts, allow_empty=False):
    """`(single, list of str)`: whether `texts` was one string, and the
    strings; a ValueError naming `name` for an empty list, something other
    than strings, or (unless `allow_empty`) an empty string."""
    single = isinstance(texts, str)
    if single:
        items = [texts]
    elif isinstance(texts, list | tuple) or (
        isinstance(texts, np.ndarray) and texts.ndim == 1
    ):
        items = list(texts)
    else:
        raise ValueError(
            f"`{name}` must be a string or a list of strings. "
            f"Received: {name}={texts!r}"
        )
    if not items:
        raise ValueError(f"`{name}` must not be empty. Received: {name}={texts!r}")
    kind = "strings" if allow_empty else "non-empty strings"
    for index, item in enumerate(items):
        if not isinstance(item, str) or not (item or allow_empty):
            if single:
                raise ValueError(
                    f"`{name}` must be a non-empty string. Received: {name}=''"
                )
            raise ValueError(
                f"`{name}` must hold {kind}; item {index} is not. "
                f"Received: {name}[{index}]={item!r}"
            )
    return single, [str(item) for item in items]


def check_texts_or_pairs(name, texts):
    """`(single, segments)`: whether `texts` was one string, and one list
    of strings per segment (one for texts, two for `(text_a, text_b)`
    pairs); a ValueError naming `name` and the item that is neither."""
    if isinstance(texts, list | tuple) and texts and not isinstance(texts[0], str):
        for i, pair in enumerate(texts):
            if (
                not isinstance(pair, tuple | list)
                or len(pair) != 2
                or not all(isinstance(text, str) for text in pair)
            ):
                raise ValueError(
                    f"`{name}` holds pairs, so each item must be a pair "
                    f"(text_a, text_b) of two strings. Received: {name}[{i}]={pair!r}"
                )
        return False, [[str(a) for a, _ in texts], [str(b) for _, b in texts]]
    if not isinstance(texts, str | list | tuple | np.ndarray):
        raise ValueError(
            f"`{name}` must be a string, a list of strings or a list of "
            f"(text_a, text_b) pairs. Received: {name}={texts!r}"
        )
    single, texts = check_texts(name, texts, allow_empty=True)
    return single, [texts]


def check_batch_size(batch_size):
    validation.check_positive_int("batch_size", batch_size)


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


def cls_sep_ids(tokenizer, purpose):
    """The ids of `[CLS]` and `[SEP]` in `tokenizer`, or a ValueError
    naming `purpose`."""
    cls_id = text_checks.special_token_id(tokenizer, text_checks.CLS, purpose)
    sep_id = text_checks.special_token_id(tokenizer, text_checks.SEP, purpose)
    return cls_id, sep_id


def pack_texts(tokenizer, segments, sequence_length, cls_id, sep_id):
    """Model inputs `(B, T)` from string batches, packed as `kt.export` packs
    them (`[CLS] A [SEP] (B [SEP])`, trimmed to `sequence_length`), without
    the padding columns after the batch's longest text."""
    inputs = packing.pack_bert_inputs(
        tokenizer, segments, sequence_length, cls_id, sep_id
    )
    return without_padding_columns(inputs)


def without_padding_columns(inputs):
    """Packed inputs `(B, T)` cut after the batch's longest row: the padding
    they lose changes no output of a BERT model (no position attends to it,
    and each position's embedding is its own)."""
    lengths = tf.reduce_sum(tf.cast(inputs["padding_mask"], tf.int32), axis=1)
    longest = tf.reduce_max(lengths)
    return {name: value[:, :longest] for name, value in inputs.items()}


def in_batches(function, columns, batch_size):
    """`function(*columns[i:i + batch_size])` for each batch, as numpy."""
    results = []
    for start in range(0, len(columns[0]), batch_size):
        batch = [tf.constant(c[start : start + batch_size]) for c in columns]
        results.append(keras.tree.map_structure(np.asarray, function(*batch)))
    return results


def check_end_token(tokenizer, end_token):
    """`(end_token, end_token_id)` of the `end_token` argument: `(None,
    None)`, one token and its id, or a list of tokens and a tuple of ids."""
    several = isinstance(end_token, list | tuple)
    items = list(end_token) if several else [end_token]
    if end_token is None:
        return None, None
    size = tokenizer.vocabulary_size()
    tokens = []
    for item in items:
        if validation.is_int(item) and 0 < item < size:
            item = tokenizer.id_to_token(int(item))
        if not isinstance(item, str) or item not in tokenizer.get_vocabulary():
            item = None
        tokens.append(item)
    if not tokens or None in tokens:
        raise ValueError(
            "`end_token` must be a token of the tokenizer's vocabulary or its "
            "id (0 is padding), a list of them, 'auto' or None. Received: "
            f"end_token={end_token!r}"
        )
    ids = tuple(dict.fromkeys(tokenizer.token_to_id(t) for t in tokens))
    if several:
        return list(dict.fromkeys(tokens)), ids
    return tokens[0], ids[0]
