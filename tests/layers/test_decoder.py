import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import (
    np_attention,
    np_feedforward,
    np_gelu,
    np_gelu_tanh,
    np_layer_norm,
    np_relu,
    run_layer_test,
    run_model_saving_test,
    to_numpy,
)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def np_decoder_block(block, x, context, padding, context_padding, activation=np_relu):
    eps = block.layer_norm_epsilon
    causal = np.tril(np.ones((x.shape[1], x.shape[1]), bool))[None]
    self_mask = causal & padding[:, :, None] & padding[:, None, :]
    sublayers = [
        (
            lambda h: np_attention(
                h, h, block.self_attention_layer.get_weights(), self_mask
            ),
            block.self_attention_layer_norm.get_weights(),
        )
    ]
    if block.cross_attention:
        cross_mask = padding[:, :, None] & context_padding[:, None, :]
        sublayers.append(
            (
                lambda h: np_attention(
                    h, context, block.cross_attention_layer.get_weights(), cross_mask
                ),
                block.cross_attention_layer_norm.get_weights(),
            )
        )
    sublayers.append(
        (
            lambda h: np_feedforward(
                h,
                block.feedforward_intermediate_dense.get_weights()
                + block.feedforward_output_dense.get_weights(),
                activation,
            ),
            block.feedforward_layer_norm.get_weights(),
        )
    )
    for fn, norm in sublayers:
        if block.normalize_first:
            x = x + fn(np_layer_norm(x, *norm, eps))
        else:
            x = np_layer_norm(x + fn(x), *norm, eps)
    return x


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_block_matches_numpy_reference(normalize_first):
    block = kt.layers.TransformerDecoderBlock(
        num_heads=2, intermediate_dim=12, normalize_first=normalize_first
    )
    x, context = rand(2, 4, 8), rand(2, 5, 8, seed=1)
    padding = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    context_padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    out = run_layer_test(
        block,
        x,
        context,
        padding_mask=padding,
        context_padding_mask=context_padding,
        expected_output_shape=x.shape,
    )
    expected = np_decoder_block(block, x, context, padding, context_padding)
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_gelu_block_uses_the_exact_erf_gelu():
    # Keras' "gelu" is the exact x * Phi(x), not GPT-2's tanh approximation;
    # the two references differ by far more than the tolerance here. Measured
    # over 5 seeds: <= 7e-7 from the exact one, >= 2.3e-4 from the tanh one.
    keras.utils.set_random_seed(0)
    block = kt.layers.TransformerDecoderBlock(
        2, 16, cross_attention=False, normalize_first=True, activation="gelu"
    )
    x = rand(2, 4, 8) * 3
    padding = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    out = to_numpy(block(x, padding_mask=padding))
    exact = np_decoder_block(block, x, None, padding, None, np_gelu)
    tanh = np_decoder_block(block, x, None, padding, None, np_gelu_tanh)
    np.testing.assert_allclose(out, exact, atol=1e-5)
    assert np.abs(out - tanh).max() > 1e-4


def test_future_tokens_never_change_earlier_outputs():
    block = kt.layers.TransformerDecoderBlock(2, 16, cross_attention=False)
    x = rand(1, 6, 8)
    changed = x.copy()
    changed[0, 4:] = rand(2, 8, seed=5)
    before, after = to_numpy(block(x)), to_numpy(block(changed))
    np.testing.assert_allclose(after[0, :4], before[0, :4], atol=1e-6)
    assert not np.allclose(after[0, 4:], before[0, 4:])


def test_keras_masks_equal_explicit_masks_and_padding_invariance():
    embed = kt.layers.PositionalEmbedding(30, 6, 8)
    block = kt.layers.TransformerDecoderBlock(2, 16)
    target = np.array([[3, 4, 0, 0], [5, 6, 7, 8]])
    source = np.array([[9, 10, 11, 0, 0, 0], [12, 13, 14, 15, 16, 17]])
    via_keras = to_numpy(block(embed(target), embed(source)))
    explicit = to_numpy(
        block(
            embed(target),
            embed(source),
            padding_mask=target != 0,
            context_padding_mask=source != 0,
        )
    )
    np.testing.assert_array_equal(via_keras, explicit)
    other_source = source.copy()
    other_source[0, 3:] = 20
    changed = to_numpy(
        block(
            embed(target),
            embed(other_source),
            context_padding_mask=source != 0,
            padding_mask=target != 0,
        )
    )
    np.testing.assert_allclose(changed[0, :2], explicit[0, :2], atol=1e-6)


