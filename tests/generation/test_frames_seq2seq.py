"""A `Seq2SeqLM` whose source is float frames `(B, S, F)`, as audio is:
`generate`, beam search and decoding in pieces run it through its own
source hooks, with nothing in `kt.generation` knowing frames."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
from keras_transformer.generation.stream import ChunkedDecoding
from keras_transformer.models.decoding import Seq2SeqState
from tests.helpers import spread_weights

FRAME_DIM, VOCAB, START = 3, 11, 1


class FramesToTokens(kt.models.Seq2SeqLM):
    """A toy encoder-decoder of frames: a Dense layer over each frame is the
    encoder, one decoder block the decoder; an all-zero frame is padding."""

    source_name = "frames"

    def __init__(self, hidden_dim=16, max_sequence_length=16, **kwargs):
        self.frame_projection = keras.layers.Dense(hidden_dim, name="encoder")
        self.decoder_embeddings = kt.layers.PositionalEmbedding(
            VOCAB, max_sequence_length, hidden_dim, position="learned"
        )
        self.decoder_blocks = [kt.layers.TransformerDecoderBlock(2, 16, dropout=0.0)]
        self.output_dense = keras.layers.Dense(VOCAB, name="logits")
        inputs = {
            "frames": keras.Input((None, FRAME_DIM), name="frames"),
            "decoder_token_ids": keras.Input(
                (None,), dtype="int32", name="decoder_token_ids"
            ),
        }
        context = self.encode(inputs["frames"])
        mask = self.source_mask(inputs["frames"])
        logits, _ = self._decode(inputs["decoder_token_ids"], context, mask)
        super().__init__(inputs, logits, **kwargs)
        self.max_sequence_length = max_sequence_length
        self.decoder_vocabulary_size = VOCAB

    def check_source(self, source):
        source = np.asarray(source)
        if source.ndim != 3 or source.shape[-1] != FRAME_DIM:
            raise ValueError(f"`frames` must be (B, S, 3). Received: {source.shape}")
        return source.astype("float32")

    def pad_source(self, source, length):
        return np.pad(source, [(0, 0), (0, length - source.shape[1]), (0, 0)])

    def source_mask(self, source):
        return ops.any(ops.not_equal(source, 0.0), axis=-1)  # (B, S)

    def encode(self, source):
        return self.frame_projection(source)  # (B, S, E)

    def _decode(
        self,
        token_ids,
        context,
        context_mask,
        caches=None,
        index=None,
        cross_caches=None,
    ):
        start = 0 if index is None else index
        y = self.decoder_embeddings(token_ids, start_index=start)
        updated = []
        for i, block in enumerate(self.decoder_blocks):
            if caches is None:
                y = block(y, context, context_padding_mask=context_mask)
            else:
                y, cache = block(
                    y,
                    context_padding_mask=context_mask,
                    self_attention_cache=caches[i],
                    self_attention_cache_update_index=start,
                    cross_attention_cache=cross_caches[i],
                )
                updated.append(cache)
        logits = kt.layers.exclude_padding_logit(self.output_dense(y))
        return logits, (updated if caches is not None else None)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return spread_weights(FramesToTokens(), scale=0.5, layer_norms=False)


def frames():
    """Two sources of 5 frames; the first ends in 2 padding frames."""
    x = np.random.default_rng(1).normal(size=(2, 5, FRAME_DIM)).astype("float32")
    x[0, 3:] = 0.0
    return x


def inputs():
    return {"frames": frames(), "decoder_token_ids": np.full((2, 1), START)}


def test_greedy_cached_equals_uncached_and_the_model_step_by_step(model):
    cached = kt.generation.generate(model, inputs(), max_new_tokens=8)
    uncached = kt.generation.generate(model, inputs(), 8, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    # `generate` pads the frames to 32; the model here sees 5, masked by
    # its `source_mask`: the same tokens.
    tokens = inputs()["decoder_token_ids"]
    for _ in range(8):
        logits = np.asarray(model({"frames": frames(), "decoder_token_ids": tokens}))
        tokens = np.concatenate([tokens, logits[:, -1:].argmax(-1)], axis=1)
    np.testing.assert_array_equal(cached, tokens)
    assert len(np.unique(cached[:, 1:])) > 2  # not a degenerate constant


@pytest.mark.slow
def test_beam_search_cached_equals_uncached(model):
    for settings in (
        {"sampler": "beam", "num_beams": 3},
        {"sampler": "beam", "num_beams": 2, "rules": "transformers"},
    ):
        cached = kt.generation.generate(model, inputs(), 6, **settings)
        uncached = kt.generation.generate(
            model, inputs(), 6, use_cache=False, **settings
        )
        np.testing.assert_array_equal(cached, uncached)
        assert cached.shape == (2, 7)


def test_decoding_in_pieces_carries_the_state(model):
    expected = kt.generation.generate(model, inputs(), 8)
    decoding = ChunkedDecoding(model, inputs(), 8, chunk_size=3)
    pieces = list(decoding)
    assert len(pieces) == 3
    np.testing.assert_array_equal(pieces[-1], expected)


def test_the_state_is_a_named_tuple_whose_caches_alone_vary(model):
    tokens = np.zeros((2, 4), "int32")
    tokens[:, 0] = START
    source = model.pad_source(frames(), 8)
    state = model.start_decoding(tokens, source, use_cache=True)
    assert isinstance(state, Seq2SeqState)
    assert state.context == () and len(state.caches) == len(state.cross_caches) == 1
    assert tuple(state.context_mask.shape) == (2, 8)
    varying, fixed = model.split_decoding_state(state)
    assert varying is state.caches and fixed.caches == ()
    assert model.join_decoding_state(varying, fixed) == state
    uncached = model.start_decoding(tokens, source, use_cache=False)
    assert uncached.caches == uncached.cross_caches == ()
    assert tuple(uncached.context.shape) == (2, 8, 16)
    assert model.split_decoding_state(uncached)[0] == ()


def test_the_source_is_checked_by_the_model(model):
    with pytest.raises(ValueError, match=r"`frames` must be \(B, S, 3\)"):
        kt.generation.generate(model, {**inputs(), "frames": np.ones((2, 5))}, 2)
    with pytest.raises(ValueError, match="'frames' and 'decoder_token_ids'"):
        kt.generation.generate(model, {"encoder_token_ids": frames()}, 2)
