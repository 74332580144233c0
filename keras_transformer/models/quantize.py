"""`quantize("int8")` on every model class: Keras' API, with numbers that
stay right.

Keras' `Model.quantize` swaps the kernels of `Dense`, `EinsumDense` and
`Embedding` layers for int8 values and scales. Our attention layers and tied
output heads multiply by those kernels directly (`kt.layers.quantization`
applies the scales there), so a model is quantized here, with a check of the
mode first:

- `"int8"`: weight-only int8: activations stay float. Each projection has
  a scale per block of `block_size` input rows (128 by default) in each
  output column (`kt.layers.quantization.BlockConfig`; `block_size=None`:
  one per column); each embedding table one per row. Keras' own `Dense`
  layers in heads (a classifier, a pooler) keep Keras' scale per column.
- anything else (`"int4"`, `"float8"`, `"gptq"`, `"awq"`, a custom
  `config`, `filters`) is refused with a ValueError; so is quantizing twice.

Each weight is rounded to the nearest of 255 levels: `values = round(w *
scale)` in [-127, 127] with `scale = 127 / max |w|` over its column, block
or row (Keras adds 1e-7 to the maximum; the blocks do not), so it is within
half a step, `max |w| / 254`, of its float value. The tests check the int8
values and scales against that rounding in numpy, and that outputs are
those of the dequantized weights to 2e-5 of their largest magnitude; on
the committed tiny checkpoints they are within 0.5% (BERT) to 9% (Qwen2,
tied head) of the float outputs' largest magnitude.

The mode and block size join the model's config, so a `.keras` file of a
quantized model rebuilds its layers quantized before the int8 weights are
read.
"""

import keras

from keras_transformer._compat import collect_once, flatten_layers
from keras_transformer.layers.quantization import SUPPORTED_MODES, BlockConfig

QUANTIZED_LAYERS = (
    keras.layers.Dense,
    keras.layers.EinsumDense,
    keras.layers.Embedding,
)


DEFAULT_BLOCK_SIZE = 128


class QuantizeMixin:
    """`quantize(mode)` for a model class; `quantized_mode` is None (float)
    or the mode it was quantized with."""

    @property
    def quantized_mode(self):
        """None (float weights) or the mode the model was quantized with.
        (Keras' own `quantization_mode` of a model stays None: the model's
        call is not quantized, its layers are.)"""
        return getattr(self, "_quantized_mode", None)

    def quantize(
        self,
        mode=None,
        config=None,
        filters=None,
        block_size=DEFAULT_BLOCK_SIZE,
        **kwargs,
    ):
        """Quantizes the weights of every projection and embedding table.

        Args:
            mode: `"int8"` (weights stored as int8 with float scales;
                activations stay float). Other Keras modes are refused.
            config: a Keras quantization config: its mode is used, and a
                `kt.layers.quantization.BlockConfig`'s block size in place
                of `block_size` (the weights are quantized as above,
                whatever quantizers a config names).
            filters: not supported (must be None): every projection and
                embedding is quantized, none is left float.
            block_size: the input rows that share a scale in each output
                column of a projection (a projection with no more rows has
                one scale per column), or None for one scale per column.
                Smaller blocks follow outlying weights more closely; the
                scales take `4 / block_size` bytes per weight.
            **kwargs: Keras' `type_check`.

        Raises:
            ValueError: naming an unsupported `mode`, `config`, `filters`
                or `block_size`, or a model that is already quantized.
        """
        # Keras' wrapper has made `config` of `mode` (or `mode` of `config`).
        mode = getattr(config, "mode", mode)
        if isinstance(config, BlockConfig):
            block_size = config.block_size
        block_config = BlockConfig(block_size)  # checks `block_size`
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
        self._quantize_layers(mode, block_config, **kwargs)

    def _quantize_layers(self, mode, config, float_layers=(), **kwargs):
        """Quantizes the float layers (a head's backbone may already be),
        but those named in `float_layers` (paths below the model's)."""
        with collect_once():
            super().quantize(
                mode,
                config=config,
                filters=lambda layer: (
                    isinstance(layer, QUANTIZED_LAYERS)
                    and getattr(layer, "quantization_mode", None) is None
                    and self._path_of(layer) not in float_layers
                ),
                **kwargs,
            )
        if float_layers:
            self._quantization_float_layers = tuple(float_layers)
        self.mark_quantized(mode, config.block_size)
        backbone = getattr(self, "backbone", None)
        if isinstance(backbone, QuantizeMixin) and backbone.quantized_mode is None:
            # (A backbone quantized before keeps its own block size.)
            backbone.mark_quantized(mode, config.block_size)

    def mark_quantized(self, mode, block_size, keep_float=False):
        """Records that the model's layers were quantized with `mode` and
        `block_size` other than by its `quantize` (by its head's, or one by
        one as a GGUF file's Q8_0 / Q4_0 tensors are loaded): it then
        reports `quantized_mode`, and its config names both, so that its
        `.keras` file rebuilds the layers quantized.

        Args:
            mode: the quantization mode (`"int8"`).
            block_size: the input rows sharing a scale, or None (a scale
                per column).
            keep_float: also record the projections and embeddings that
                are still float, so that the `.keras` file rebuilds them
                float.
        """
        self._quantized_mode = mode
        self._quantization_block_size = block_size
        if keep_float:
            self._keep_float()

    def _quantization_config(self):
        """The config entries of the mode and block size (none when
        float; no block size with a scale per column, as before blocks, so
        adapters saved then still match the model's config)."""
        mode = self.quantized_mode
        if mode is None:
            return {}
        config = {"quantization_mode": mode}
        block_size = getattr(self, "_quantization_block_size", None)
        if block_size is not None:
            config["quantization_block_size"] = block_size
        float_layers = getattr(self, "_quantization_float_layers", ())
        if float_layers:
            config["quantization_float_layers"] = list(float_layers)
        return config

    def requantize(self, mode, block_size=None, float_layers=()):
        """Used by `from_config` (returns the model): the layers quantized
        again (before the int8 weights are loaded into them), but
        `float_layers`. A file saved
        before blocks has no block size: a scale per column, as it was
        quantized."""
        if mode is not None and self.quantized_mode is None:
            self._quantize_layers(mode, BlockConfig(block_size), float_layers)
        return self

    def _keep_float(self):
        """Records the projections and embeddings that are still float in
        a model whose other layers were quantized one by one (a GGUF file's
        Q8_0 / Q4_0 tensors), so that its `.keras` file rebuilds them so."""
        self._quantization_float_layers = tuple(
            self._path_of(layer)
            for layer in flatten_layers(self)
            if isinstance(layer, QUANTIZED_LAYERS)
            and getattr(layer, "quantization_mode", None) is None
        )

    def _path_of(self, layer):
        """`layer`'s path below the model (the model's own name varies)."""
        return layer.path.removeprefix(f"{self.name}/")
