"""LoRA on every model class: `enable_lora`, `save_lora` / `load_lora`,
`merge_lora`.

`enable_lora(rank, targets, alpha)` freezes every weight and adds a trainable
low-rank update `alpha / rank * A @ B` to each projection named in
`targets` (the attention's `query`, `key`, `value`, `attention_output`, the
feed-forward's `feedforward_intermediate_dense` / `feedforward_output_dense`,
or Llama's `gate`, `up`, `down`): `A` is `(in, rank)`, `B` `(rank, out)`,
zeros, so the outputs are unchanged until training moves them. The
attention projections are `kt.layers.lora.Projection`s (LoRA over the
kernel as a matrix), the feed-forward ones Keras' `Dense` (whose LoRA is
that already).

An adapter file (`save_lora`) is a safetensors file of the `A` and `B`
matrices, named by their layer's path in the model, with the rank, alpha,
targets and the base model's class and config in its metadata; `load_lora`
refuses one made for another base. `model.save(...)` of a model with LoRA
writes the merged weights (Keras merges LoRA when a layer saves): a plain
model.
"""

import json
import os
import tempfile

import keras
import numpy as np

from keras_transformer import _validation as validation
from keras_transformer._compat import (
    collect_once,
    flatten_layers,
    kernel_variable,
    merged_lora_kernel,
    unlocked,
)

LORA_LAYERS = (keras.layers.Dense, keras.layers.EinsumDense)
METADATA_KEY = "keras_transformer_lora"
# Filled by `keras_transformer.pretrained.peft` (the checkpoint room):
# `load(model, folder)` and `save(model, folder)` of PEFT adapter folders.
PEFT_FORMAT = {}


