"""The protocol generation and export use to decode with a model.

`kt.generation.generate`, `kt.generation.decode_function` and the exporters
never look inside a model: they ask a `CausalLM` (decoder-only, like `GPT2`)
or a `Seq2SeqLM` (encoder-decoder, like `Seq2Seq`) for

- `output_vocabulary_size`: the size of the logits' last axis, the ids a
  decode loop may generate (`vocabulary_size` of a `CausalLM`,
  `decoder_vocabulary_size` of a `Seq2SeqLM`);
- `generation_inputs(inputs)`: the checked numpy `(prompt, source)` of a
  `generate` call (`source` is None for a decoder-only model);
- `start_decoding(tokens, source, use_cache)`: the decoding state after
  reading the prompt buffer `tokens` `(B, L)` (and the `source` `(B, S)`):
  filled KV caches, or what an uncached step needs;
- `next_logits(tokens, state, index, use_cache)`: float logits `(B, V)` for
  position `index` given the tokens before it, and the updated state;
- for speculative and prompt-lookup decoding (decoder-only models),
  `chunk_logits(chunk, state, index)`: float logits `(B, T, V)` for
  positions `index + 1 .. index + T` after writing the keys and values of
  `chunk` `(B, T)`, the tokens at positions `index .. index + T - 1`, into
  the cache; and the updated state;
- optionally `split_decoding_state(state) -> (varying, fixed)` and
  `join_decoding_state(varying, fixed)`: the part of the state that never
  changes while decoding (the encoder's output) stays out of the decode
  loop's state, so beam search does not reorder it. By default all of it
  varies.

A new family subclasses one of the two, builds its functional graph in
`__init__`, and implements the last two methods with its own forward pass.
A decoder-only family whose forward pass is one method,
`_forward(token_ids, caches=None, index=None) -> (logits, caches or
None)`, over self-attention `blocks` (as `GPT2` and `Llama`), inherits all
three decoding methods from `CausalLM` instead.

Shape legend: B batch, L buffer length, S source length, H heads, D head size.
"""

import keras
import numpy as np
from keras import ops


class DecodingStateMixin:
    """The default split of a decoding state: all of it varies."""

    def split_decoding_state(self, state):
        return state, None

    def join_decoding_state(self, varying, fixed):
        return varying


class CausalLM(DecodingStateMixin, keras.Model):
    """Base of decoder-only language models: int `token_ids` in, logits out.

    Subclasses set `vocabulary_size` and `max_sequence_length`, and either
    write their forward pass as `_forward(token_ids, caches=None,
    index=None)` over `blocks` (one `(B, 2, L, K, D)` cache per block,
    `index` the position of `token_ids[:, 0]`), which the decoding methods
    below use, or implement `start_decoding`, `next_logits` and
    `chunk_logits` themselves (see the module docstring).

    Examples:
        >>> import keras_transformer as kt
        >>> model = kt.models.gpt2(20, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16)
        >>> isinstance(model, kt.models.CausalLM)
        True
    """

    @property
    def output_vocabulary_size(self):
        """The ids the model generates: its `vocabulary_size`."""
        return self.vocabulary_size

    def generation_inputs(self, inputs):
        return token_ids("inputs", inputs, self.vocabulary_size), None

    def start_decoding(self, tokens, source, use_cache):
        if not use_cache:
            return ()
        _, caches = self._forward(tokens, empty_caches(self.blocks, tokens), 0)
        return caches  # prefilled with the whole prompt buffer

    def next_logits(self, tokens, state, index, use_cache):
        if not use_cache:
            logits, _ = self._forward(tokens)
            return logits[:, index - 1], state
        step = tokens[:, index - 1][:, None]  # (B, 1)
        logits, caches = self._forward(step, state, index - 1)
        return logits[:, 0], caches

    def chunk_logits(self, chunk, state, index):
        return self._forward(chunk, state, index)  # (B, T, V), caches

    def _forward(self, token_ids, caches=None, index=None):
        raise NotImplementedError(
            f"{type(self).__name__} must implement `_forward` or the decoding "
            "methods `start_decoding`, `next_logits` and `chunk_logits`."
        )


class Seq2SeqLM(DecodingStateMixin, keras.Model):
    """Base of encoder-decoder models: `{"encoder_token_ids",
    "decoder_token_ids"}` in, decoder logits out.

    Subclasses set `max_sequence_length` and the properties
    `encoder_vocabulary_size` and `decoder_vocabulary_size`, and implement
    `start_decoding` and `next_logits` (see the module docstring).

    Examples:
        >>> import keras_transformer as kt
        >>> model = kt.models.seq2seq(20, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, target_vocabulary_size=9)
        >>> isinstance(model, kt.models.Seq2SeqLM), model.decoder_vocabulary_size
        (True, 9)
    """

    @property
    def output_vocabulary_size(self):
        """The ids the model generates: its `decoder_vocabulary_size`."""
        return self.decoder_vocabulary_size

    def generation_inputs(self, inputs):
        start = getattr(self, "decoder_start_token_id", None)
        if (
            isinstance(inputs, dict)
            and set(inputs) == {"encoder_token_ids"}
            and start is not None
        ):
            # The model knows its decoder start token: one per source row.
            source = np.asarray(inputs["encoder_token_ids"])
            rows = source.shape[0] if source.ndim == 2 else 0
            inputs = {**inputs, "decoder_token_ids": np.full((rows, 1), start)}
        if not isinstance(inputs, dict) or set(inputs) != {
            "encoder_token_ids",
            "decoder_token_ids",
        }:
            raise ValueError(
                "For a seq2seq model, `inputs` must be a dict with 'encoder_token_ids' "
                "and 'decoder_token_ids' ('encoder_token_ids' alone if the model has "
                f"a decoder_start_token_id). Received: {_describe(inputs)}"
            )
        source = token_ids(
            "inputs['encoder_token_ids']",
            inputs["encoder_token_ids"],
            self.encoder_vocabulary_size,
        )
        prompt = token_ids(
            "inputs['decoder_token_ids']",
            inputs["decoder_token_ids"],
            self.decoder_vocabulary_size,
        )
        return prompt, source

    def start_decoding(self, tokens, source, use_cache):
        raise NotImplementedError

    def next_logits(self, tokens, state, index, use_cache):
        raise NotImplementedError


def empty_caches(blocks, tokens):
    """One zero self-attention cache `(B, 2, L, K, D)` per decoder block (K
    key/value heads: `num_heads` unless the attention groups them)."""
    batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    caches = []
    for block in blocks:
        attention = block.self_attention_layer
        shape = (batch, 2, length, attention.num_key_value_heads, attention.key_dim)
        caches.append(ops.zeros(shape, attention.compute_dtype))
    return caches


def token_ids(name, ids, vocabulary_size):
    """`ids` as an int32 `(B, T)` numpy array of ids in `[0, vocabulary_size)`.

    Raises a ValueError naming the argument and the first id out of range:
    an embedding lookup would silently clamp it under XLA.
    """
    ids = np.asarray(ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"`{name}` must be int token ids of shape (batch, length). "
            f"Received: dtype {ids.dtype}, shape {ids.shape}"
        )
    outside = (ids < 0) | (ids >= vocabulary_size)
    if outside.any():
        row, column = np.argwhere(outside)[0]
        raise ValueError(
            f"`{name}` holds token id {int(ids[row, column])} at [{row}, {column}], "
            f"outside the model's vocabulary [0, {vocabulary_size})."
        )
    return ids.astype("int32")


def _describe(inputs):
    if isinstance(inputs, dict):
        return f"a dict with keys {sorted(inputs)}"
    return type(inputs).__name__
