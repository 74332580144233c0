"""What `TextGenerator.generate` does between the pieces of a chunked
decoding (`kt.generation.stream.ChunkedDecoding`): each row's text so far,
ending rows early (their own `max_new_tokens`, a stop string), and the
stable part of a streamed text.

A streamed piece never splits a UTF-8 character or a byte-level BPE
sequence: the whole text is decoded again after each piece of ids, and a
trailing U+FFFD (an incomplete character) is held back, as is an ending
that may still grow into a stop string.
"""

import numpy as np
import tensorflow as tf

from keras_transformer.generation import generate
from keras_transformer.tasks import inputs

REPLACEMENT = "\ufffd"


def new_ids(tokens, rows, max_new_tokens, end_token_ids):
    """Each row's generated ids so far, `(n,)` int arrays: after its prompt,
    at most `max_new_tokens`, up to its first end token, without padding."""
    ends = np.asarray(end_token_ids if end_token_ids is not None else [], "int32")
    found = []
    for i, row in enumerate(rows):
        ids = tokens[i, len(row) : len(row) + max_new_tokens]
        stopped = np.flatnonzero(np.isin(ids, ends))
        if stopped.size:
            ids = ids[: stopped[0]]
        found.append(ids[ids != 0])
    return found


# A compiled detokenize per tokenizer: run eagerly, the ragged ops cost about
# 20 ms a piece, several times the piece's decoding (benchmarks/tasks.py).
# Kept on the tokenizer (an attribute Keras does not track), so it dies with
# it: in a weak-keyed table the function, which closes over its tokenizer,
# kept the tokenizer alive.
_DETOKENIZE = "_kt_compiled_detokenize"


def texts(tokenizer, ids, prompts=None):
    """The text of each array of `ids`, decoded in one call; with `prompts`
    (an array of ids per row), the text the ids add to their prompt.

    That is the decoded prompt + ids with the decoded prompt cut off, as
    transformers 4's pipeline computed it: a SentencePiece token that
    begins a word (`▁world`) decodes without its space at the start of a
    text, so the ids decoded alone would lose it ("Hello" + "world")."""
    if prompts is None:
        return _decode(tokenizer, ids)
    heads = _decode(tokenizer, prompts)
    rows = [
        np.concatenate([p, i]).astype("int32")
        for p, i in zip(prompts, ids, strict=True)
    ]
    found = []
    for head, text in zip(heads, _decode(tokenizer, rows), strict=True):
        if not text.startswith(head):  # a character the new ids completed
            head = head.rstrip(REPLACEMENT)
        found.append(text[len(head) :])
    return found


def _decode(tokenizer, ids):
    """The text of each array of `ids`, decoded in one call."""
    detokenize = tokenizer.__dict__.get(_DETOKENIZE)
    if detokenize is None:
        spec = tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)
        detokenize = tf.function(
            lambda ids: tokenizer.detokenize(ids, skip_special_tokens=True),
            input_signature=[spec],
        )
        object.__setattr__(tokenizer, _DETOKENIZE, detokenize)  # untracked
    values = np.concatenate([np.asarray(i, "int32") for i in ids] + [[]])
    lengths = np.array([len(i) for i in ids], "int64")
    ragged = tf.RaggedTensor.from_row_lengths(values.astype("int32"), lengths)
    return [t.decode("utf-8") for t in detokenize(ragged).numpy()]


def generated_ids(
    model, rows, ends, max_new_tokens, sampler, seed, speculative,
    min_buffer_length=None,
):  # fmt: skip
    """`generate`'s new ids for each prompt of `rows` (`sampler.num_rows`
    results each for beam search's several sequences), up to an end id of
    `ends` (a tuple), at most `max_new_tokens`; `speculative` holds
    `generate`'s speculative-decoding keywords, `min_buffer_length` its
    keyword.

    Beam search runs each prompt length on its own: a hypothesis ends at
    its own prompt's length plus `max_new_tokens`, as when Hugging Face
    runs that prompt alone (a shorter prompt in a longer batch would
    otherwise search further and rank its beams differently)."""
    groups = {}
    for i, row in enumerate(rows):
        groups.setdefault(len(row) if sampler.num_rows > 1 else 0, []).append(i)
    found = [None] * len(rows)
    for indices in groups.values():
        group = [rows[i] for i in indices]
        out = generate(
            model,
            inputs.pad(group),  # (B, P)
            max_new_tokens,
            sampler,
            end_token_id=list(ends) or None,
            seed=seed,
            min_buffer_length=min_buffer_length,
            **speculative,
        )  # (B * n, P + N)
        n = len(out) // len(group)
        ids = new_ids(out, [r for r in group for _ in range(n)], max_new_tokens, ends)
        for j, i in enumerate(indices):
            found[i] = ids[j * n : (j + 1) * n]
    return [ids for row in found for ids in row]


def run(decoding, tokenizer, rows, max_new_tokens, end_token_ids, stops):
    """Runs `decoding` to its end, ending each row once it has its
    `max_new_tokens` or its text holds a stop string; yields after each
    piece `(texts, finished)`: each row's text so far (cut before a stop
    string) and whether the row is finished."""
    for tokens in decoding:
        ids = new_ids(tokens, rows, max_new_tokens, end_token_ids)
        found = texts(tokenizer, ids, rows)
        cut = [inputs.cut_at_stop(text, stops) for text in found]
        full = np.array([decoding.index >= len(row) + max_new_tokens for row in rows])
        stopped = np.array([c != t for c, t in zip(cut, found, strict=True)])
        decoding.finish(full | stopped)
        yield cut, decoding.finished


def stable(text, stops, finished):
    """The part of a row's `text` so far that later ids cannot change: all
    of it once the row is `finished`; else without a trailing U+FFFD and
    without an ending that begins a stop string."""
    if finished:
        return text
    text = text.rstrip(REPLACEMENT)
    held = max(
        (n for s in stops for n in range(1, len(s)) if text.endswith(s[:n])),
        default=0,
    )
    return text[: len(text) - held]
