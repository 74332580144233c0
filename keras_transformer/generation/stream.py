"""Decoding in pieces: `ChunkedDecoding` runs `generate`'s compiled KV-cache
loop `chunk_size` positions at a time, carrying the cache, the token buffer,
the position and each row's done flag from one piece to the next, so the
prefix is never recomputed. Between pieces its caller reads the tokens so
far (to stream text) and may end rows (at a stop string): generation ends
once every row has.

Each position draws with its own seed (`kt.generation.Sampler.run`), so the
tokens are `generate`'s, position for position.

Shape legend: B batch, L buffer length.
"""

import time

import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation import loop
from keras_transformer.generation.decode import (
    check_generative,
    check_request,
    compiled,
    read_prompt,
    request_shapes,
)
from keras_transformer.generation.registry import get_sampler

CHUNK_SIZE = 16  # positions per piece: few enough calls to keep the speed
# With `piece_seconds`, pieces grow toward lasting this long: each piece
# costs a few ms besides its decoding (calling the compiled chunk, reading
# its tokens, the caller's detokenizing), so a fast model streams in fewer,
# longer pieces, and a slow one keeps `chunk_size` (4 pieces a second at
# most is still a live stream).
PIECE_SECONDS = 0.25
GROWTH = 8  # the most a piece grows over the one before


class ChunkedDecoding:
    """`kt.generation.generate`'s decoding of one request, in pieces.

    Iterating runs one piece (`chunk_size` positions) per step and yields
    the token buffer so far; `finish(rows)` ends rows early (their later
    positions are 0, as after an end token). Without `finish`, the last
    tokens are exactly `generate`'s with the same arguments.

    Args:
        model: a `kt.models.CausalLM` or `kt.models.Seq2SeqLM`.
        inputs: as `generate`'s.
        max_new_tokens: as `generate`'s.
        sampler: a sampler name or instance whose loop runs in pieces
            (greedy, temperature, top_k, top_p; not beam search).
        end_token_id: None, an id, or a list of ids.
        seed: int seed of the samplers that draw.
        chunk_size: positions per piece (>= 1); the first piece's, and the
            fewest, with `piece_seconds`.
        piece_seconds: None, or seconds: after a piece that took less (from
            its start to the next piece's, the caller's work included), the
            next piece has proportionally more positions (at most 8 times
            as many), toward pieces of that duration. The tokens do not
            depend on the pieces.
        min_buffer_length: as `generate`'s.
        **sampler_args: the sampler's arguments and options.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.generation.stream import ChunkedDecoding
    >>> model = kt.models.gpt2(20, num_layers=1, num_heads=2, hidden_dim=8,
    ...                        intermediate_dim=16, max_sequence_length=32)
    >>> decoding = ChunkedDecoding(model, np.array([[5, 6]]), 6, chunk_size=4)
    >>> pieces = [tokens.shape for tokens in decoding]
    >>> pieces, decoding.steps
    ([(1, 8), (1, 8)], 6)
    """

    def __init__(
        self,
        model,
        inputs,
        max_new_tokens,
        sampler="greedy",
        end_token_id=None,
        seed=None,
        chunk_size=CHUNK_SIZE,
        piece_seconds=None,
        min_buffer_length=None,
        **sampler_args,
    ):
        check_generative(model, "model")
        sampler = get_sampler(sampler, **sampler_args)
        if not sampler.uses_shared_loop:
            raise ValueError(
                "Decoding in pieces takes a sampler of the one-token loop "
                "(greedy, temperature, top_k, top_p), not "
                f"{type(sampler).__name__}. Received: sampler={sampler!r}"
            )
        validation.check_positive_int("chunk_size", chunk_size)
        if piece_seconds is not None and (
            isinstance(piece_seconds, bool)
            or not isinstance(piece_seconds, int | float)
            or piece_seconds <= 0
        ):
            raise ValueError(
                "`piece_seconds` must be None or a positive number of seconds. "
                f"Received: piece_seconds={piece_seconds!r}"
            )
        self.piece_seconds = piece_seconds
        self.request = check_request(
            model, inputs, max_new_tokens, sampler, end_token_id, seed,
            min_buffer_length=min_buffer_length,
        )  # fmt: skip
        self.chunk_size = chunk_size
        self.steps = 0  # positions run so far (all rows at once)
        if self.request is None:  # nothing to generate
            self.tokens = model.generation_inputs(inputs)[0]
            self.index = self.stop = self.tokens.shape[1]
        else:
            self.stop = int(self.request["stop"])
            self.tokens = self.request["tokens"][:, : self.stop]
            self.index = int(self.request["start"])  # positions below are filled
            self._begin, self._chunk = compiled_chunk_fns(
                model, sampler, request_shapes(self.request)
            )
        self._done = np.zeros(len(self.tokens), bool)

    @property
    def finished(self):
        """Bool `(B,)`: the rows that will get no more tokens."""
        return self._done | (self.index >= self.stop)

    def finish(self, rows):
        """Ends `rows` (a bool mask `(B,)` or row indices) before the next
        piece."""
        self._done[np.asarray(rows)] = True

    def __iter__(self):
        if self.request is None:
            return
        request = {k: tf.constant(v) for k, v in self.request.items()}
        tokens = request["tokens"]
        state = loop.DecodeState(
            tokens,
            self._begin(tokens, request["source"], request["start"]),
            request["start"],
            None,
        )
        spec = loop.DecodeSpec(
            request["stop"],
            request["prompt_mask"],
            request["end_token_id"],
            request["seed"],
        )
        started = time.perf_counter()
        while self.index < self.stop and not self._done.all():
            state = self._chunk(
                state._replace(done=tf.constant(self._done)),
                spec,
                tf.constant(self.index + self.chunk_size, tf.int32),
            )
            self.steps += int(state.index) - self.index
            self.index = int(state.index)
            self._done |= state.done.numpy()
            self.tokens = state.tokens.numpy()[:, : self.stop]
            yield self.tokens
            now = time.perf_counter()
            if self.piece_seconds is not None:
                self.chunk_size = _grown(
                    self.chunk_size, now - started, self.piece_seconds
                )
            started = now


