"""The protocol generation and export use to decode with a model.

`kt.generation.generate`, `kt.generation.decode_function` and the exporters
never look inside a model: they ask a `CausalLM` (decoder-only, like `GPT2`)
or a `Seq2SeqLM` (encoder-decoder, like `Seq2Seq`) for

- `output_vocabulary_size`: the size of the logits' last axis, the ids a
  decode loop may generate (`vocabulary_size` of a `CausalLM`,
  `decoder_vocabulary_size` of a `Seq2SeqLM`);
- `generation_inputs(inputs)`: the checked numpy `(prompt, source)` of a
  `generate` call (`source` is None for a decoder-only model);
- for a `Seq2SeqLM`, `pad_source(source, length)`: the checked source
  padded for the decode loop (to `length`, a multiple of the loop's bucket,
  unless the model needs its own length), in numpy or in a graph;
  `source_mask(source)`: bool, True where the decoder may attend;
- `start_decoding(tokens, source, use_cache, prefill=None)`: the decoding
  state after reading the prompt buffer `tokens` `(B, L)` (and the padded
  `source`): filled KV caches, or what an uncached step needs. With
  `prefill` (an int32 scalar), only the positions below it need to be read
  (the decode loop computes the rest): `CausalLM` and `Seq2SeqLM` read
  them in `PREFILL_CHUNK`-token pieces, so that a compiled loop's shapes depend
  on the buffer's length alone, not on the prompt's (a model whose
  `start_decoding` takes no `prefill` is given the whole buffer to read);
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

A state is a `tf.nest` structure of tensors (lists, tuples, NamedTuples;
an absent part is `()`, never None, so that loops can carry it), each with
the rows first: beam search reads each row's prompt once and repeats its
state for the row's beams.

Decoding is written once per kind of model, over the forward pass a family
writes. A decoder-only family writes `_forward(token_ids, caches=None,
index=None) -> (logits, caches or None)` over self-attention `blocks` (as
`GPT2` and `Llama`) and inherits the decoding methods from `CausalLM`. An
encoder-decoder family writes `encode(source) -> context` and
`_decode(decoder_token_ids, context, context_mask, caches=None, index=None,
cross_caches=None) -> (logits, caches or None)` over `decoder_blocks` (as
`Seq2Seq`) and inherits them from `Seq2SeqLM`, with a `Seq2SeqState`; its
source (token ids by default; audio frames, image patches) is checked,
padded and masked by hooks it may override, so `generation/` and `export/`
never change for a family.

Shape legend: B batch, L buffer length, S source length, H heads, D head size,
E hidden size.
"""

import math
from typing import NamedTuple

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

    # The least decode buffer (`generate` rounds prompt + new tokens up to
    # a power of two from it; a conversation asks for more).
    min_decode_buffer = 32

    @property
    def output_vocabulary_size(self):
        """The ids the model generates: its `vocabulary_size`."""
        return self.vocabulary_size

    def generation_inputs(self, inputs):
        return token_ids("inputs", inputs, self.vocabulary_size), None

    def start_decoding(self, tokens, source, use_cache, prefill=None):
        if not use_cache:
            return ()
        if prefill is not None:
            return prefill_in_chunks(self._forward, self.blocks, tokens, prefill)
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


class Seq2SeqState(NamedTuple):
    """The decoding state of a `Seq2SeqLM`; a part not in use is `()`.

    Cached decoding keeps `caches` (one self-attention cache `(B, 2, L, H,
    D)` per decoder block: the only part that changes, and beam search's to
    reorder), `cross_caches` (what each block reads from the context) and
    `context_mask`. Uncached decoding keeps the `context` `(B, S, E)` and
    `context_mask`.
    """

    caches: list | tuple = ()
    cross_caches: list | tuple = ()
    context: object = ()
    context_mask: object = ()


