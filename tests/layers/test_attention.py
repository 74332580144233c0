import math

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.layers.grouped import attend
from tests.helpers import (
    np_attention,
    np_attention_with_key,
    np_softmax,
    run_layer_test,
    run_model_saving_test,
    to_numpy,
)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def test_scaled_dot_product_attention_golden_numbers():
    q = k = np.array([[1.0, 0.0], [0.0, 1.0]], "float32")
    v = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    out, weights = kt.layers.scaled_dot_product_attention(q, k, v)
    # softmax([1/sqrt(2), 0]) = [0.6697615, 0.3302385]
    np.testing.assert_allclose(
        to_numpy(weights), [[0.6697615, 0.3302385], [0.3302385, 0.6697615]], atol=1e-6
    )
    np.testing.assert_allclose(
        to_numpy(out), [[1.660477, 2.660477], [2.339523, 3.339523]], atol=1e-5
    )
    mask = np.array([[True, False], [True, True]])
    out, weights = kt.layers.scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(to_numpy(weights)[0], [1.0, 0.0])
    np.testing.assert_allclose(to_numpy(out)[0], [1.0, 2.0])


def test_scaled_dot_product_attention_fully_masked_row_is_zero():
    q, k, v = rand(1, 3, 4), rand(1, 5, 4, seed=1), rand(1, 5, 4, seed=2)
    mask = np.ones((1, 3, 5), bool)
    mask[0, 1] = False
    out, weights = kt.layers.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.all(to_numpy(weights)[0, 1] == 0) and np.all(to_numpy(out)[0, 1] == 0)


def test_scaled_dot_product_attention_with_distinct_key_and_value():
    # d_k = 4 and d_v = 6 differ: the scale is 1/sqrt(d_k), values are `value`.
    q, k, v = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 6, seed=2)
    mask = np.random.default_rng(3).random((2, 3, 5)) > 0.3
    out, weights = kt.layers.scaled_dot_product_attention(q, k, v, mask=mask)
    expected_weights = np_softmax(q @ k.transpose(0, 2, 1) / 2.0, mask)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-6)
    np.testing.assert_allclose(to_numpy(out), expected_weights @ v, atol=1e-5)


def test_causal_mask_golden_values():
    mask = to_numpy(kt.layers.causal_mask(3, 3))
    assert mask.dtype == bool and mask.shape == (1, 3, 3)
    np.testing.assert_array_equal(mask[0], np.tril(np.ones((3, 3), bool)))
    # Two queries at positions 2 and 3 of a 5-slot cache: query t sees the
    # keys at positions <= 2 + t, not the slots not yet written.
    np.testing.assert_array_equal(
        to_numpy(kt.layers.causal_mask(2, 5, 2)),
        np.array([[[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]], bool),
    )
    # The last position sees every slot.
    np.testing.assert_array_equal(
        to_numpy(kt.layers.causal_mask(1, 5, 4)), np.ones((1, 1, 5), bool)
    )


def keras_pair(num_heads=2, key_dim=4, output_dim=None, **kwargs):
    ours = kt.layers.MultiHeadAttention(
        num_heads, key_dim, output_dim=output_dim, **kwargs
    )
    theirs = keras.layers.MultiHeadAttention(
        num_heads, key_dim, output_shape=output_dim, **kwargs
    )
    return ours, theirs


@pytest.mark.parametrize(
    "case", ["self", "cross", "causal", "padded", "scores", "value_dim", "no_bias"]
)
def test_multi_head_attention_matches_keras_on_copied_weights(case):
    kwargs = {}
    if case == "value_dim":
        kwargs = {"value_dim": 3, "output_dim": 5}
    if case == "no_bias":
        kwargs = {"use_bias": False}
    ours, theirs = keras_pair(**kwargs)
    query = rand(2, 5, 8)
    value = rand(2, 7, 6, seed=1) if case == "cross" else query
    call = {}
    if case == "causal":
        call = {"use_causal_mask": True}
    if case == "padded":
        call = {
            "attention_mask": np.array([[[1] * 5] * 5, [[1, 1, 1, 0, 0]] * 5], bool)
        }
    if case == "scores":
        call = {"return_attention_scores": True, "use_causal_mask": True}
    expected = theirs(query, value, **call)
    ours(query, value, **call)
    assert [w.shape for w in ours.get_weights()] == [
        w.shape for w in theirs.get_weights()
    ]
    ours.set_weights(theirs.get_weights())
    actual = ours(query, value, **call)
    keras.tree.map_structure(
        lambda a, b: np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-5),
        actual,
        expected,
    )