def _grown(size, seconds, target):
    """The next piece's size after `size` positions took `seconds`: toward
    `target` seconds, never smaller, at most `GROWTH` times larger."""
    if seconds >= target:
        return size
    return int(min(GROWTH * size, max(size, size * target / max(seconds, 1e-9))))


def compiled_chunk_fns(model, sampler, shapes=None):
    """`(begin, chunk)`, XLA-compiled and kept per model, sampler and
    request `shapes` (as `compiled_decode_fn`'s):
    `begin(tokens, source, start) -> decoding state` reads the prompts below
    `start` into the KV cache; `chunk(state, spec, until) -> state` runs
    the sampler's loop from
    a `loop.DecodeState` (its `cache` the model's decoding state) for the
    request's `loop.DecodeSpec` up to `until` (see
    `kt.generation.Sampler.run`)."""
    begin, chunk = chunk_functions(model, sampler)
    key = ("stream", sampler.config(), shapes)
    return (
        compiled(model, key + ("begin",), lambda: begin),
        compiled(model, key + ("chunk",), lambda: chunk),
    )


def chunk_functions(model, sampler):
    """The graph code of `compiled_chunk_fns`."""

    def begin(tokens, source, start):
        return read_prompt(model, tokens, source, True, start)

    def chunk(state, spec, until):
        varying, fixed = model.split_decoding_state(state.cache)

        def next_fn(tokens, varying, index):
            logits, state = model.next_logits(
                tokens, model.join_decoding_state(varying, fixed), index, True
            )
            return logits, model.split_decoding_state(state)[0]

        state = sampler.run(next_fn, state._replace(cache=varying), spec, until)
        return state._replace(cache=model.join_decoding_state(state.cache, fixed))

    return begin, chunk