class Seq2SeqLM(keras.Model):
    """Base of encoder-decoder models: a source and decoder token ids in,
    decoder logits out.

    Subclasses set `max_sequence_length` and the property
    `decoder_vocabulary_size`, and write two hooks over their layers:

    - `encode(source) -> context (B, S, E)`;
    - `_decode(decoder_token_ids, context, context_mask, caches=None,
      index=None, cross_caches=None) -> (logits (B, T, V), caches or None)`:
      without `caches`, the decoder over `context`; with `caches` (one
      self-attention cache per block of `decoder_blocks`, `index` the
      position of `decoder_token_ids[:, 0]`), one cached pass that reads
      `cross_caches` instead of `context` (then None) and returns the
      updated caches.

    The decoding methods (`start_decoding`, `next_logits`, the split of a
    `Seq2SeqState`) are written here once over those hooks. The source
    goes through hooks whose defaults take int token ids (`source_name`
    `"encoder_token_ids"`, `encoder_vocabulary_size`); a family with another
    source (audio frames, image patches) overrides `check_source`,
    `pad_source` and `source_mask`, and `cross_attention_caches` if its
    decoder blocks read the context otherwise.

    Examples:
        >>> import keras_transformer as kt
        >>> model = kt.models.seq2seq(20, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, target_vocabulary_size=9)
        >>> isinstance(model, kt.models.Seq2SeqLM), model.decoder_vocabulary_size
        (True, 9)
    """

    source_name = "encoder_token_ids"  # the source's key in `generate`'s inputs
    # The least decode buffer (`generate` rounds prompt + new tokens up to
    # a power of two from it): a 64-token answer decodes in 128 positions,
    # not 512 (t5-small: 2.1x faster at batch 8).
    min_decode_buffer = 32

    @property
    def output_vocabulary_size(self):
        """The ids the model generates: its `decoder_vocabulary_size`."""
        return self.decoder_vocabulary_size

    def generation_inputs(self, inputs):
        name = self.source_name
        start = getattr(self, "decoder_start_token_id", None)
        if isinstance(inputs, dict) and set(inputs) == {name} and start is not None:
            # The model knows its decoder start token: one per source row.
            source = np.asarray(inputs[name])
            rows = len(source) if source.ndim else 0
            inputs = {**inputs, "decoder_token_ids": np.full((rows, 1), start)}
        if not isinstance(inputs, dict) or set(inputs) != {name, "decoder_token_ids"}:
            raise ValueError(
                f"For a seq2seq model, `inputs` must be a dict with {name!r} "
                f"and 'decoder_token_ids' ({name!r} alone if the model has "
                f"a decoder_start_token_id). Received: {_describe(inputs)}"
            )
        source = self.check_source(inputs[name])
        prompt = token_ids(
            "inputs['decoder_token_ids']",
            inputs["decoder_token_ids"],
            self.decoder_vocabulary_size,
        )
        return prompt, source

    def check_source(self, source):
        """The source of a `generate` call, checked, as a numpy array: by
        default int token ids `(B, S)` of the encoder's vocabulary, at most
        `max_sequence_length` long."""
        name = f"inputs[{self.source_name!r}]"
        ids = token_ids(name, source, self.encoder_vocabulary_size)
        if ids.shape[1] > self.max_sequence_length:
            raise ValueError(
                f"`{name}` has length {ids.shape[1]}, beyond the model's "
                f"max_sequence_length ({self.max_sequence_length}). "
                f"Received: {name} of shape {ids.shape}"
            )
        return ids

    def pad_source(self, source, length):
        """The checked `source` (a numpy array, or a tensor in graph code)
        padded for decoding to about `length`, as a tensor: by default int32
        ids zero-padded to `min(length, max_sequence_length)`."""
        length = min(length, self.max_sequence_length)
        padding = [[0, 0], [0, length - ops.shape(source)[1]]]
        padded = ops.pad(ops.cast(source, "int32"), padding)
        return ops.reshape(padded, (ops.shape(source)[0], length))  # (B, S)

    def source_mask(self, source):
        """Bool, True at the context positions the decoder may attend to:
        by default the source's non-padding ids."""
        return ops.not_equal(source, 0)

    def cross_attention_caches(self, context):
        """What each decoder block reads from `context` at every step."""
        return [b.compute_cross_attention_cache(context) for b in self.decoder_blocks]

    def start_decoding(self, tokens, source, use_cache, prefill=None):
        context = self.encode(source)
        context_mask = self.source_mask(source)
        if not use_cache:
            return Seq2SeqState(context=context, context_mask=context_mask)
        cross = self.cross_attention_caches(context)

        def forward(piece, caches, index):
            return self._decode(
                piece,
                None,
                context_mask,
                caches=caches,
                index=index,
                cross_caches=cross,
            )

        if prefill is None:  # the whole prompt buffer
            _, caches = forward(tokens, empty_caches(self.decoder_blocks, tokens), 0)
        else:  # the decoder's prompt (a start token), in pieces
            caches = prefill_in_chunks(forward, self.decoder_blocks, tokens, prefill)
        return Seq2SeqState(caches, cross, context_mask=context_mask)

    def next_logits(self, tokens, state, index, use_cache):
        if not use_cache:
            logits, _ = self._decode(tokens, state.context, state.context_mask)
            return logits[:, index - 1], state
        logits, caches = self._decode(
            tokens[:, index - 1][:, None],  # (B, 1)
            None,
            state.context_mask,
            caches=state.caches,
            index=index - 1,
            cross_caches=state.cross_caches,
        )
        return logits[:, 0], state._replace(caches=caches)

    def _decoder_blocks(
        self, y, context, context_mask, caches, start, cross_caches, **options
    ):
        """`y` `(B, T, E)` through `decoder_blocks`: over `context` without
        `caches`, else one cached pass from position `start` that reads
        `cross_caches`. `options` go to every block (`padding_mask`,
        `position_bias`). Returns `(y, the updated caches or None)`."""
        updated = []
        for i, block in enumerate(self.decoder_blocks):
            if caches is None:
                y = block(y, context, context_padding_mask=context_mask, **options)
                continue
            options.pop("padding_mask", None)  # a cached pass masks by position
            y, cache = block(
                y,
                context_padding_mask=context_mask,
                self_attention_cache=caches[i],
                self_attention_cache_update_index=start,
                cross_attention_cache=cross_caches[i],
                **options,
            )
            updated.append(cache)
        return y, (updated if caches is not None else None)

    def split_decoding_state(self, state):
        # Only the self-attention caches change (() when uncached).
        return state.caches, state._replace(caches=())

    def join_decoding_state(self, varying, fixed):
        return fixed._replace(caches=varying)

    def encode(self, source):
        raise NotImplementedError(
            f"{type(self).__name__} must implement `encode` and `_decode`."
        )

    def _decode(
        self,
        decoder_token_ids,
        context,
        context_mask,
        caches=None,
        index=None,
        cross_caches=None,
    ):
        raise NotImplementedError(
            f"{type(self).__name__} must implement `encode` and `_decode`."
        )


