"""The examples of a `train` run: read from files or built in, split into
training and held-out parts, and fingerprinted for `--resume`.

What an example is belongs to the task's recipe (`Recipe.read_examples`,
`Recipe.builtin_data`, `Recipe.split`); this module holds the file rules
and splits they share.
"""

import hashlib
import os

from keras_transformer.cli import datasets
from keras_transformer.cli.errors import CommandError


def load_data(recipe, path, validation_path):
    """`(train, held_out, description, notes)` for the task of `recipe`.

    Without `path`, the recipe's built-in corpus; without `validation_path`,
    the recipe's split of `path`.
    """
    notes = []
    if path is None:
        if validation_path is not None:
            raise CommandError("--validation-data needs --data")
        examples, description = recipe.builtin_data()
        return (*recipe.split(examples), description, notes)
    train = recipe.read_examples(path, "--data", notes)
    if validation_path is None:
        train, held_out = recipe.split(train)
    else:
        held_out = recipe.read_examples(validation_path, "--validation-data", notes)
    return train, held_out, path, notes


def check_file(path, flag):
    if not os.path.isfile(path):
        raise CommandError(f"{flag} {path}: file not found")


def read_text_file(path, flag):
    """The whole file as one string; errors name `flag`."""
    check_file(path, flag)
    corpus = datasets.read_text(path)
    if not corpus.strip():
        raise CommandError(f"{flag} {path}: no text in the file")
    return corpus


def read_tsv_file(path, flag, notes):
    """The fields of each line of a TSV file; errors name `flag`, and
    skipped lines are added to `notes`."""
    check_file(path, flag)
    rows, skipped = datasets.read_tsv(path)
    if skipped:
        notes.append(
            f"{path}: skipped {skipped} line(s) over "
            f"{datasets.MAX_LINE_CHARACTERS:,} characters"
        )
    if not rows:
        raise CommandError(f"{flag} {path}: no text in the file")
    return [fields for _, fields in rows]


def split_text(corpus):
    """The first nine tenths and the rest, cut at a line end if one is near
    (as nanoGPT splits)."""
    cut = int(len(corpus) * 0.9)
    newline = corpus.find("\n", cut)
    if 0 <= newline < cut + 1000:
        cut = newline + 1
    return corpus[:cut], corpus[cut:]


def split_rows(rows, held_out):
    """`(train, held_out)`: the first `held_out` fraction (at least one
    example) is held out."""
    count = max(1, int(len(rows) * held_out))
    if len(rows) < 2:
        raise CommandError(
            f"the data has {len(rows)} example: at least 2 are needed "
            "(one to train on, one held out)"
        )
    return rows[count:], rows[:count]


def file_digest(path):
    if path is None:
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
