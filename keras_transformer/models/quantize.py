"""`quantize("int8")` on every model class: Keras' API, with numbers that
stay right.

Keras' `Model.quantize` swaps the kernels of `Dense`, `EinsumDense` and
`Embedding` layers for int8 values and scales. Our attention layers and tied
output heads multiply by those kernels directly (`kt.layers.quantization`
applies the scales there), so a model is quantized here, with a check of the
mode first:

- `"int8"`: weight-only int8 (`Int8QuantizationConfig(activation_quantizer=
  None)`): one scale per output column of each projection and per row of
  each embedding table; activations stay float.
- anything else (`"int4"`, `"float8"`, `"gptq"`, `"awq"`, a custom
  `config`, `filters`) is refused with a ValueError; so is quantizing twice.

The mode joins the model's config, so a `.keras` file of a quantized model
rebuilds its layers quantized before the int8 weights are read.
"""

import keras

from keras_transformer.layers.quantization import SUPPORTED_MODES

QUANTIZED_LAYERS = (
    keras.layers.Dense,
    keras.layers.EinsumDense,
    keras.layers.Embedding,
)


def weight_only_config(mode):
    """The Keras quantization config of `mode`: weights only."""
    return keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)


class QuantizeMixin:
    """`quantize(mode)` for a model class; `quantized_mode` is None (float)
    or the mode it was quantized with."""

    @property
    def quantized_mode(self):
        """None (float weights) or the mode the model was quantized with.
        (Keras' own `quantization_mode` of a model stays None: the model's
        call is not quantized, its layers are.)"""
        return getattr(self, "_quantized_mode", None)

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Quantizes the weights of every projection and embedding table.

        Args:
            mode: `"int8"` (weights stored as int8 with a float scale per
                output column; activations stay float). Other Keras modes
                are refused.
            config: a Keras quantization config: only its mode is used
                (the weights are quantized as above).
            filters: not supported (must be None): every projection and
                embedding is quantized, none is left float.
            **kwargs: Keras' `type_check`.

        Raises:
            ValueError: naming an unsupported `mode`, `config` or `filters`,
                or a model that is already quantized.
        """
        # Keras' wrapper has made `config` of `mode` (or `mode` of `config`).
        mode = getattr(config, "mode", mode)
        if mode not in SUPPORTED_MODES:
            raise ValueError(
                f"`mode` must be one of {SUPPORTED_MODES} for a "
                f"{type(self).__name__}. Received: mode={mode!r}"
            )
        if filters is not None:
            raise ValueError(
                "`filters` is not supported: every projection and embedding "
                f"is quantized. Received: filters={filters!r}"
            )
        if getattr(self, "lora_rank", None) is not None:
            raise ValueError(
                "Quantizing a model with LoRA enabled is not supported: call "
                f"`merge_lora()` first. Received: mode={mode!r}"
            )
        if self.quantized_mode is not None:
            raise ValueError(
                f"This {type(self).__name__} is already quantized "
                f"({self.quantized_mode!r}). Received: mode={mode!r}"
            )
        self._quantize_layers(mode, **kwargs)

    def _quantize_layers(self, mode, **kwargs):
        """Quantizes the float layers (a head's backbone may already be)."""
        super().quantize(
            mode,
            config=weight_only_config(mode),
            filters=lambda layer: (
                isinstance(layer, QUANTIZED_LAYERS)
                and getattr(layer, "quantization_mode", None) is None
            ),
            **kwargs,
        )
        self._quantized_mode = mode
        backbone = getattr(self, "backbone", None)
        if isinstance(backbone, QuantizeMixin):
            backbone._quantized_mode = mode

    def _quantization_config(self):
        """The config entry of the mode (empty when float)."""
        mode = self.quantized_mode
        return {} if mode is None else {"quantization_mode": mode}

    def _requantize(self, mode):
        """After `from_config`: the layers quantized again (before the int8
        weights are loaded into them)."""
        if mode is not None and self.quantized_mode is None:
            self._quantize_layers(mode)
        return self
