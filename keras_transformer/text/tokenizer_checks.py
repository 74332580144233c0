"""The checks that a task and its exporter both make on a tokenizer: that
it is a `kt.text` tokenizer whose ids fit the model, and the ids of the
special tokens they name."""

from keras_transformer.text import checks
from keras_transformer.text.tokenizer import Tokenizer


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


def check_fill_mask_tokenizer(tokenizer, vocabulary_size, purpose):
    """The ids of `[CLS]`, `[SEP]` and `[MASK]` in `tokenizer`, which must
    fit the model and have no bos or eos token; else a ValueError."""
    check_tokenizer(tokenizer, "tokenizer", vocabulary_size)
    ids = [
        checks.special_token_id(tokenizer, token, purpose)
        for token in (checks.CLS, checks.SEP, checks.MASK)
    ]
    if tokenizer.bos_token is not None or tokenizer.eos_token is not None:
        raise ValueError(
            f"{purpose} needs a tokenizer without bos_token and eos_token (it "
            "tokenizes the text between masks piece by piece). Received: "
            f"bos_token={tokenizer.bos_token!r}, eos_token={tokenizer.eos_token!r}"
        )
    return ids
