"""Finding a checkpoint's tensors by name, and checking its tied copies:
what every family's `build` does first."""

import numpy as np


def find_key(weights, name, candidates=None, kind="", aspect="sizes"):
    """The first of `candidates` (default: `name` alone) that the checkpoint
    `weights` holds, or a ValueError naming `name` and the others tried.

    `kind` names the checkpoint in the message ("GPT-2 ") and `aspect` what
    of its config.json it should match.

    Example:
        >>> from keras_transformer.pretrained.keys import find_key
        >>> find_key({"transformer.wte.weight": 0}, "wte.weight",
        ...          ("transformer.wte.weight", "wte.weight"))
        'transformer.wte.weight'
    """
    candidates = (name,) if candidates is None else tuple(candidates)
    for candidate in candidates:
        if candidate in weights:
            return candidate
    others = [c for c in candidates if c != name]
    nor = ""
    if others:
        nor = f" (nor {others[0]!r})" if len(others) == 1 else f" (nor {others})"
    raise ValueError(
        f"The checkpoint has no tensor {name!r}{nor}; it does not look like a "
        f"{kind}checkpoint of its config.json's {aspect}. Received: "
        f"{len(weights)} tensor(s), such as {sorted(weights)[:3]}"
    )


def check_tied(weights, key, table, message):
    """A ValueError `message` (then the shapes received) if the checkpoint
    holds `key` and it is not `table` (a copy its config ties to the table,
    which carries no weights of its own)."""
    if key in weights:
        copy = weights[key]
        if copy.shape != table.shape or not np.array_equal(copy, table):
            raise ValueError(
                f"{message} Received: {key!r} of shape {copy.shape}, table of "
                f"shape {table.shape}"
            )
