"""Loading text corpora from files, and downloading a few public ones."""

import os

import keras
import tensorflow as tf

# Pinned to a commit so the checksum always holds.
TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/"
    "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_SHA256 = (
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
)
IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
IMDB_SHA256 = "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe"


def _check_file(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Text file not found: {path!r}. Received: path={path!r}"
        )
    return path


def read_tsv(path, columns=2, max_line_characters=None):
    """The rows of a UTF-8 tab-separated file, the one TSV reader of the
    library (`load_text_pairs`, `load_labeled_text` and the CLI's data
    files read through it).

    Invalid UTF-8 bytes decode as U+FFFD; empty (or whitespace-only) lines
    are skipped silently.

    Args:
        path: the file.
        columns: the fewest tab-separated fields a line may have.
        max_line_characters: lines longer than this are left out and
            counted, never truncated (so a label is never cut off); `None`
            keeps every line.

    Returns:
        `(rows, skipped)`: `rows` a list of `(line number, fields)` and
        `skipped` the number of over-long lines left out.

    Raises:
        FileNotFoundError: `path` is not a file.
        ValueError: a line has fewer than `columns` fields (the message
            names the file and line).

    Examples:
        >>> import os, tempfile
        >>> import keras_transformer as kt
        >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
        >>> with open(path, "w") as f:
        ...     _ = f.write("a\\tb\\n\\nc\\td\\te\\n")
        >>> kt.text.read_tsv(path)
        ([(1, ['a', 'b']), (3, ['c', 'd', 'e'])], 0)
    """
    path = _check_file(path)
    rows, skipped = [], 0
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if max_line_characters is not None and len(line) > max_line_characters:
                skipped += 1
                continue
            fields = line.split("\t")
            if len(fields) < columns:
                raise ValueError(
                    f"{path}, line {number}: expected {columns} tab-separated "
                    f"fields, found {len(fields)}. Received: {line[:80]!r}"
                )
            rows.append((number, fields))
    return rows, skipped


def load_text(path, skip_empty=True):
    """The lines of a plain-text file as a `tf.data.Dataset` of strings.

    Lines are streamed, not read into memory; a trailing `\\r` is removed.
    Bytes are passed on as they are: the tokenizers replace invalid UTF-8.

    Args:
        path: a text file.
        skip_empty: drop lines that are empty or whitespace only.

    Returns:
        A `tf.data.Dataset` of scalar strings, one per line.
    """
    path = _check_file(path)
    lines = tf.data.TextLineDataset(path).map(
        lambda line: tf.strings.regex_replace(line, "\r$", "")
    )
    if skip_empty:
        lines = lines.filter(lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
    return lines


def load_text_pairs(path):
    """`source<TAB>target` lines as a `tf.data.Dataset` of `(source, target)`.

    This is the Anki / Tatoeba export format (manythings.org): further
    columns, such as the attribution, are ignored. Empty lines are skipped;
    invalid UTF-8 bytes are read as U+FFFD.

    Args:
        path: a UTF-8 tab-separated file.

    Returns:
        A `tf.data.Dataset` of `(source, target)` scalar strings.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: a line has no tab (the message names the file and line).
    """
    pairs = [fields[:2] for _, fields in read_tsv(path)[0]]
    sources = [source for source, _ in pairs]
    targets = [target for _, target in pairs]
    return tf.data.Dataset.from_tensor_slices(
        (tf.constant(sources, tf.string), tf.constant(targets, tf.string))
    )


def load_labeled_text(path, class_names=None):
    """`text<TAB>label` lines as a dataset of `(text, label id)`.

    Args:
        path: a UTF-8 tab-separated file; the label is the last column.
        class_names: the labels in id order; by default the sorted distinct
            labels of the file (so `"0"`, `"1"` get ids 0, 1).

    Returns:
        `(dataset, class_names)`: a `tf.data.Dataset` of `(text, label)` with
        int32 labels, and the list of class names.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: a line has no tab, or a label not in `class_names` (the
            message names the file and line).
    """
    rows, _ = read_tsv(path)
    labels = [fields[-1].strip() for _, fields in rows]
    if class_names is None:
        class_names = sorted(set(labels))
    class_names = list(class_names)
    index = {name: i for i, name in enumerate(class_names)}
    for (number, _), label in zip(rows, labels, strict=True):
        if label not in index:
            raise ValueError(
                f"{path}, line {number}: label {label!r} is not one of "
                f"class_names={class_names!r}. Received: label={label!r}"
            )
    texts = ["\t".join(fields[:-1]) for _, fields in rows]
    dataset = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(texts, tf.string),
            tf.constant([index[x] for x in labels], tf.int32),
        )
    )
    return dataset, class_names


def download_tiny_shakespeare(cache_dir=None):
    """Downloads Tiny Shakespeare (1.1 MB, Karpathy's char-rnn corpus).

    Cached by `keras.utils.get_file` (in `~/.keras/datasets` by default) and
    checked against its SHA-256. Read it with `load_text`.

    Returns:
        The path of the text file.
    """
    return _download(
        "tinyshakespeare.txt", TINY_SHAKESPEARE_URL, TINY_SHAKESPEARE_SHA256, cache_dir
    )


def download_imdb_reviews(cache_dir=None):
    """Downloads and extracts the IMDB movie-review sentiment corpus (84 MB).

    Cached by `keras.utils.get_file` and checked against its SHA-256. The
    reviews are one file each under `aclImdb/{train,test}/{neg,pos}`; read
    them with `keras.utils.text_dataset_from_directory`.

    Returns:
        The path of the `aclImdb` directory.
    """
    extracted = _download(
        "aclImdb_v1.tar.gz", IMDB_URL, IMDB_SHA256, cache_dir, extract=True
    )
    return os.path.join(extracted, "aclImdb")


def _download(name, url, sha256, cache_dir, extract=False):
    """`keras.utils.get_file`, checked: a `cache_dir` that does not exist is
    an error (Keras would quietly write to /tmp/.keras instead), and a file
    whose digest is wrong is removed (Keras leaves it in the cache)."""
    if cache_dir is not None and not os.path.isdir(cache_dir):
        raise FileNotFoundError(
            "`cache_dir` must be an existing directory. "
            f"Received: cache_dir={cache_dir!r}"
        )
    destination = os.path.join(
        os.path.expanduser(cache_dir or os.path.join("~", ".keras")), "datasets", name
    )
    try:
        return keras.utils.get_file(
            name,
            url,
            file_hash=sha256,
            hash_algorithm="sha256",
            extract=extract,
            cache_dir=cache_dir,
        )
    except ValueError:
        if os.path.isfile(destination):
            os.remove(destination)
        raise