PREFILL_CHUNK = 32  # tokens a chunked prefill reads at once


def prefill_in_chunks(forward, blocks, tokens, prefill, chunk=PREFILL_CHUNK):
    """The KV caches after reading `tokens[:, :prefill]` (at least) in
    pieces, one cached `forward(piece, caches, index)` per piece in a loop:
    the traced graph holds one piece's pass whatever the prompt's length,
    and no more of the buffer is read than needed.

    A piece is `gcd(L, chunk)` tokens, so that pieces tile the buffer (a
    model's positions end at its `max_sequence_length`, which need not be
    a multiple of `chunk`). A buffer of unknown length is read whole."""
    batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    caches = empty_caches(blocks, tokens)
    if not isinstance(length, int):
        return forward(tokens, caches, 0)[1]
    chunk = math.gcd(length, chunk)

    def body(i, caches):
        piece = ops.slice(tokens, [0, i * chunk], [batch, chunk])  # (B, chunk)
        _, caches = forward(piece, caches, i * chunk)
        return i + 1, caches

    pieces = (ops.convert_to_tensor(prefill, "int32") + chunk - 1) // chunk
    _, caches = ops.while_loop(lambda i, _: i < pieces, body, (0, caches))
    return caches


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
            f"outside the model's vocabulary [0, {vocabulary_size}). "
            f"Received: {name}[{row}, {column}]={int(ids[row, column])}"
        )
    return ids.astype("int32")


def _describe(inputs):
    if isinstance(inputs, dict):
        return f"a dict with keys {sorted(inputs)}"
    return type(inputs).__name__
