"""What encoder and decoder blocks share: arguments, input checks, the
padding mask, the residual wiring (post-LN or pre-LN), the normalization
(LayerNorm or RMS) and the position-wise feed-forward network (dense or
gated).

Shape legend: B batch, T sequence length, E hidden size, F intermediate size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers import quantization
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feedforward import GatedFeedForward
from keras_transformer.layers.normalization import RMSNormalization

NORMS = ("layer", "rms")
FEEDFORWARDS = ("dense", "gated")


def padding_attention_mask(padding_mask):
    """`(B, T)` padding -> `(B, T, T)`: real queries attend to real keys only.

    Padded queries get an all-False row (zero attention), so an explicit
    `padding_mask` and a Keras mask from `mask_zero` give identical numbers.
    """
    if padding_mask is None:
        return None
    padding_mask = keras.ops.cast(padding_mask, "bool")
    return keras.ops.logical_and(padding_mask[:, :, None], padding_mask[:, None, :])


def check_block_inputs(inputs, padding_mask=None, attention_mask=None):
    """Validates the ranks and mask shapes every block call receives."""
    validation.check_rank("inputs", inputs.shape, 3)
    batch, length = inputs.shape[0], inputs.shape[1]
    if padding_mask is not None:
        validation.check_mask_shape("padding_mask", padding_mask.shape, (batch, length))
    if attention_mask is not None:
        validation.check_mask_shape(
            "attention_mask", attention_mask.shape, (batch, length, length)
        )


class TransformerBlockBase(keras.layers.Layer):
    """Base of `TransformerEncoderBlock` and `TransformerDecoderBlock`.

    Not a public layer: it holds the arguments both blocks take, builds
    their named sublayers and wires one residual sub-block `f` as

    - post-LN (`normalize_first=False`, the paper): `norm(x + drop(f(x)))`
    - pre-LN (`normalize_first=True`, GPT-2): `x + drop(f(norm(x)))`

    with `_sublayer_input(x, norm)` before `f` and `_residual(x, f(...),
    norm, dropout)` after it. `norm` picks LayerNorm or RMS normalization,
    `feedforward` two dense layers or a gated unit (`GatedFeedForward`).

    `SUBLAYERS` maps each sublayer's role to its attribute and layer names,
    in the order `build` makes them: `.keras` files store weights under the
    attribute names, LoRA adapters under the layer names, `get_weights`
    lists weights in this order and seeded initializers draw in it, so a
    configuration whose files were saved otherwise (`RotaryDecoderBlock`)
    lists its own.
    """

    HEAD_SIZE_ARGUMENT = "key_dim"  # its name in messages
    SUBLAYERS = {
        "self_attention": ("self_attention_layer", "self_attention"),
        "self_attention_norm": ("self_attention_layer_norm",) * 2,
        "self_attention_dropout": ("self_attention_dropout",) * 2,
        "cross_attention": ("cross_attention_layer", "cross_attention"),
        "cross_attention_norm": ("cross_attention_layer_norm",) * 2,
        "cross_attention_dropout": ("cross_attention_dropout",) * 2,
        "feedforward": ("feedforward",) * 2,  # dense: two layers of their own
        "feedforward_norm": ("feedforward_layer_norm",) * 2,
        "feedforward_dropout": ("feedforward_dropout",) * 2,
    }

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        activation="relu",
        normalize_first=False,
        layer_norm_epsilon=1e-6,
        key_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        *,
        norm="layer",
        feedforward="dense",
        use_bias=True,
        scale=None,
        key_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_choice("norm", norm, NORMS)
        validation.check_bool("key_bias", key_bias)
        validation.check_choice("feedforward", feedforward, FEEDFORWARDS)
        validation.check_bool("use_bias", use_bias)
        validation.check_positive_int("num_heads", num_heads)
        validation.check_positive_int("intermediate_dim", intermediate_dim)
        validation.check_positive_int("key_dim", key_dim, allow_none=True)
        validation.check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.key_dim = key_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.norm = norm
        self.feedforward_kind = feedforward
        self.use_bias = use_bias
        self.scale = scale
        self.key_bias = key_bias
        self.supports_masking = True

    def sublayer(self, role):
        """The sublayer playing `role` (a key of `SUBLAYERS`)."""
        return getattr(self, self.SUBLAYERS[role][0])

    def _head_size(self, hidden_dim):
        if self.key_dim is not None:
            return self.key_dim
        if hidden_dim % self.num_heads:
            raise ValueError(
                "The hidden size must be divisible by `num_heads` when "
                f"`{self.HEAD_SIZE_ARGUMENT}` is not given. Received: hidden size "
                f"{hidden_dim}, "
                f"num_heads={self.num_heads}"
            )
        return hidden_dim // self.num_heads

    def _initializers(self):
        # Fresh initializer objects per sublayer, so no two share a seed.
        return {
            "kernel_initializer": keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
            "bias_initializer": keras.initializers.get(
                keras.initializers.serialize(self.bias_initializer)
            ),
        }

    def _build_sublayers(
        self, inputs_shape, context_shape=None, self_attention=None, **attention
    ):
        """Makes, builds and sets every sublayer, in `SUBLAYERS`' order:
        the self-attention (`self_attention` if given, else a
        `MultiHeadAttention` with the `attention` options), the
        cross-attention where `context_shape` is given, the feed-forward,
        and a norm and a dropout for each."""
        hidden_dim = inputs_shape[-1]
        for role, (attribute, name) in self.SUBLAYERS.items():
            kind = role.split("_")[-1]
            if role.startswith("cross") and context_shape is None:
                continue
            if role == "feedforward":
                self._build_feedforward(inputs_shape)
                continue
            if kind == "norm":
                layer = self._layer_norm(name, inputs_shape)
            elif kind == "dropout":
                layer = keras.layers.Dropout(
                    self.dropout, dtype=self.dtype_policy, name=name
                )
            else:
                layer = self_attention if role == "self_attention" else None
                if layer is None:
                    layer = MultiHeadAttention(
                        num_heads=self.num_heads,
                        key_dim=self._head_size(hidden_dim),
                        dropout=self.dropout,
                        use_bias=self.use_bias,
                        output_dim=hidden_dim,
                        scale=self.scale,
                        key_bias=self.key_bias,
                        dtype=self.dtype_policy,
                        name=name,
                        **(attention if role == "self_attention" else {}),
                        **self._initializers(),
                    )
                layer.build(inputs_shape, context_shape if role[0] == "c" else None)
            setattr(self, attribute, layer)

    def _build_feedforward(self, inputs_shape):
        if self.feedforward_kind == "gated":
            self.feedforward = GatedFeedForward(
                self.intermediate_dim,
                activation=self.activation,
                use_bias=self.use_bias,
                kernel_initializer=self._initializers()["kernel_initializer"],
                dtype=self.dtype_policy,
                name=self.SUBLAYERS["feedforward"][1],
            )
            self.feedforward.build(inputs_shape)
            return
        self.feedforward_intermediate_dense = quantization.Dense(
            self.intermediate_dim,
            activation=self.activation,
            use_bias=self.use_bias,
            dtype=self.dtype_policy,
            name="feedforward_intermediate_dense",
            **self._initializers(),
        )
        self.feedforward_intermediate_dense.build(inputs_shape)
        self.feedforward_output_dense = quantization.Dense(
            inputs_shape[-1],
            use_bias=self.use_bias,
            dtype=self.dtype_policy,
            name="feedforward_output_dense",
            **self._initializers(),
        )
        self.feedforward_output_dense.build((*inputs_shape[:-1], self.intermediate_dim))

    def _layer_norm(self, name, inputs_shape):
        if self.norm == "rms":
            norm = RMSNormalization(
                self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
        else:
            norm = keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
        norm.build(inputs_shape)
        return norm

    def _sublayer_input(self, x, norm):
        """What a sub-block reads: `norm(x)` in pre-LN, `x` in post-LN."""
        return norm(x) if self.normalize_first else x

    def _residual(self, x, h, norm, dropout, training):
        """Adds a sub-block's output `h` `(B, T, E)` back onto its input `x`."""
        if self.normalize_first:
            return x + dropout(h, training=training)
        return norm(x + dropout(h, training=training))

    def _feedforward(self, x, training):
        norm = self.sublayer("feedforward_norm")
        h = self._sublayer_input(x, norm)
        if self.feedforward_kind == "gated":
            h = self.feedforward(h)
        else:
            h = self.feedforward_output_dense(self.feedforward_intermediate_dense(h))
        return self._residual(
            x, h, norm, self.sublayer("feedforward_dropout"), training
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "normalize_first": self.normalize_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "key_dim": self.key_dim,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        # Written only when set, so that configs read before are unchanged.
        options = dict(
            norm=self.norm,
            feedforward=self.feedforward_kind,
            use_bias=self.use_bias,
            scale=self.scale,
            key_bias=self.key_bias,
        )
        defaults = dict(
            norm="layer", feedforward="dense", use_bias=True, scale=None, key_bias=True
        )
        config.update({k: v for k, v in options.items() if v != defaults[k]})
        return config

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape
