"""Scaled dot-product and multi-head attention.

Shape legend: B batch, T query length, S key/value length, H heads,
K key/value heads (`num_key_value_heads`), G = H // K query heads per
key/value head, D per-head size (`key_dim` or `value_dim`), E model width.
"""

import itertools
import math

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers import quantization
from keras_transformer.layers.grouped import attend
from keras_transformer.layers.lora import Projection
from keras_transformer.layers.masking import (
    causal_mask,
    keras_mask,
    masked_softmax,
    merge_masks,
    write_cache,
)


def scaled_dot_product_attention(query, key, value, mask=None):
    """softmax(Q·Kᵀ / √d_k)·V with a boolean mask.

    Args:
        query: `(..., T, d_k)`.
        key: `(..., S, d_k)`.
        value: `(..., S, d_v)`.
        mask: optional boolean, broadcastable to `(..., T, S)`; True = may
            attend. A query whose keys are all masked gets zero weights.

    Returns:
        `(output, attention_weights)` of shapes `(..., T, d_v)` and
        `(..., T, S)`, in the dtype of `value`. The scores and the softmax
        are computed in float32 from float32 copies of `query` and `key`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> q = k = v = np.eye(3, dtype="float32")[None]
        >>> out, weights = kt.layers.scaled_dot_product_attention(q, k, v)
        >>> tuple(out.shape), tuple(weights.shape)
        ((1, 3, 3), (1, 3, 3))
    """
    query = ops.cast(ops.convert_to_tensor(query), "float32")
    key = ops.cast(ops.convert_to_tensor(key), "float32")
    value = ops.convert_to_tensor(value)
    depth = ops.cast(ops.shape(key)[-1], "float32")
    # Scores and softmax in float32, whatever the inputs' dtype (see
    # `layers/grouped.py`); the weights are rounded to the values' dtype.
    scores = ops.matmul(query, ops.swapaxes(key, -1, -2)) / ops.sqrt(depth)
    weights = ops.cast(masked_softmax(scores, mask), value.dtype)
    return quantization.product(weights, value), weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with the weights of `keras.layers.MultiHeadAttention`.

    Queries, keys and values are projected into `num_heads` heads of size
    `key_dim` (`value_dim` for values), each head runs scaled dot-product
    attention, and a learned projection combines the concatenated heads. The
    sublayers, weight order and shapes are those of
    `keras.layers.MultiHeadAttention`, so `set_weights(keras_mha.get_weights())`
    reproduces its outputs. The softmax runs in float32 and a query whose keys
    are all masked gets a zero attention row (never NaN), including under
    mixed precision.

    With `num_key_value_heads` smaller than `num_heads` (grouped-query
    attention; 1 is multi-query attention), keys and values are projected
    into fewer heads and each group of `num_heads // num_key_value_heads`
    consecutive query heads shares one: query head `h` reads key/value head
    `h // (num_heads // num_key_value_heads)`, as transformers' `repeat_kv`.

    The scores are `Q·Kᵀ · scale` (`scale` defaults to `1 / sqrt(key_dim)`;
    T5 uses 1.0), plus an optional additive `position_bias` given to `call`
    (T5's relative position bias, computed once per stack and shared by its
    layers; ALiBi), added in float32 before the masked softmax.

    For autoregressive decoding, `call` accepts a fixed-shape key/value
    `cache` of shape `(B, 2, S_max, K, D)` (K = `num_key_value_heads`) that
    is updated in place at `cache_update_index`, so a compiled decode loop
    never retraces.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each query/key head.
        value_dim: size of each value head; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities (training only).
        use_bias: whether the projections have biases.
        output_dim: width of the output; defaults to the query's last dim.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        num_key_value_heads: number of key/value heads K, dividing
            `num_heads`; None (the default) is `num_heads`, the weights of
            `keras.layers.MultiHeadAttention`.
        scale: the factor of the query-key products, a finite float > 0;
            None (the default) is `1 / sqrt(key_dim)`.
        key_bias: with `use_bias`, whether the key projection has one too
            (Whisper's has none: a key bias adds the same amount to every
            score of a query, which the softmax cancels).
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, E_q)`.
        value: `(B, S, E_v)`; defaults to `query` (self-attention).
        key: `(B, S, E_k)`; defaults to `value`.
        attention_mask: boolean `(B, T, S)`, True = may attend. Combined with
            the Keras masks of `query`, `value` and `key` and the causal mask.
        use_causal_mask: whether query `t` only attends to keys `<= t`.
        return_attention_scores: also return the `(B, H, T, S)` probabilities.
        training: whether attention dropout is active.
        cache: optional `(B, 2, S_max, K, D)` keys and values. With
            `cache_update_index` the keys/values of this call are written into
            it at that index and attention runs over the whole cache; without
            it the cache is used as is (precomputed cross-attention).
        cache_update_index: int scalar position of `query[:, 0]`, or an int
            `(B,)` tensor: each row at its own position (a server's slots).
        position_bias: optional float `(B, H, T, S)`, any axis of which may
            be 1: added to the scores (after `scale`) before the softmax.
            Rows are this call's queries and columns its keys: with a cache,
            the rows of positions `cache_update_index ... + T - 1` and one
            column per cache slot.

    Returns:
        `(B, T, output_dim)`; with `return_attention_scores`, also the scores;
        with `cache`, also the updated cache (always last).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> mha = kt.layers.MultiHeadAttention(num_heads=2, key_dim=4)
        >>> x = np.random.rand(3, 5, 8).astype("float32")
        >>> tuple(mha(x, use_causal_mask=True).shape)
        (3, 5, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        num_key_value_heads=None,
        scale=None,
        key_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("num_heads", num_heads)
        validation.check_bool("key_bias", key_bias)
        validation.check_positive_int(
            "num_key_value_heads", num_key_value_heads, allow_none=True
        )
        if num_key_value_heads is not None and num_heads % num_key_value_heads:
            raise ValueError(
                "`num_heads` must be a multiple of `num_key_value_heads`. "
                f"Received: num_heads={num_heads}, "
                f"num_key_value_heads={num_key_value_heads}"
            )
        validation.check_positive_int("key_dim", key_dim)
        validation.check_positive_int("value_dim", value_dim, allow_none=True)
        validation.check_positive_int("output_dim", output_dim, allow_none=True)
        validation.check_rate("dropout", dropout)
        if scale is not None:
            validation.check_positive_number("scale", scale)
        self.num_heads = num_heads
        self.num_key_value_heads = num_key_value_heads or num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim if value_dim is not None else key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.scale = scale
        self.key_bias = key_bias
        self.supports_masking = True

    def build(self, query_shape, value_shape=None, key_shape=None):
        validation.check_rank("query", query_shape, 3)
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        validation.check_rank("value", value_shape, 3)
        validation.check_rank("key", key_shape, 3)
        output_dim = self.output_dim or query_shape[-1]
        kv_heads = self.num_key_value_heads
        self.query_dense = self._projection(
            "query", self.num_heads, self.key_dim, query_shape
        )
        self.key_dense = self._projection("key", kv_heads, self.key_dim, key_shape)
        self.value_dense = self._projection(
            "value", kv_heads, self.value_dim, value_shape
        )
        self.output_dense = self._output_projection(output_dim)
        self.attention_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.built = True

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_update_index=None,
        position_bias=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        mask = self._attention_mask(
            query,
            value,
            key,
            attention_mask,
            use_causal_mask,
            cache,
            cache_update_index,
        )
        if position_bias is not None:
            self._check_position_bias(position_bias, query, value, cache)
        reads_cache_only = cache is not None and cache_update_index is None
        if reads_cache_only:  # precomputed cross-attention keys and values
            (q,) = self._project(query, self.query_dense)
            k, v = cache[:, 0], cache[:, 1]
        elif query is value and value is key:  # self-attention: one matmul
            q, k, v = self._project(
                query, self.query_dense, self.key_dense, self.value_dense
            )
        else:
            (q,) = self._project(query, self.query_dense)
            (k,) = self._project(key, self.key_dense)
            (v,) = self._project(value, self.value_dense)
        if not reads_cache_only:
            q, k = self._add_positions(q, k, cache_update_index)
        if cache is not None and not reads_cache_only:
            kv = ops.stack([k, v], axis=1)  # (B, 2, T, K, D)
            cache = write_cache(cache, kv, cache_update_index)
            k, v = cache[:, 0], cache[:, 1]
        output, scores = self._attend(q, k, v, mask, position_bias, training)
        output = self._output(output)
        outputs = (output, scores) if return_attention_scores else (output,)
        if cache is not None:
            outputs += (cache,)
        return outputs[0] if len(outputs) == 1 else outputs

    def compute_cache(self, value, key=None):
        """Projects `value`/`key` once into a `(B, 2, S, K, D)` cache.

        Used for cross-attention, whose keys and values do not change while
        decoding; pass the result as `cache` without `cache_update_index`.
        """
        key = value if key is None else key
        if key is value:
            k, v = self._project(value, self.key_dense, self.value_dense)
        else:
            (k,), (v,) = (
                self._project(key, self.key_dense),
                self._project(value, self.value_dense),
            )
        return ops.stack([k, v], axis=1)

    def _add_positions(self, q, k, start_index):
        """Where a subclass encodes positions into the projected queries
        `(B, T, H, D)` and keys `(B, T, K, D)` of positions `start_index` (None
        = 0) onwards, before keys enter the cache; unchanged here."""
        return q, k

    def _has_bias(self, name):
        """Whether the projection sublayer `name` has a bias."""
        return self.use_bias and (self.key_bias or name != "key")

    def _project(self, x, *layers):
        """`x` `(B, T, E)` through the projections `layers`, in one matmul.

        The kernels `(E, H, D)` of the `EinsumDense` sublayers are used as
        `(E, H·D)` matrices, side by side, so `x` is multiplied once as a
        `(B·T, E)` matrix: the same numbers as calling each sublayer, in one
        plain matrix product whose gradient is one too (the sublayers' einsum
        costs a batched product and a sum in the backward pass, and a slow
        fused loop in one-token decoding). Returns one `(B, T, heads, D)`
        tensor per layer (its kernel's heads); a layer without a bias adds
        zeros where others have one.
        """
        width = x.shape[-1]
        # int8 kernels (`quantize("int8")`) come with their scales.
        matrices = [quantization.kernel_matrix(layer, width) for layer in layers]
        sizes = [matrix.columns for matrix in matrices]
        y = quantization.matmul(ops.reshape(x, (-1, width)), matrices)
        if any(layer.bias is not None for layer in layers):
            biases = [
                ops.zeros((size,), x.dtype)
                if layer.bias is None
                else ops.reshape(ops.cast(layer.bias, x.dtype), (-1,))
                for layer, size in zip(layers, sizes, strict=True)
            ]
            y = y + (biases[0] if len(layers) == 1 else ops.concatenate(biases))
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        parts = (
            [y]
            if len(layers) == 1
            else ops.split(y, list(itertools.accumulate(sizes[:-1])), axis=1)
        )
        return [
            ops.reshape(part, (batch, length, *self._heads(layer)))
            for part, layer in zip(parts, layers, strict=True)
        ]

    def _output(self, heads):
        """`(B, T, H, D)` -> `(B, T, output_dim)` through `output_dense`'s
        kernel `(H, D, E)` (or `(H·D, E)`) used as a `(H·D, E)` matrix (see
        `_project`)."""
        depth = heads.shape[-2] * heads.shape[-1]
        matrix = quantization.kernel_matrix(self.output_dense, depth)
        y = quantization.matmul(ops.reshape(heads, (-1, depth)), [matrix])
        if self.output_dense.bias is not None:
            y = y + ops.cast(self.output_dense.bias, heads.dtype)
        batch, length = ops.shape(heads)[0], ops.shape(heads)[1]
        return ops.reshape(y, (batch, length, matrix.columns))

    def _attend(self, q, k, v, mask, bias, training):
        """Projected heads -> `(outputs (B, T, H, D), probabilities)`.

        The queries are scaled in their own dtype, as transformers' Whisper
        (and BERT, BART, ViT) scales its `q_proj` output; the scores are
        float32 from there (`layers/grouped.py`)."""
        q = ops.multiply(q, ops.cast(self._scale(), q.dtype))
        return attend(q, k, v, mask, self.attention_dropout, training, bias)

    def _scale(self):
        return 1.0 / math.sqrt(self.key_dim) if self.scale is None else self.scale

    def _check_position_bias(self, bias, query, value, cache):
        key_length = value.shape[1] if cache is None else cache.shape[2]
        expected = (query.shape[0], self.num_heads, query.shape[1], key_length)
        validation.check_mask_shape("position_bias", bias.shape, expected)

    def _attention_mask(
        self, query, value, key, attention_mask, use_causal_mask, cache, index
    ):
        """Merges the explicit, Keras (padding) and causal masks into (B, T, S)."""
        query_length = ops.shape(query)[1]
        key_length = ops.shape(value)[1] if cache is None else ops.shape(cache)[2]
        if attention_mask is not None:
            expected = (
                query.shape[0],
                query.shape[1],
                None if cache is not None else value.shape[1],
            )
            validation.check_mask_shape(
                "attention_mask", attention_mask.shape, expected
            )
        query_mask = keras_mask(query)
        key_masks = []
        if cache is None:
            key_masks = [keras_mask(value), None if key is value else keras_mask(key)]
        return merge_masks(
            attention_mask,
            None if query_mask is None else ops.expand_dims(query_mask, -1),
            *[None if m is None else ops.expand_dims(m, 1) for m in key_masks],
            causal_mask(query_length, key_length, 0 if index is None else index)
            if use_causal_mask
            else None,
        )

    def _projection(self, name, heads, depth, input_shape):
        layer = Projection(
            "bte,ehd->bthd",
            output_shape=(None, heads, depth),
            bias_axes="hd" if self._has_bias(name) else None,
            name=name,
            **self._sublayer_kwargs(),
        )
        # Masks are read in `call`; passing them through the projections
        # (instead of dropping them with a warning) keeps inputs untouched.
        layer.supports_masking = True
        layer.build(input_shape)
        return layer

    def _output_projection(self, output_dim):
        """The built `attention_output` sublayer: kernel `(H, D, E)`."""
        layer = Projection(
            "bthd,hde->bte",
            output_shape=(None, output_dim),
            bias_axes="e" if self._has_bias("attention_output") else None,
            name="attention_output",
            **self._sublayer_kwargs(),
        )
        layer.build((None, None, self.num_heads, self.value_dim))
        return layer

    def _heads(self, layer):
        """`(heads, depth)` of a projection sublayer's outputs."""
        return tuple(layer.float_kernel_shape[1:])

    def _sublayer_kwargs(self):
        return {
            "kernel_initializer": keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
            "bias_initializer": keras.initializers.get(
                keras.initializers.serialize(self.bias_initializer)
            ),
            "dtype": self.dtype_policy,
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "num_key_value_heads": self.num_key_value_heads,
            }
        )
        if self.scale is not None:  # configs saved before `scale` stay equal
            config["scale"] = self.scale
        if not self.key_bias:
            config["key_bias"] = False
        return config

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])
