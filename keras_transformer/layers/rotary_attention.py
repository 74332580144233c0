"""Multi-head attention with rotary positions and an optional sliding window:
the self-attention of Llama, Mistral and Qwen2.

Shape legend: B batch, T query length, S key length (the cache's slots while
decoding), H query heads, K key/value heads, D head size.
"""

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.grouped import attend
from keras_transformer.layers.lora import Projection
from keras_transformer.layers.masking import merge_masks, positions
from keras_transformer.layers.rotary import RotaryEmbedding, rope_scaling_type

# Which projections carry a bias: transformers' Llama and Mistral have none
# (Llama's `attention_bias=True`: all four), Qwen2 has q, k and v only.
BIAS_LAYOUTS = {
    False: (),
    True: ("query", "key", "value", "attention_output"),
    "qkv": ("query", "key", "value"),
}


def check_rotary_attention_arguments(
    num_heads, num_key_value_heads, rope_theta, rope_scaling, sliding_window,
    attention_bias,
):  # fmt: skip
    """Raises a ValueError naming the first bad argument of a
    `RotaryAttention` (or of a block that builds one)."""
    validation.check_positive_int("num_heads", num_heads)
    validation.check_positive_int(
        "num_key_value_heads", num_key_value_heads, allow_none=True
    )
    if num_key_value_heads is not None and num_heads % num_key_value_heads:
        raise ValueError(
            "`num_heads` must be a multiple of `num_key_value_heads`. "
            f"Received: num_heads={num_heads}, "
            f"num_key_value_heads={num_key_value_heads}"
        )
    validation.check_positive_number("rope_theta", rope_theta)
    rope_scaling_type(rope_scaling, rope_theta)
    validation.check_positive_int("sliding_window", sliding_window, allow_none=True)
    if not (isinstance(attention_bias, bool) or attention_bias == "qkv"):
        raise ValueError(
            "`attention_bias` must be False, True or 'qkv'. "
            f"Received: attention_bias={attention_bias!r}"
        )


def sliding_window_mask(query_length, key_length, window, start_index=0):
    """`(1, T, S)` boolean (`(B, T, S)` for a `(B,)` `start_index`): query
    `t`, at position `start_index + t`, may see key `s` iff `position - s <
    window` (with the causal mask: the last `window` positions, itself
    included)."""
    rows = positions(query_length, start_index)[:, :, None]
    cols = ops.arange(key_length, dtype="int32")[None, None, :]
    return ops.less(rows - cols, window)


