"""What the exporters share: argument checks and writing a SavedModel whole.

Shape legend: B batch, T sequence length.
"""

import os
import shutil
import uuid

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text.packing import pack_segments
from keras_transformer.text.tokenizer import Tokenizer


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


def check_model(model, classes, exporter):
    """Raises a ValueError unless `model` is an instance of `classes`."""
    if not isinstance(model, classes):
        classes = classes if isinstance(classes, tuple) else (classes,)
        names = " or ".join(f"kt.models.{c.__name__}" for c in classes)
        raise ValueError(
            f"`{exporter}` needs a {names}. "
            f"Received: model={validation.describe(model)}"
        )


def check_tokenizer(tokenizer, name, model_vocabulary_size):
    """Checks `tokenizer` is a `kt.text` tokenizer whose ids fit the model."""
    if not isinstance(tokenizer, Tokenizer):
        raise ValueError(
            f"`{name}` must be a keras_transformer.text tokenizer. "
            f"Received: {name}={tokenizer!r}"
        )
    if tokenizer.emitted_vocabulary_size() > model_vocabulary_size:
        raise ValueError(
            f"`{name}` has {tokenizer.emitted_vocabulary_size()} tokens, more "
            f"than the model's vocabulary_size ({model_vocabulary_size}). "
            f"Received: {name}={tokenizer!r}"
        )


def without_sequence_length(tokenizer):
    """A copy of `tokenizer` that returns ragged ids (or itself if it does)."""
    if tokenizer.sequence_length is None:
        return tokenizer
    config = {**tokenizer.get_config(), "sequence_length": None}
    return type(tokenizer).from_config(config)


def token_id(tokenizer, name, token, allow_none=False):
    """The id of `token` (the value of argument `name`), or a ValueError."""
    if token is None and allow_none:
        return None
    if not isinstance(token, str) or token not in tokenizer.get_vocabulary():
        raise ValueError(
            f"`{name}` must be a token of the tokenizer's vocabulary. "
            f"Received: {name}={token!r}"
        )
    return tokenizer.token_to_id(token)


def end_token_ids(tokenizer, name, token, allow_none=False):
    """The id of `token`, or the ids of a list of tokens (any of them ends a
    sequence), the value of argument `name`; None for None if
    `allow_none`; else a ValueError."""
    if isinstance(token, list | tuple):
        if not token:
            raise ValueError(
                f"`{name}` must be a token or a non-empty list of tokens. "
                f"Received: {name}={token!r}"
            )
        ids = []
        for item in token:
            if not isinstance(item, str) or item not in tokenizer.get_vocabulary():
                raise ValueError(
                    f"`{name}` must list tokens of the tokenizer's vocabulary. "
                    f"Received: {name}={token!r}"
                )
            ids.append(tokenizer.token_to_id(item))
        return list(dict.fromkeys(ids))
    return token_id(tokenizer, name, token, allow_none)


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


def check_max_new_tokens(max_new_tokens, limit, first_position):
    """A generating export's cap on new tokens, in `[1, limit - 1]`: the
    first of the model's `limit` positions holds `first_position` (what the
    error says holds it)."""
    max_new_tokens = validation.check_max_new_tokens(max_new_tokens)
    if not 1 <= max_new_tokens < limit:
        raise ValueError(
            "`max_new_tokens` must be in [1, max_sequence_length - 1] (the "
            f"model's max_sequence_length is {limit}, and {first_position} "
            f"takes one position). Received: max_new_tokens={max_new_tokens!r}"
        )
    return max_new_tokens


def pack_bert_inputs(tokenizer, texts, sequence_length, cls_id, sep_id):
    """`[CLS] A [SEP] (B [SEP])` model inputs `(B, T)` from string batches."""
    segments = [tokenizer.tokenize(text) for text in texts]  # (B, None) each
    return pack_segments(segments, sequence_length, cls_id, sep_id)


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