@pytest.mark.parametrize("cross_attention", [False, True])
def test_cached_decoding_equals_full_pass(cross_attention):
    block = kt.layers.TransformerDecoderBlock(
        2, 16, cross_attention=cross_attention, normalize_first=not cross_attention
    )
    x, context = rand(2, 5, 8), rand(2, 3, 8, seed=1)
    full = to_numpy(block(x, context if cross_attention else None))
    cache = np.zeros((2, 2, 5, 2, 4), "float32")
    cross_cache = (
        block.compute_cross_attention_cache(context) if cross_attention else None
    )
    # The prompt (2 tokens) in one call, then one token at a time.
    pieces, start = [], 0
    for stop in (2, 3, 4, 5):
        outputs = block(
            x[:, start:stop],
            self_attention_cache=cache,
            self_attention_cache_update_index=start,
            cross_attention_cache=cross_cache,
        )
        pieces.append(to_numpy(outputs[0]))
        cache = outputs[1]
        start = stop
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-5)


def test_gpt_block_round_trip_and_alias(tmp_path):
    assert kt.layers.DecoderBlock is kt.layers.TransformerDecoderBlock
    inputs = keras.Input((4,), dtype="int32")
    h = kt.layers.PositionalEmbedding(10, 4, 8, position="learned")(inputs)
    block = kt.layers.DecoderBlock(
        2, 16, cross_attention=False, normalize_first=True, activation="gelu"
    )
    model = keras.Model(inputs, block(h))
    restored = run_model_saving_test(model, np.array([[1, 2, 3, 0]]), tmp_path)
    assert restored.layers[-1].get_config() == block.get_config()


# Largest difference from float32 on the same weights, measured over 10
# seeds: 0.0021 (float16, 11-bit mantissa) and 0.020 (bfloat16, 8-bit), on
# outputs of size ~2. About twice that is allowed.
MIXED_ATOL = {"mixed_float16": 5e-3, "mixed_bfloat16": 4e-2}


@pytest.mark.parametrize("dtype", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fully_padded_target_matches_float32(dtype):
    inputs = (rand(2, 3, 8) * 30, rand(2, 4, 8, seed=1))
    masks = {
        "padding_mask": np.array([[1, 0, 0], [0, 0, 0]], bool),
        "context_padding_mask": np.zeros((2, 4), bool),
    }
    keras.utils.set_random_seed(0)
    reference = kt.layers.TransformerDecoderBlock(2, 16)
    expected = to_numpy(reference(*inputs, **masks))
    block = kt.layers.TransformerDecoderBlock(2, 16, dtype=dtype)
    block(*inputs, **masks)
    block.set_weights(reference.get_weights())
    out = to_numpy(block(*inputs, **masks)).astype("float32")
    assert np.all(np.isfinite(out))
    # Measured at this seed: 0.0012 (float16), 0.012 (bfloat16).
    np.testing.assert_allclose(out, expected, atol=MIXED_ATOL[dtype], rtol=0)


def test_bad_arguments():
    block = kt.layers.TransformerDecoderBlock(2, 16)
    with pytest.raises(ValueError, match="context.*context=None"):
        block(rand(1, 3, 8))
    with pytest.raises(ValueError, match="dropout=-1"):
        kt.layers.TransformerDecoderBlock(2, 16, dropout=-1)
    gpt_block = kt.layers.TransformerDecoderBlock(2, 16, cross_attention=False)
    with pytest.raises(ValueError, match="padding_mask.*\\(1, 3\\)"):
        gpt_block(rand(1, 3, 8), padding_mask=np.ones((1, 4), bool))


# T5's decoder block, as options: RMS before each sub-block, no biases, no
# score scaling, an additive position bias, cross-attention, dense ReLU.
T5_OPTIONS = dict(
    normalize_first=True, norm="rms", use_bias=False, scale=1.0,
    positions="bias", dropout=0.0,
)  # fmt: skip


def np_rms(x, scale, epsilon=1e-6):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon) * scale