@keras.saving.register_keras_serializable(package="keras_transformer")
class RotaryAttention(MultiHeadAttention):
    """`kt.layers.MultiHeadAttention` with rotary positions on queries and
    keys, grouped key/value heads and an optional sliding window.

    Queries and keys are rotated (`kt.layers.RotaryEmbedding`) at their
    positions, `cache_update_index` onwards while decoding, before the keys
    enter the cache, so the cache holds rotated keys as transformers' does.
    With `sliding_window=W`, query position `i` sees key position `j` only
    if `i - j < W` (with `use_causal_mask`: `0 <= i - j < W`, Mistral's
    window), in the full pass and over the cache alike. The sublayers are
    those of `kt.layers.MultiHeadAttention` (`query`, `key`, `value`,
    `attention_output`), plus the weightless `rotary_embedding`; their
    kernels are matrices, `(E, H·D)` and `(H·D, E)` (Hugging Face's
    `q_proj`... transposed), not `(E, H, D)` and `(H, D, E)`: XLA on the CPU
    reads a 3-D kernel used as a matrix about 3.5x slower than a 2-D one at
    batch 1 (see docs/benchmarks.md), and decoding is that read.

    Args:
        num_heads: number of query heads H.
        key_dim: size D of every head (queries, keys and values).
        num_key_value_heads: number of key/value heads K (dividing H);
            None = H.
        rope_theta: the rotary base.
        rope_scaling: None or a Hugging Face rope scaling dict (see
            `kt.layers.RotaryEmbedding`).
        sliding_window: None, or how many positions (itself included) a
            query sees.
        attention_bias: which projections have biases: False (none, Llama
            and Mistral), True (all four, Llama's `attention_bias=True`) or
            `"qkv"` (query, key and value: Qwen2).
        dropout: dropout rate on the attention probabilities.
        output_dim: width of the output; defaults to the query's last dim.
        scale: the factor of the query-key products; None (the default) is
            `1 / sqrt(key_dim)`.
        **kwargs: `kernel_initializer`, `bias_initializer` and base
            `keras.layers.Layer` arguments.

    Call arguments: those of `kt.layers.MultiHeadAttention`.

    Returns:
        As `kt.layers.MultiHeadAttention`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> attention = kt.layers.RotaryAttention(4, 8, num_key_value_heads=2,
        ...                                       sliding_window=3)
        >>> x = np.random.rand(2, 5, 16).astype("float32")
        >>> tuple(attention(x, use_causal_mask=True).shape)
        (2, 5, 16)

    References:
        Su et al., "RoFormer: Enhanced Transformer with Rotary Position
        Embedding", 2021. Ainslie et al., "GQA: Training Generalized
        Multi-Query Transformer Models from Multi-Head Checkpoints", 2023.
        Jiang et al., "Mistral 7B", 2023.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        num_key_value_heads=None,
        rope_theta=10000.0,
        rope_scaling=None,
        sliding_window=None,
        attention_bias=False,
        dropout=0.0,
        output_dim=None,
        scale=None,
        **kwargs,
    ):
        check_rotary_attention_arguments(
            num_heads,
            num_key_value_heads,
            rope_theta,
            rope_scaling,
            sliding_window,
            attention_bias,
        )
        super().__init__(
            num_heads,
            key_dim,
            dropout=dropout,
            use_bias=bool(attention_bias),
            output_dim=output_dim,
            num_key_value_heads=num_key_value_heads,
            scale=scale,
            **kwargs,
        )
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.sliding_window = sliding_window
        self.attention_bias = attention_bias
        # No weights; made here so that bad rope arguments fail at once.
        self.rotary_embedding = RotaryEmbedding(
            key_dim,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            dtype=self.dtype_policy,
            name="rotary_embedding",
        )

    def _has_bias(self, name):
        return name in BIAS_LAYOUTS[self.attention_bias]

    def _projection(self, name, heads, depth, input_shape):
        layer = Projection(
            "bte,ef->btf",
            output_shape=(None, heads * depth),
            bias_axes="f" if self._has_bias(name) else None,
            name=name,
            **self._sublayer_kwargs(),
        )
        layer.supports_masking = True  # masks are read in `call`
        layer.build(input_shape)
        return layer

    def _output_projection(self, output_dim):
        layer = Projection(
            "btf,fe->bte",
            output_shape=(None, output_dim),
            bias_axes="e" if self._has_bias("attention_output") else None,
            name="attention_output",
            **self._sublayer_kwargs(),
        )
        layer.build((None, None, self.num_heads * self.key_dim))
        return layer

    def _heads(self, layer):
        return (layer.float_kernel_shape[-1] // self.key_dim, self.key_dim)

    def _project(self, x, *layers):
        if len(layers) > 1 and x.shape[1] == 1:
            # One-token decoding: a matrix product per projection, so the
            # kernels are read in place, not first copied side by side.
            return [super(RotaryAttention, self)._project(x, la)[0] for la in layers]
        return super()._project(x, *layers)

    def _add_positions(self, q, k, start_index):
        start = 0 if start_index is None else start_index
        rotary = self.rotary_embedding
        cos, sin = rotary.cos_sin(ops.shape(q)[1], start, q.dtype)  # once for both
        return rotary.rotate(q, cos, sin), rotary.rotate(k, cos, sin)

    def _attend(self, q, k, v, mask, bias, training):
        # transformers' SDPA multiplies the float32 scores by the scale;
        # scaling float32 queries instead rounds the same way to float32
        # (bfloat16 queries times 1/sqrt(D) would round to 8 bits first).
        q = ops.cast(q, "float32") * self._scale()
        return attend(q, k, v, mask, self.attention_dropout, training, bias)

    def _attention_mask(
        self, query, value, key, attention_mask, use_causal_mask, cache, index
    ):
        mask = super()._attention_mask(
            query, value, key, attention_mask, use_causal_mask, cache, index
        )
        if self.sliding_window is None:
            return mask
        key_length = ops.shape(value)[1] if cache is None else ops.shape(cache)[2]
        window = sliding_window_mask(
            ops.shape(query)[1],
            key_length,
            self.sliding_window,
            0 if index is None else index,
        )
        return merge_masks(mask, window)

    def get_config(self):
        config = super().get_config()
        for name in ("value_dim", "use_bias"):  # fixed by key_dim, attention_bias
            del config[name]
        config.update(
            {
                "rope_theta": self.rope_theta,
                "rope_scaling": self.rope_scaling,
                "sliding_window": self.sliding_window,
                "attention_bias": self.attention_bias,
            }
        )
        return config