def test_multi_head_attention_keras_masks_match_keras():
    embed = keras.layers.Embedding(10, 8, mask_zero=True)
    ids = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    ours, theirs = keras_pair()
    x = embed(ids)
    expected = to_numpy(theirs(x, x))
    ours(embed(ids))
    ours.set_weights(theirs.get_weights())
    actual = to_numpy(ours(embed(ids)))
    # Keras gives padded queries a uniform row; ours gives a zero row. Real
    # positions must agree.
    real = ids != 0
    np.testing.assert_allclose(actual[real], expected[real], atol=1e-5)


def test_multi_head_attention_matches_numpy_reference():
    layer = kt.layers.MultiHeadAttention(2, 3)
    query, value = rand(2, 4, 6), rand(2, 5, 6, seed=1)
    mask = np.random.default_rng(3).random((2, 4, 5)) > 0.3
    actual = layer(query, value, attention_mask=mask)
    expected = np_attention(query, value, layer.get_weights(), mask)
    np.testing.assert_allclose(to_numpy(actual), expected, atol=1e-5)


def test_multi_head_attention_with_distinct_key_matches_numpy_reference():
    # Keys come from `key`, values from `value` (widths 3 and 7 differ).
    layer = kt.layers.MultiHeadAttention(2, 3, value_dim=4)
    query, value, key = rand(2, 4, 6), rand(2, 5, 7, seed=1), rand(2, 5, 3, seed=2)
    mask = np.random.default_rng(3).random((2, 4, 5)) > 0.3
    actual = layer(query, value, key=key, attention_mask=mask)
    expected = np_attention_with_key(query, key, value, layer.get_weights(), mask)
    np.testing.assert_allclose(to_numpy(actual), expected, atol=1e-5)


def test_dropout_only_while_training():
    layer = kt.layers.MultiHeadAttention(2, 4, dropout=0.5)
    x = rand(2, 6, 8)
    np.testing.assert_array_equal(to_numpy(layer(x)), to_numpy(layer(x)))
    assert not np.allclose(to_numpy(layer(x, training=True)), to_numpy(layer(x)))


@pytest.mark.parametrize("dtype", ["mixed_float16", "mixed_bfloat16"])
def test_fully_masked_rows_are_finite_zero_under_mixed_precision(dtype):
    layer = kt.layers.MultiHeadAttention(2, 4, dtype=dtype)
    x = rand(2, 3, 8) * 100
    mask = np.ones((2, 3, 3), bool)
    mask[1, 2] = False
    out, scores = layer(x, attention_mask=mask, return_attention_scores=True)
    out, scores = to_numpy(out).astype("float32"), to_numpy(scores).astype("float32")
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(scores))
    assert np.all(scores[1, :, 2] == 0)
    np.testing.assert_allclose(scores[0].sum(-1), 1.0, atol=1e-2)


def test_cache_updates_in_place_and_matches_full_attention():
    layer = kt.layers.MultiHeadAttention(2, 4)
    x = rand(2, 6, 8)
    full = to_numpy(layer(x, use_causal_mask=True))
    cache = np.zeros((2, 2, 6, 2, 4), "float32")
    steps = []
    for i in range(6):
        out, cache = layer(
            x[:, i : i + 1], use_causal_mask=True, cache=cache, cache_update_index=i
        )
        steps.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    assert tuple(cache.shape) == (2, 2, 6, 2, 4)


