"""T5's blocks in float16 as transformers computes them: the feed-forward's
output projection (`wo`) in float32, the residual stream float32 from there,
and float16 hidden states clamped below float16's largest value.

transformers keeps T5's `wo` in float32 when a model loads in float16
(`_keep_in_fp32_modules = ["wo"]`; not in bfloat16, whose range is
float32's): real checkpoints' feed-forward outputs pass 65504 and would be
inf. The float32 `wo` output added to the residual makes the residual
float32 for the rest of the stack; each sub-block still reads it through
its norm, which returns the model's dtype. While the residual is float16
(the first block's attention), it is clamped to +-65504 (+-64504 where it
holds an inf), as `T5Block` clamps it.

Shape legend: B batch, T sequence length, E hidden size, F intermediate size.
"""

import keras
from keras import ops

from keras_transformer.layers import quantization
from keras_transformer.layers.decoder import TransformerDecoderBlock
from keras_transformer.layers.encoder import TransformerEncoderBlock
from keras_transformer.layers.feedforward import GatedFeedForward
from keras_transformer.layers.normalization import RMSNormalization

FLOAT16_MAX = 65504.0


def clamp_float16(x):
    """`x` clamped as transformers' `T5Block` clamps float16 hidden states;
    other dtypes unchanged."""
    if x.dtype != "float16":
        return x
    limit = ops.where(
        ops.any(ops.isinf(x)), FLOAT16_MAX - 1000.0, FLOAT16_MAX
    )  # an inf becomes the largest value less 1000
    limit = ops.cast(limit, x.dtype)
    return ops.clip(x, -limit, limit)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Float32OutputGatedFeedForward(GatedFeedForward):
    """`kt.layers.GatedFeedForward` whose `down` projection (T5's `wo`)
    holds and computes in float32: `(B, T, E)` in, float32 `(B, T, E)` out."""

    def _dense(self, name, units, inputs_shape):
        if name != "down":
            return super()._dense(name, units, inputs_shape)
        layer = quantization.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
            dtype="float32",
            name=name,
        )
        layer.build(inputs_shape)
        return layer


class Float32Residual:
    """What T5's float16 blocks change in `TransformerBlockBase`: inputs are
    not cast to the model's dtype (a float32 residual passes through), the
    norms read them as they are, the feed-forward's output projection is
    float32, and a float16 residual is clamped after each sub-block."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "autocast": False})

    def _layer_norm(self, name, inputs_shape):
        norm = RMSNormalization(
            self.layer_norm_epsilon, dtype=self.dtype_policy, autocast=False, name=name
        )
        norm.build(inputs_shape)
        return norm

    def _sublayer_input(self, x, norm):
        # The norm computes in float32 and rounds to the model's dtype once.
        return ops.cast(norm(x), self.compute_dtype)

    def _build_feedforward(self, inputs_shape):
        if self.feedforward_kind == "gated":
            self.feedforward = Float32OutputGatedFeedForward(
                self.intermediate_dim,
                activation=self.activation,
                use_bias=self.use_bias,
                kernel_initializer=self._initializers()["kernel_initializer"],
                dtype=self.dtype_policy,
                name=self.SUBLAYERS["feedforward"][1],
            )
            self.feedforward.build(inputs_shape)
            return
        dense = {"feedforward_intermediate_dense": self.dtype_policy,
                 "feedforward_output_dense": "float32"}  # fmt: skip
        for name, dtype in dense.items():
            output = name == "feedforward_output_dense"
            layer = quantization.Dense(
                inputs_shape[-1] if output else self.intermediate_dim,
                activation=None if output else self.activation,
                use_bias=self.use_bias,
                dtype=dtype,
                name=name,
                **self._initializers(),
            )
            layer.build(
                (*inputs_shape[:-1], self.intermediate_dim) if output else inputs_shape
            )
            setattr(self, name, layer)

    def _residual(self, x, h, norm, dropout, training):
        if training:  # the dropout layers compute in the model's dtype
            h = dropout(h, training=training)
        return clamp_float16(ops.add(x, h))


@keras.saving.register_keras_serializable(package="keras_transformer")
class Float32ResidualEncoderBlock(Float32Residual, TransformerEncoderBlock):
    """`kt.layers.TransformerEncoderBlock` (pre-norm, RMS) as T5 computes
    it in float16 (see the module docstring)."""


@keras.saving.register_keras_serializable(package="keras_transformer")
class Float32ResidualDecoderBlock(Float32Residual, TransformerDecoderBlock):
    """`kt.layers.TransformerDecoderBlock` (pre-norm, RMS) as T5 computes
    it in float16 (see the module docstring)."""
