"""`build_decoder`: a decoder-only model of a checkpoint's tensors, written
once for the families whose tensors carry Hugging Face's `model.` names and
whose head may be the token embedding (`pretrained/llama.py`,
`pretrained/gemma3.py`)."""

import contextlib

from keras_transformer.models.initializers import (
    global_dtype_policy,
    placeholder_weights,
)
from keras_transformer.pretrained import checkpoint, keys

HEAD = "lm_head.weight"
EMBEDDING = "model.embed_tokens.weight"


def find_key(weights, name):
    """`name` if the checkpoint has it, else a ValueError naming it."""
    return keys.find_key(weights, name)


def build_decoder(
    model_class, weight_pairs, arguments, weights, dtype, prepare, constructing
):
    """`model_class(**arguments)` built under `dtype` (None: float32), its
    weights `weight_pairs(model)` assigned from `weights`, all or none.

    `prepare(model)` (or None) runs before any tensor is assigned and
    returns the names of the tensors it set itself (a GGUF file's int8
    blocks), which are then skipped; `constructing` (or None) is a context
    manager entered while the model is built
    (`kt.layers.quantization.int8_at_build`). A tied model (no
    `tie_word_embeddings`, or True) takes a checkpoint's `lm_head.weight`
    only as a copy of its token embedding."""
    with (
        global_dtype_policy(dtype or "float32"),
        placeholder_weights(),
        constructing or contextlib.nullcontext(),
    ):
        model = model_class(**arguments)
    done = set(prepare(model)) if prepare else set()
    ignored = tuple(done)
    if getattr(model, "tie_word_embeddings", True) and HEAD in weights:
        head, embedding = weights[HEAD], weights[find_key(weights, EMBEDDING)]
        if head.shape != embedding.shape or not (head == embedding).all():
            raise ValueError(
                f"The checkpoint's {HEAD!r} differs from its token embedding, "
                "but the model ties them (tie_word_embeddings=True). "
                f"Received: {HEAD!r} of shape {head.shape}, token embedding of "
                f"shape {embedding.shape}"
            )
        ignored += (HEAD,)
    pairs = [pair for pair in weight_pairs(model) if pair[0] not in done]
    checkpoint.assign(checkpoint.in_variable_dtype(pairs), weights, find_key, ignored)
    return model