def test_precomputed_cross_attention_cache_matches():
    layer = kt.layers.MultiHeadAttention(2, 4)
    query, context = rand(2, 3, 8), rand(2, 5, 8, seed=1)
    expected = to_numpy(layer(query, context))
    out, _ = layer(query, cache=layer.compute_cache(context))
    np.testing.assert_allclose(to_numpy(out), expected, atol=1e-6)


def test_config_and_keras_round_trip(tmp_path):
    layer = kt.layers.MultiHeadAttention(2, 4, value_dim=3, dropout=0.1, output_dim=6)
    run_layer_test(layer, rand(2, 5, 8), rand(2, 4, 8), expected_output_shape=(2, 5, 6))
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, layer(inputs, use_causal_mask=True))
    run_model_saving_test(model, rand(2, 5, 8), tmp_path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 0, "key_dim": 4}, "num_heads=0"),
        ({"num_heads": 2, "key_dim": -1}, "key_dim=-1"),
        ({"num_heads": 2, "key_dim": 4, "dropout": 1.0}, "dropout=1.0"),
        ({"num_heads": 2, "key_dim": 4, "dropout": -0.1}, "dropout=-0.1"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kt.layers.MultiHeadAttention(**kwargs)


def test_bad_call_arguments():
    layer = kt.layers.MultiHeadAttention(2, 4)
    with pytest.raises(ValueError, match="query.*rank 3"):
        layer(rand(5, 8))
    layer(rand(2, 5, 8))
    with pytest.raises(ValueError, match="attention_mask.*\\(2, 5, 4\\)"):
        layer(rand(2, 5, 8), attention_mask=np.ones((2, 5, 4), bool))


@pytest.mark.parametrize("self_attention", [True, False])
def test_one_matmul_projection_equals_the_sublayers(self_attention):
    # `call` multiplies by the sublayers' kernels side by side, in one
    # (B*T, E) x (E, 3*H*D) product; each sublayer called alone must agree.
    layer = kt.layers.MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3)
    x, context = rand(2, 5, 8), rand(2, 6, 8, seed=1)
    layer(x, context)
    if self_attention:
        q, k, v = layer._project(
            x, layer.query_dense, layer.key_dense, layer.value_dense
        )
        k_in = v_in = x
    else:
        (q,), (k,), (v,) = (
            layer._project(x, layer.query_dense),
            layer._project(context, layer.key_dense),
            layer._project(context, layer.value_dense),
        )
        k_in = v_in = context
    for fused, sublayer, inputs in [
        (q, layer.query_dense, x),
        (k, layer.key_dense, k_in),
        (v, layer.value_dense, v_in),
    ]:
        np.testing.assert_allclose(
            to_numpy(fused), to_numpy(sublayer(inputs)), rtol=1e-5, atol=1e-6
        )
    heads = rand(2, 5, 2, 3, seed=2)
    np.testing.assert_allclose(
        to_numpy(layer._output(heads)),
        to_numpy(layer.output_dense(heads)),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_one_query_step_equals_the_einsum_attention(kv_heads):
    # A decoding step (one query) attends by products and sums instead of
    # the einsums; probabilities and outputs must be those of the einsums.
    layer = kt.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    layer(rand(1, 3, 8))
    q = rand(2, 1, 2, 4)
    k, v = rand(2, 7, kv_heads, 4, seed=1), rand(2, 7, kv_heads, 4, seed=2)
    mask = np.ones((2, 1, 7), bool)
    mask[0, 0, 4:] = False  # cache slots not written yet
    out, probs = attend(q, k, v, mask, layer.attention_dropout, training=False)
    k, v = np.repeat(k, 2 // kv_heads, axis=2), np.repeat(v, 2 // kv_heads, axis=2)
    scores = np.einsum("bthd,bshd->bhts", q, k)
    expected_probs = np_softmax(scores, mask[:, None])
    np.testing.assert_allclose(to_numpy(probs), expected_probs, atol=1e-6)
    np.testing.assert_allclose(
        to_numpy(out), np.einsum("bhts,bshd->bthd", expected_probs, v), atol=1e-5
    )
    assert np.all(to_numpy(probs)[0, :, 0, 4:] == 0)


# ---- grouped-query attention (num_key_value_heads) ---------------------------


def np_grouped_attention(query, weights, mask=None, scale=None, bias=0.0):
    """Self-attention with K key/value heads repeated to the H query heads in
    transformers' `repeat_kv` order (query head h reads key/value head
    h // (H // K)), from `keras.layers.MultiHeadAttention`-layout weights:
    softmax(Q·Kᵀ · scale + bias)·V, `scale` None = 1 / sqrt(D)."""
    wq, bq, wk, bk, wv, bv, wo, bo = weights
    groups = wq.shape[1] // wk.shape[1]
    q = np.einsum("bte,ehd->bthd", query, wq) + bq
    k = np.repeat(np.einsum("bse,ehd->bshd", query, wk) + bk, groups, axis=2)
    v = np.repeat(np.einsum("bse,ehd->bshd", query, wv) + bv, groups, axis=2)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("bthd,bshd->bhts", q, k) * scale + bias
    probs = np_softmax(scores, None if mask is None else mask[:, None])
    heads = np.einsum("bhts,bshd->bthd", probs, v)
    return np.einsum("bthd,hde->bte", heads, wo) + bo


@pytest.mark.parametrize("num_key_value_heads", [1, 2])
def test_grouped_query_attention_matches_repeat_kv_reference(num_key_value_heads):
    layer = kt.layers.MultiHeadAttention(
        4, 3, num_key_value_heads=num_key_value_heads, bias_initializer="normal"
    )
    x = rand(2, 5, 8)
    mask = np.random.default_rng(3).random((2, 5, 5)) > 0.3
    actual = layer(x, attention_mask=mask)
    shapes = [tuple(w.shape) for w in layer.get_weights()]
    assert shapes == [(8, 4, 3), (4, 3), (8, num_key_value_heads, 3),
                      (num_key_value_heads, 3), (8, num_key_value_heads, 3),
                      (num_key_value_heads, 3), (4, 3, 8), (8,)]  # fmt: skip
    expected = np_grouped_attention(x, layer.get_weights(), mask)
    np.testing.assert_allclose(to_numpy(actual), expected, atol=1e-5)


def test_grouped_query_attention_matches_keras_group_query_attention():
    ours = kt.layers.MultiHeadAttention(4, 2, num_key_value_heads=2)
    theirs = keras.layers.GroupQueryAttention(
        head_dim=2, num_query_heads=4, num_key_value_heads=2
    )
    x = rand(2, 5, 8)
    expected = to_numpy(theirs(x, x, use_causal_mask=True))
    ours(x)
    ours.set_weights(theirs.get_weights())
    actual = to_numpy(ours(x, use_causal_mask=True))
    np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_grouped_cache_holds_only_key_value_heads_and_matches_full_attention():
    layer = kt.layers.MultiHeadAttention(4, 3, num_key_value_heads=2)
    x = rand(2, 6, 8)
    full, full_scores = layer(x, use_causal_mask=True, return_attention_scores=True)
    cache = np.zeros((2, 2, 6, 2, 3), "float32")
    # A 2-token chunk (the einsum path), then one token at a time.
    out, cache = layer(
        x[:, :2], use_causal_mask=True, cache=cache, cache_update_index=0
    )
    steps = [to_numpy(out)]
    for i in range(2, 6):
        out, scores, cache = layer(
            x[:, i : i + 1],
            use_causal_mask=True,
            return_attention_scores=True,
            cache=cache,
            cache_update_index=i,
        )
        steps.append(to_numpy(out))
        np.testing.assert_allclose(
            to_numpy(scores)[:, :, 0], to_numpy(full_scores)[:, :, i], atol=1e-6
        )
    np.testing.assert_allclose(np.concatenate(steps, axis=1), to_numpy(full), atol=1e-5)
    assert tuple(cache.shape) == (2, 2, 6, 2, 3)
    # The cache holds the projected keys and values of the 2 key/value heads.
    _, k, v = layer._project(x, layer.query_dense, layer.key_dense, layer.value_dense)
    np.testing.assert_allclose(to_numpy(cache[:, 0]), to_numpy(k), atol=1e-6)
    np.testing.assert_allclose(to_numpy(cache[:, 1]), to_numpy(v), atol=1e-6)


def test_as_many_key_value_heads_as_heads_is_plain_attention():
    plain = kt.layers.MultiHeadAttention(2, 4)
    same = kt.layers.MultiHeadAttention(2, 4, num_key_value_heads=2)
    x = rand(2, 5, 8)
    expected = to_numpy(plain(x, use_causal_mask=True))
    same(x)
    same.set_weights(plain.get_weights())
    np.testing.assert_array_equal(to_numpy(same(x, use_causal_mask=True)), expected)
    assert plain.num_key_value_heads == 2
    config = {**plain.get_config(), "name": same.name}
    assert config == same.get_config()


def test_grouped_config_and_keras_round_trip(tmp_path):
    layer = kt.layers.MultiHeadAttention(6, 2, num_key_value_heads=3, value_dim=3)
    run_layer_test(layer, rand(2, 5, 8), expected_output_shape=(2, 5, 8))
    assert layer.get_config()["num_key_value_heads"] == 3
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, layer(inputs, use_causal_mask=True))
    run_model_saving_test(model, rand(2, 5, 8), tmp_path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 4, "num_key_value_heads": 3},
         "num_heads=4, num_key_value_heads=3"),
        ({"num_heads": 4, "num_key_value_heads": 0}, "num_key_value_heads=0"),
        ({"num_heads": 2, "num_key_value_heads": 4},
         "num_heads=2, num_key_value_heads=4"),
    ],
)  # fmt: skip
def test_bad_key_value_heads(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kt.layers.MultiHeadAttention(key_dim=4, **kwargs)


# ---- scale and position bias (T5) -------------------------------------------


@pytest.mark.parametrize("num_key_value_heads", [None, 1])
def test_default_scale_is_one_over_sqrt_key_dim_bit_for_bit(num_key_value_heads):
    default = kt.layers.MultiHeadAttention(
        2, 4, num_key_value_heads=num_key_value_heads
    )
    explicit = kt.layers.MultiHeadAttention(
        2, 4, num_key_value_heads=num_key_value_heads, scale=1 / math.sqrt(4)
    )
    x = rand(2, 5, 8)
    expected = to_numpy(default(x, use_causal_mask=True))
    explicit(x)
    explicit.set_weights(default.get_weights())
    np.testing.assert_array_equal(to_numpy(explicit(x, use_causal_mask=True)), expected)


@pytest.mark.parametrize("scale, num_key_value_heads", [(1.0, None), (0.3, 1)])
def test_scale_matches_numpy_reference(scale, num_key_value_heads):
    # T5 does not scale the scores (scale=1.0): softmax(Q·Kᵀ)·V.
    layer = kt.layers.MultiHeadAttention(
        2, 4, num_key_value_heads=num_key_value_heads, scale=scale,
        bias_initializer="normal",
    )  # fmt: skip
    x = rand(2, 5, 8)
    mask = np.random.default_rng(3).random((2, 5, 5)) > 0.3
    actual = to_numpy(layer(x, attention_mask=mask))
    expected = np_grouped_attention(x, layer.get_weights(), mask, scale=scale)
    np.testing.assert_allclose(actual, expected, atol=1e-5)
    unscaled = np_grouped_attention(x, layer.get_weights(), mask)
    assert not np.allclose(actual, unscaled, atol=1e-3)


@pytest.mark.parametrize("num_key_value_heads", [None, 1])
def test_position_bias_matches_numpy_reference(num_key_value_heads):
    layer = kt.layers.MultiHeadAttention(
        2, 4, num_key_value_heads=num_key_value_heads, scale=1.0
    )
    x = rand(2, 5, 8)
    bias = rand(1, 2, 5, 5, seed=4) * 3  # one bias per head, every row
    out, probs = layer(
        x, use_causal_mask=True, position_bias=bias, return_attention_scores=True
    )
    causal = np.tril(np.ones((5, 5), bool))[None]
    expected = np_grouped_attention(x, layer.get_weights(), causal, 1.0, bias)
    np.testing.assert_allclose(to_numpy(out), expected, atol=1e-5)
    # The bias never reaches a masked key.
    assert np.all(to_numpy(probs)[:, :, ~causal[0]] == 0)


@pytest.mark.parametrize("num_key_value_heads", [None, 1])
def test_cached_decoding_with_position_bias_equals_the_full_pass(num_key_value_heads):
    layer = kt.layers.MultiHeadAttention(
        2, 4, num_key_value_heads=num_key_value_heads, scale=1.0
    )
    x = rand(2, 6, 8)
    bias = rand(2, 2, 6, 6, seed=4) * 3  # (B, H, T, S): rows are positions
    full = to_numpy(layer(x, use_causal_mask=True, position_bias=bias))
    cache = np.zeros((2, 2, 6, layer.num_key_value_heads, 4), "float32")
    # A 2-token chunk, then one token at a time: the rows of this call's
    # positions, one column per cache slot.
    out, cache = layer(x[:, :2], use_causal_mask=True, cache=cache,
                       cache_update_index=0, position_bias=bias[:, :, :2])  # fmt: skip
    steps = [to_numpy(out)]
    for i in range(2, 6):
        out, cache = layer(
            x[:, i : i + 1],
            use_causal_mask=True,
            cache=cache,
            cache_update_index=i,
            position_bias=bias[:, :, i : i + 1],
        )
        steps.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_position_bias_is_added_in_float32_under_mixed_precision():
    # Every score is 16 * 16 = 256, where bfloat16's spacing is 2: added in
    # bfloat16, a bias of 1 would round away (256 + 1 -> 256, equal weights).
    layer = kt.layers.MultiHeadAttention(
        1, 1, use_bias=False, scale=1.0, dtype="mixed_bfloat16"
    )
    x = np.full((1, 2, 1), 16.0, "float32")
    layer(x)
    for dense in (layer.query_dense, layer.key_dense):
        dense.kernel.assign(np.ones(dense.kernel.shape, "float32"))
    bias = np.array([[[[1.0, 0.0]]]], "float32")  # (1, 1, 1, S): key 0 + 1
    _, probs = layer(x, position_bias=bias, return_attention_scores=True)
    expected = np_softmax(np.array([257.0, 256.0]))  # [0.731, 0.269]
    np.testing.assert_allclose(
        to_numpy(probs).astype("float32")[0, 0], [expected] * 2, atol=4e-3
    )


@pytest.mark.parametrize("scale", [None, 1.0])
def test_scale_config_round_trip(scale, tmp_path):
    layer = kt.layers.MultiHeadAttention(2, 4, scale=scale)
    run_layer_test(layer, rand(2, 5, 8), expected_output_shape=(2, 5, 8))
    # Saved only when given, so configs written before `scale` compare equal.
    assert ("scale" in layer.get_config()) == (scale is not None)
    assert layer.get_config().get("scale") == scale
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, layer(inputs, use_causal_mask=True))
    restored = run_model_saving_test(model, rand(2, 5, 8), tmp_path)
    assert restored.layers[-1].scale == scale


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_bad_scale(scale):
    with pytest.raises(ValueError, match=f"scale={scale!r}"):
        kt.layers.MultiHeadAttention(2, 4, scale=scale)


def test_bad_position_bias_shape():
    layer = kt.layers.MultiHeadAttention(2, 4)
    with pytest.raises(ValueError, match="position_bias.*\\(2, 3, 5, 5\\)"):
        layer(rand(2, 5, 8), position_bias=np.zeros((2, 3, 5, 5), "float32"))