class LoRAMixin:
    """LoRA for a model class (see the module)."""

    @property
    def lora_rank(self):
        """None, or the rank of the enabled LoRA update."""
        return getattr(self, "_lora", {}).get("rank")

    @property
    def lora_alpha(self):
        """None, or the alpha of the enabled LoRA update (its scale is
        `lora_alpha / lora_rank`)."""
        return getattr(self, "_lora", {}).get("alpha")

    def enable_lora(self, rank, targets=("query", "value"), alpha=None):
        """Freezes the model and adds a trainable rank-`rank` update to each
        projection named in `targets`.

        Args:
            rank: the rank `r` of each update, a positive integer.
            targets: the names of the projections to adapt: `"query"`,
                `"key"`, `"value"`, `"attention_output"`, the feed-forward's
                `"feedforward_intermediate_dense"` /
                `"feedforward_output_dense"` (Llama: `"gate"`, `"up"`,
                `"down"`).
            alpha: the update's scale numerator (`alpha / rank`); None is
                `rank` (a scale of 1).

        Raises:
            ValueError: naming a rank <= 0, an alpha <= 0, a target that
                matches no layer, or LoRA enabled twice.
        """
        validation.check_positive_int("rank", rank)
        if alpha is not None and (
            isinstance(alpha, bool) or not isinstance(alpha, int | float) or alpha <= 0
        ):
            raise ValueError(
                f"`alpha` must be a positive number. Received: alpha={alpha!r}"
            )
        if isinstance(targets, str) or not targets:
            raise ValueError(
                "`targets` must be a non-empty list of layer names. "
                f"Received: targets={targets!r}"
            )
        if self.lora_rank is not None:
            raise ValueError(
                f"LoRA is already enabled (rank {self.lora_rank}). "
                f"Received: rank={rank!r}"
            )
        layers = self.projection_layers()
        names = sorted({layer.name for layer in layers})
        for target in targets:
            if target not in names:
                raise ValueError(
                    f"No layer of this {type(self).__name__} is named "
                    f"{target!r}; its projections are {names}. Received: "
                    f"targets={tuple(targets)!r}"
                )
        frozen = [v for v in self.variables if v.trainable]
        for variable in frozen:
            variable.trainable = False
        for layer in layers:
            if layer.name in targets:
                layer.enable_lora(rank, lora_alpha=alpha)
        # Paths, not the variables: a model tracks variables it holds and
        # would save them as its own.
        self._lora = {
            "rank": rank,
            "alpha": float(alpha if alpha is not None else rank),
            "targets": list(targets),
            "frozen": [v.path for v in frozen],
        }
        self._reset_compiled_functions()

    def projection_layers(self):
        """The `Dense` / `EinsumDense` layers LoRA can adapt (`targets`
        name them)."""
        return [la for la in flatten_layers(self) if isinstance(la, LORA_LAYERS)]

    def lora_layers(self):
        """`{path in the model: layer}` of the layers with LoRA enabled."""
        prefix = self.name + "/"
        return {
            layer.path.removeprefix(prefix): layer
            for layer in self.projection_layers()
            if getattr(layer, "lora_enabled", False)
        }

    def _reset_compiled_functions(self):
        self.train_function = self.test_function = self.predict_function = None

    def _check_lora(self, caller):
        if self.lora_rank is None:
            raise ValueError(
                f"`{caller}` needs LoRA enabled (`enable_lora`). Received: a "
                "model without LoRA"
            )

    def _base_description(self):
        """The class and config (names aside) an adapter is made for."""
        config = json.loads(json.dumps(self.get_config(), default=repr))
        return {"class": type(self).__name__, "config": _without_names(config)}

    def save_lora(self, path, format="keras_transformer"):
        """Writes the LoRA matrices alone to `path`.

        Args:
            path: with `format="keras_transformer"`, the safetensors file to
                write (an existing file is replaced, and nothing is left
                half-written); with `format="peft"`, the folder of a Hugging
                Face PEFT adapter (`adapter_config.json`,
                `adapter_model.safetensors`; `GPT2` and `Llama` models).
            format: `"keras_transformer"` or `"peft"`.

        Returns:
            The absolute path written.
        """
        from safetensors.numpy import save_file

        if format not in ("keras_transformer", "peft"):
            raise ValueError(
                "`format` must be 'keras_transformer' or 'peft'. "
                f"Received: format={format!r}"
            )
        self._check_lora("save_lora")
        if format == "peft":
            PEFT_FORMAT["modules"](self)  # a ValueError for other classes
            return PEFT_FORMAT["save"](self, os.fspath(path))
        tensors = {}
        for name, layer in self.lora_layers().items():
            tensors[f"{name}/lora_kernel_a"] = np.asarray(layer.lora_kernel_a)
            tensors[f"{name}/lora_kernel_b"] = np.asarray(layer.lora_kernel_b)
        settings = {k: v for k, v in self._lora.items() if k != "frozen"}
        metadata = {**settings, "base": self._base_description()}
        path = os.path.abspath(os.fspath(path))
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        handle, scratch = tempfile.mkstemp(dir=folder, suffix=".partial")
        os.close(handle)
        try:
            save_file(tensors, scratch, metadata={METADATA_KEY: json.dumps(metadata)})
            os.replace(scratch, path)
        finally:
            if os.path.exists(scratch):
                os.remove(scratch)
        return path

    def load_lora(self, path):
        """Reads an adapter written by `save_lora` into this model, enabling
        LoRA with the file's rank, alpha and targets if it is not enabled.

        `path` is a `save_lora` file, or the folder of a Hugging Face PEFT
        LoRA adapter (`adapter_config.json`, `adapter_model.safetensors`)
        of a `GPT2` or `Llama` model's checkpoint: its logits are then
        PEFT's.

        Raises:
            FileNotFoundError: for a missing `path`.
            ValueError: for a file that is not an adapter, or one made for
                another base model (class, config or shapes differ), before
                any weight changes.
        """
        from safetensors import safe_open

        path = os.fspath(path)
        if os.path.isdir(path):
            return PEFT_FORMAT["load"](self, path)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"No adapter file at `path`. Received: path={path!r}"
            )
        with safe_open(path, framework="numpy") as file:
            metadata = (file.metadata() or {}).get(METADATA_KEY)
            tensors = {key: file.get_tensor(key) for key in file.keys()}
        if metadata is None:
            raise ValueError(
                f"`path` is not a keras_transformer LoRA adapter (no "
                f"{METADATA_KEY!r} metadata). Received: path={path!r}"
            )
        metadata = json.loads(metadata)
        base = self._base_description()
        if metadata["base"] != base:
            raise ValueError(
                "The adapter was made for another base model "
                f"({metadata['base']['class']} with another config). "
                f"Received: path={path!r}"
            )
        if self.lora_rank is None:
            self.enable_lora(
                metadata["rank"], targets=metadata["targets"], alpha=metadata["alpha"]
            )
        layers = self.lora_layers()
        expected = {
            f"{name}/{part}": tuple(getattr(layer, part).shape)
            for name, layer in layers.items()
            for part in ("lora_kernel_a", "lora_kernel_b")
        }
        received = {key: tuple(value.shape) for key, value in tensors.items()}
        if received != expected:
            raise ValueError(
                "The adapter's matrices do not fit this model's LoRA layers "
                f"(rank {self.lora_rank}, targets {self._lora['targets']}). "
                f"Received: path={path!r}"
            )
        for name, layer in layers.items():
            layer.lora_kernel_a.assign(tensors[f"{name}/lora_kernel_a"])
            layer.lora_kernel_b.assign(tensors[f"{name}/lora_kernel_b"])

    def merge_lora(self):
        """Folds each LoRA update into its kernel and removes the LoRA
        matrices: the model computes the same and is a plain model again
        (trainable as before `enable_lora`), ready to export, quantize or
        `save_pretrained`."""
        self._check_lora("merge_lora")
        with collect_once():  # Keras collects per variable deleted
            for layer in self.lora_layers().values():
                _merge_layer(layer)
        frozen = set(self._lora["frozen"])
        for variable in self.variables:
            if variable.path in frozen:
                variable.trainable = True
        self._lora = {}
        self._reset_compiled_functions()


def _merge_layer(layer):
    """Folds `layer`'s LoRA update into its kernel; removes its matrices."""
    kernel = kernel_variable(layer)
    if layer.quantization_mode is None:
        merged = np.asarray(keras.ops.convert_to_numpy(layer.kernel))
    else:  # int8 (QLoRA): dequantize, merge, quantize again
        values, scale = merged_lora_kernel(layer)[:2]
    with unlocked(layer):
        if layer.quantization_mode is None:
            kernel.assign(merged.astype(kernel.dtype))
        elif hasattr(layer, "assign_int8"):  # ours: any layout
            layer.assign_int8(values, scale)
        else:
            kernel.assign(values)
            layer.kernel_scale.assign(scale)
        del layer.lora_kernel_a
        del layer.lora_kernel_b
        layer.lora_enabled = False
        layer.lora_rank = None


def _without_names(value):
    """A config with every `"name"` entry dropped (a model's and its
    layers' names depend on how many were made before)."""
    if isinstance(value, dict):
        return {k: _without_names(v) for k, v in value.items() if k != "name"}
    if isinstance(value, list):
        return [_without_names(v) for v in value]
    return value
