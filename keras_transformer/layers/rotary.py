"""Rotary position embeddings (RoPE), with Hugging Face's semantics.

Shape legend: B batch, T sequence length, H heads, D head size.

Each pair of features `(i, i + D/2)` of a query or key head is rotated by the
angle `position * inverse_frequency[i]`: the two HALVES of the head are the
pair, as in transformers' `rotate_half`, not interleaved neighbours as in the
RoFormer paper. Inverse frequencies, angles, cosines and sines are float32
whatever the layer's dtype; the cosines and sines are cast to the input's
dtype before they multiply it, as transformers does.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers.masking import positions

# The keys each rope scaling type reads, besides "rope_type" (or the older
# "type"); "rope_theta" may repeat the layer's own `rope_theta`.
SCALING_KEYS = {
    "linear": ("factor",),
    "llama3": (
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    ),
    # llama.cpp's `rope_freqs.weight` (Llama 3.1+ GGUF files): one factor per
    # feature pair, each inverse frequency divided by its own.
    "frequency_factors": ("factors",),
}


def rope_scaling_type(rope_scaling, rope_theta=None):
    """The checked scaling type of a Hugging Face `rope_scaling` dict.

    Returns None for no scaling (`None`, or the type `"default"`), else
    `"linear"` or `"llama3"`. Raises a ValueError naming any other type, a
    missing or unknown key, or a non-positive factor.
    """
    if rope_scaling is None:
        return None
    if not isinstance(rope_scaling, dict):
        raise ValueError(
            "`rope_scaling` must be None or a dict such as "
            "{'rope_type': 'linear', 'factor': 2.0}. "
            f"Received: rope_scaling={rope_scaling!r}"
        )
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if kind == "default":
        return None
    if kind not in SCALING_KEYS:
        raise ValueError(
            f"Unsupported rope scaling type {kind!r}: only 'default', "
            f"{', '.join(repr(k) for k in SCALING_KEYS)} are computed. "
            f"Received: rope_scaling={rope_scaling!r}"
        )
    known = {"rope_type", "type", "rope_theta", *SCALING_KEYS[kind]}
    for key in rope_scaling:
        if key not in known:
            raise ValueError(
                f"Unsupported key {key!r} in a {kind!r} rope_scaling (it reads "
                f"{list(SCALING_KEYS[kind])}). Received: rope_scaling={rope_scaling!r}"
            )
    for key in SCALING_KEYS[kind]:
        if key not in rope_scaling:
            raise ValueError(
                f"A {kind!r} rope_scaling needs {key!r}. "
                f"Received: rope_scaling={rope_scaling!r}"
            )
        if key == "factors":
            values = rope_scaling[key]
            if not isinstance(values, list | tuple) or not values:
                raise ValueError(
                    "rope_scaling['factors'] must be a non-empty list of positive "
                    f"numbers. Received: rope_scaling={rope_scaling!r:.200}"
                )
            for value in values:
                validation.check_positive_number("rope_scaling['factors'][i]", value)
            continue
        validation.check_positive_number(f"rope_scaling['{key}']", rope_scaling[key])
    if kind == "llama3" and not (
        rope_scaling["high_freq_factor"] > rope_scaling["low_freq_factor"]
    ):
        raise ValueError(
            "A 'llama3' rope_scaling needs high_freq_factor > low_freq_factor. "
            f"Received: rope_scaling={rope_scaling!r}"
        )
    theta = rope_scaling.get("rope_theta", rope_theta)
    if rope_theta is not None and theta != rope_theta:
        raise ValueError(
            f"`rope_scaling['rope_theta']` ({theta!r}) differs from "
            f"`rope_theta` ({rope_theta!r}). Received: rope_scaling={rope_scaling!r}"
        )
    return kind


def rotary_inverse_frequencies(head_dim, rope_theta=10000.0, rope_scaling=None):
    """The `(head_dim // 2,)` float32 inverse frequencies of each feature pair.

    `1 / rope_theta^(2i / head_dim)`, then divided by `factor` (`"linear"`),
    by each pair's own factor (`"frequency_factors"`) or, for `"llama3"`,
    divided by `factor` for wavelengths longer than
    `original_max_position_embeddings / low_freq_factor`, kept for those
    shorter than `original_max_position_embeddings / high_freq_factor`, and
    interpolated between the two in between: transformers' formulas, in
    float32 and in its order of operations.

    Examples:
        >>> import keras_transformer as kt
        >>> kt.layers.rotary_inverse_frequencies(4, 100.0).tolist()
        [1.0, 0.10000000149011612]
    """
    validation.check_positive_int("head_dim", head_dim)
    validation.check_positive_number("rope_theta", rope_theta)
    kind = rope_scaling_type(rope_scaling, rope_theta)
    f32 = np.float32
    exponents = np.arange(0, head_dim, 2, dtype="float32") / f32(head_dim)
    # theta^x rounded once from float64: what float32 pow gives, up to an ulp.
    inverse = f32(1.0) / np.power(
        float(rope_theta), exponents.astype("float64")
    ).astype("float32")
    if kind == "linear":
        return inverse / f32(rope_scaling["factor"])
    if kind == "frequency_factors":
        factors = np.asarray(rope_scaling["factors"], "float32")
        if factors.shape != inverse.shape:
            raise ValueError(
                f"rope_scaling['factors'] must hold head_dim // 2 = {len(inverse)} "
                f"factors. Received: {len(factors)} factors"
            )
        return inverse / factors
    if kind == "llama3":
        factor = f32(rope_scaling["factor"])
        low, high = (
            f32(rope_scaling["low_freq_factor"]),
            f32(rope_scaling["high_freq_factor"]),
        )
        context = f32(rope_scaling["original_max_position_embeddings"])
        low_wavelength, high_wavelength = context / low, context / high
        wavelength = f32(2 * math.pi) / inverse
        scaled = np.where(wavelength > low_wavelength, inverse / factor, inverse)
        smooth = (context / wavelength - low) / (high - low)
        smoothed = (f32(1.0) - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelength < high_wavelength) & ~(wavelength > low_wavelength)
        return np.where(medium, smoothed, scaled).astype("float32")
    return inverse


@keras.saving.register_keras_serializable(package="keras_transformer")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding of query or key heads (Hugging Face's RoPE).

    Rotates the feature pairs `(i, i + head_dim/2)` of each head by
    `position * inverse_frequency[i]` (`kt.layers.rotary_inverse_frequencies`):
    `x * cos + rotate_half(x) * sin`, with `rotate_half(x) = [-x2, x1]` for
    the halves `x1`, `x2` of the head. No weights.

    Args:
        head_dim: size D of each head (even); independent of the model width.
        rope_theta: the base of the wavelengths.
        rope_scaling: None, or a Hugging Face dict: `{"rope_type": "linear",
            "factor": f}` or `{"rope_type": "llama3", "factor": ...,
            "low_freq_factor": ..., "high_freq_factor": ...,
            "original_max_position_embeddings": ...}` (`"type"` is read as the
            older spelling of `"rope_type"`; `"default"` means none), or
            `{"rope_type": "frequency_factors", "factors": [...]}` (llama.cpp's
            `rope_freqs.weight`: each inverse frequency divided by its
            factor). Any other type is refused by name.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(B, T, H, D)` query or key heads.
        start_index: the position of `inputs[:, 0]` (an int, or an int scalar
            tensor while decoding with a cache; a `(B,)` tensor puts each
            row at its own position).

    Returns:
        `(B, T, H, D)`, the rotated heads, in the input's dtype.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> rope = kt.layers.RotaryEmbedding(head_dim=4)
        >>> x = np.ones((1, 3, 2, 4), "float32")
        >>> tuple(rope(x, start_index=5).shape)
        (1, 3, 2, 4)

    References:
        Su et al., "RoFormer: Enhanced Transformer with Rotary Position
        Embedding", 2021.
    """

    def __init__(self, head_dim, rope_theta=10000.0, rope_scaling=None, **kwargs):
        super().__init__(**kwargs)
        validation.check_positive_int("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(
                f"`head_dim` must be even (features rotate in pairs). "
                f"Received: head_dim={head_dim}"
            )
        self.inverse_frequencies = rotary_inverse_frequencies(
            head_dim, rope_theta, rope_scaling
        )
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        self.supports_masking = True
        self.built = True  # no weights: `rotate` may be called before `call`

    def call(self, inputs, start_index=0):
        validation.check_rank("inputs", inputs.shape, 4)
        if inputs.shape[-1] is not None and inputs.shape[-1] != self.head_dim:
            raise ValueError(
                f"The last axis of `inputs` must be head_dim={self.head_dim}. "
                f"Received: inputs with shape {tuple(inputs.shape)}"
            )
        cos, sin = self.cos_sin(ops.shape(inputs)[1], start_index, inputs.dtype)
        return self.rotate(inputs, cos, sin)

    def rotate(self, inputs, cos, sin):
        """`inputs` `(B, T, H, D)` rotated by `cos_sin`'s angles: what
        `call` does, for callers that rotate several tensors (queries and
        keys) by the same positions and compute the angles once."""
        half = self.head_dim // 2
        rotated = ops.concatenate([-inputs[..., half:], inputs[..., :half]], axis=-1)
        return inputs * cos + rotated * sin

    def cos_sin(self, length, start_index=0, dtype="float32"):
        """The `(1, T, 1, D)` cosines and sines of positions `start_index ..
        start_index + length - 1` (`(B, T, 1, D)` for a `(B,)` `start_index`:
        each row at its own position), computed in float32, cast to
        `dtype`."""
        at = ops.cast(positions(length, start_index), "float32")  # (1 or B, T)
        angles = at[..., None] * ops.convert_to_tensor(self.inverse_frequencies)
        angles = ops.concatenate([angles, angles], axis=-1)[:, :, None, :]
        return ops.cast(ops.cos(angles), dtype), ops.cast(ops.sin(angles), dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "head_dim": self.head_dim,
                "rope_theta": self.rope_theta,
                "rope_scaling": self.rope_scaling,
            }
        )
        return config

    def compute_output_shape(self, inputs_shape):
        return inputs_shape
