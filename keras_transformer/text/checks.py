"""Reserved tokens and the input checks the tokenizers and builders share."""

import os

import tensorflow as tf

PAD, UNK, CLS, SEP, MASK, START, END = (
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[START]",
    "[END]",
)
# Vocabularies built here start with these, so the ids are the same
# everywhere: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], 5 [START], 6 [END].
RESERVED_TOKENS = (PAD, UNK, CLS, SEP, MASK, START, END)


def preview(tokens, count=5):
    """A short repr of a long token list for error messages."""
    tokens = list(tokens)
    head = ", ".join(repr(t) for t in tokens[:count])
    more = f", ... ({len(tokens)} tokens)" if len(tokens) > count else ""
    return f"[{head}{more}]"


def read_vocabulary(vocabulary, name="vocabulary"):
    """A list of tokens from a list or a path to a file with one token a line."""
    if isinstance(vocabulary, str | os.PathLike):
        path = os.fspath(vocabulary)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"Vocabulary file not found: {path!r}. Received: {name}={path!r}"
            )
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\r\n") for line in f]
    if isinstance(vocabulary, bytes) or not hasattr(vocabulary, "__iter__"):
        raise ValueError(
            f"`{name}` must be a list of tokens or a path to a vocabulary file. "
            f"Received: {name}={vocabulary!r}"
        )
    tokens = list(vocabulary)
    if not all(isinstance(t, str) for t in tokens):
        raise ValueError(
            f"`{name}` must contain only strings. Received: {name}={preview(tokens)}"
        )
    return tokens


def check_vocabulary(tokens, name="vocabulary"):
    """[PAD] must be id 0, [UNK] must exist, and tokens must be unique."""
    if not tokens or tokens[0] != PAD:
        raise ValueError(
            f"`{name}` must start with {PAD!r} (id 0 is padding). "
            f"Received: {name}={preview(tokens)}"
        )
    if UNK not in tokens:
        raise ValueError(
            f"`{name}` must contain {UNK!r}. Received: {name}={preview(tokens)}"
        )
    seen = set()
    for token in tokens:
        if token in seen:
            raise ValueError(
                f"`{name}` has the token {token!r} twice. "
                f"Received: {name}={preview(tokens)}"
            )
        seen.add(token)


def check_reserved_tokens(reserved_tokens, vocabulary_size):
    """Reserved tokens start with [PAD], [UNK] and fit in `vocabulary_size`."""
    reserved_tokens = list(reserved_tokens)
    if reserved_tokens[:2] != [PAD, UNK]:
        raise ValueError(
            f"`reserved_tokens` must start with {PAD!r}, {UNK!r}. "
            f"Received: reserved_tokens={preview(reserved_tokens)}"
        )
    if len(set(reserved_tokens)) != len(reserved_tokens):
        raise ValueError(
            "`reserved_tokens` must be unique. "
            f"Received: reserved_tokens={preview(reserved_tokens)}"
        )
    if (
        isinstance(vocabulary_size, bool)
        or not isinstance(vocabulary_size, int)
        or vocabulary_size <= len(reserved_tokens)
    ):
        raise ValueError(
            "`vocabulary_size` must be an integer larger than the "
            f"{len(reserved_tokens)} reserved tokens. "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    return reserved_tokens


def as_strings(inputs, name="inputs"):
    """A string tensor of rank 0 or 1, or a ValueError saying what is wrong."""
    if isinstance(inputs, tf.RaggedTensor):
        raise ValueError(
            f"`{name}` must be a string or a rank-1 batch of strings. "
            f"Received: a RaggedTensor with shape {inputs.shape}"
        )
    try:
        strings = tf.convert_to_tensor(inputs)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"`{name}` must be a string or a batch of strings. "
            f"Received: {name}={inputs!r}"
        ) from error
    if strings.dtype != tf.string:
        raise ValueError(
            f"`{name}` must be strings. Received: {name} with dtype "
            f"{strings.dtype.name}"
        )
    if strings.shape.rank not in (0, 1):
        raise ValueError(
            f"`{name}` must be a string or a rank-1 batch of strings. "
            f"Received: {name} with shape {tuple(strings.shape)}"
        )
    return strings


def replace_invalid_utf8(strings):
    """Replaces each invalid UTF-8 byte sequence by U+FFFD, in-graph."""
    return tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )


def as_token_ids(inputs, name="inputs"):
    """Integer ids of rank 1 or 2 (a tensor, a `tf.RaggedTensor`, or what
    converts to one), or a ValueError saying what is wrong."""
    ids = inputs
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer or ids.shape.rank not in (1, 2):
        raise ValueError(
            f"`{name}` must be integer token ids of rank 1 or 2. Received: "
            f"{name} with dtype {ids.dtype.name} and shape {ids.shape}"
        )
    return ids


def is_string_spec(spec):
    """Whether a dataset element `spec` is a single string."""
    return (
        isinstance(spec, tf.TensorSpec)
        and spec.dtype == tf.string
        and spec.shape.rank == 0
    )


def check_string_dataset(dataset, name="dataset"):
    """Checks `dataset` is a `tf.data.Dataset` of single strings."""
    if not isinstance(dataset, tf.data.Dataset):
        raise ValueError(
            f"`{name}` must be a tf.data.Dataset. Received: {name}={dataset!r}"
        )
    spec = dataset.element_spec
    if not is_string_spec(spec):
        raise ValueError(
            f"`{name}` must yield single strings (unbatched). "
            f"Received: element_spec={spec}"
        )


def text_batches(data, batch_size=1024):
    """Yields lists of Python strings from a dataset or an iterable of strings.

    Invalid UTF-8 bytes decode as U+FFFD, as in the tokenizers.
    """
    if isinstance(data, str | bytes):
        raise ValueError(
            "`data` must be a tf.data.Dataset or an iterable of strings, not "
            f"a single string. Received: data={data[:50]!r}"
        )
    if isinstance(data, tf.data.Dataset):
        spec = data.element_spec
        if (
            not isinstance(spec, tf.TensorSpec)
            or spec.dtype != tf.string
            or spec.shape.rank not in (0, 1)
        ):
            raise ValueError(
                "`data` must yield strings or rank-1 batches of strings. "
                f"Received: element_spec={spec}"
            )
        if spec.shape.rank == 1:
            data = data.unbatch()
        for batch in data.batch(batch_size).as_numpy_iterator():
            yield [t.decode("utf-8", errors="replace") for t in batch]
        return
    if not hasattr(data, "__iter__"):
        raise ValueError(
            "`data` must be a tf.data.Dataset or an iterable of strings. "
            f"Received: data={data!r}"
        )
    batch = []
    for text in data:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str):
            raise ValueError(
                f"`data` must contain only strings. Received an item {text!r}"
            )
        batch.append(text)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def corpus_size(data):
    """The number of texts in `data` if known without reading it, else None."""
    if isinstance(data, tf.data.Dataset):
        if data.element_spec.shape.rank == 0:
            size = int(data.cardinality())
            return size if size >= 0 else None
        return None
    try:
        return len(data)
    except TypeError:
        return None


def special_token_id(tokenizer, token, purpose):
    """The id of `token`, or a ValueError saying which use needs it."""
    if token not in tokenizer.get_vocabulary():
        raise ValueError(
            f"The tokenizer's vocabulary has no {token!r} token, which {purpose} "
            f"needs. Received: vocabulary={preview(tokenizer.get_vocabulary())}"
        )
    return tokenizer.token_to_id(token)