def test_rms_block_with_cross_attention_and_position_bias_matches_numpy():
    block = kt.layers.TransformerDecoderBlock(2, 16, **T5_OPTIONS)
    x, context = rand(2, 4, 8), rand(2, 3, 8, seed=1)
    bias = rand(1, 2, 4, 4, seed=2)
    actual = to_numpy(block(x, context, position_bias=bias))

    def attend(layer, q_in, kv_in, mask, bias=0.0):
        w = [
            to_numpy(v)
            for v in (
                layer.query_dense.kernel,
                layer.key_dense.kernel,
                layer.value_dense.kernel,
                layer.output_dense.kernel,
            )
        ]
        q, k, v = (
            np.einsum("bte,ehd->bhtd", a, k_)
            for a, k_ in [(q_in, w[0]), (kv_in, w[1]), (kv_in, w[2])]
        )
        scores = np.einsum("bhtd,bhsd->bhts", q, k) + bias  # scale 1
        scores = np.where(mask, scores, -1e9)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return np.einsum("bhts,bhsd,hde->bte", p, v, w[3])

    assert block.self_attention_layer.query_dense.bias is None  # use_bias=False
    norms = [
        to_numpy(block.sublayer(f"{r}_norm").scale)
        for r in ("self_attention", "cross_attention", "feedforward")
    ]
    causal = np.tril(np.ones((4, 4), bool))
    h = np_rms(x, norms[0])
    x1 = x + attend(block.self_attention_layer, h, h, causal, bias)
    h = np_rms(x1, norms[1])
    x2 = x1 + attend(block.cross_attention_layer, h, context, np.ones((4, 3), bool))
    hidden = np.maximum(
        np_rms(x2, norms[2]) @ to_numpy(block.feedforward_intermediate_dense.kernel), 0
    )
    expected = x2 + hidden @ to_numpy(block.feedforward_output_dense.kernel)
    np.testing.assert_allclose(actual, expected, atol=2e-5)  # fmt: skip


def test_position_bias_block_cached_decoding_equals_full_pass():
    block = kt.layers.TransformerDecoderBlock(
        2, 16, feedforward="gated", activation="gelu", **T5_OPTIONS
    )
    x, context = rand(2, 5, 8), rand(2, 3, 8, seed=1)
    bias = rand(1, 2, 5, 5, seed=2)
    full = to_numpy(block(x, context, position_bias=bias))
    cache = np.zeros((2, 2, 5, 2, 4), "float32")
    cross_cache = block.compute_cross_attention_cache(context)
    pieces, start = [], 0
    for stop in (2, 3, 4, 5):  # the bias's rows of these queries
        outputs = block(
            x[:, start:stop],
            self_attention_cache=cache,
            self_attention_cache_update_index=start,
            cross_attention_cache=cross_cache,
            position_bias=bias[:, :, start:stop],
        )
        pieces.append(to_numpy(outputs[0]))
        cache, start = outputs[1], stop
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-5)
    assert isinstance(block.feedforward, kt.layers.GatedFeedForward)


def test_composed_block_config_round_trip_and_saving(tmp_path):
    block = kt.layers.TransformerDecoderBlock(
        2, 16, feedforward="gated", activation="gelu", num_key_value_heads=1,
        **T5_OPTIONS,
    )  # fmt: skip
    config = block.get_config()
    assert {k: config[k] for k in ("norm", "feedforward", "positions", "scale")} == {
        "norm": "rms", "feedforward": "gated", "positions": "bias", "scale": 1.0
    }  # fmt: skip
    # Options left at their defaults are not written: configs read before
    # are unchanged.
    plain = kt.layers.TransformerDecoderBlock(2, 16).get_config()
    assert not {"norm", "feedforward", "positions", "use_bias", "scale"} & set(plain)
    inputs, context = keras.Input((4, 8)), keras.Input((3, 8))
    model = keras.Model([inputs, context], block(inputs, context))
    run_model_saving_test(model, [rand(2, 4, 8), rand(2, 3, 8, seed=1)], tmp_path)


def test_bad_composition_options():
    for name, value in [
        ("norm", "batch"),
        ("feedforward", "moe"),
        ("positions", "alibi"),
    ]:
        with pytest.raises(ValueError, match=f"{name}.*{value}"):
            kt.layers.TransformerDecoderBlock(2, 16, **{name: value})
    with pytest.raises(ValueError, match="use_bias"):
        kt.layers.TransformerDecoderBlock(2, 16, use_bias="no")
    # Rotary options without rotary positions would be ignored: refused.
    with pytest.raises(ValueError, match="sliding_window.*positions=None"):
        kt.layers.TransformerDecoderBlock(2, 16, sliding_window=4)
    with pytest.raises(ValueError, match="position_bias.*positions=None"):
        kt.layers.TransformerDecoderBlock(2, 16, cross_attention=False)(
            rand(1, 3, 8), position_bias=np.zeros((1, 2, 3, 3), "float32")
        )
