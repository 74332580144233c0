"""`model.quantize("int8")` on every model class: int8 values and scales
equal to numpy's rounding of the float weights over the documented axis;
outputs equal (to 2e-5 of their scale) to those of numpy's dequantized
weights, and within `MEASURED` (0.5% to 9%) of the float outputs' largest
magnitude on the committed checkpoints; `.keras` and SavedModel round
trips, cached == uncached decoding, and the modes it refuses.

Before, Keras' own `quantize("int8")` ran without error and the attention
layers and tied output heads read the raw int8 kernels: an imported GPT-2's
logits came out hundreds of times their scale.
"""

import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.generation.stream import ChunkedDecoding
from tests.helpers import run_export_test

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
QUANTIZED = (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Embedding)


def example_inputs(model):
    """A batch for `model`, padded where its inputs can be."""
    rng = np.random.default_rng(0)
    if isinstance(model, kt.models.ViT):
        size = model.image_size
        return rng.normal(size=(2, size, size, 3)).astype("float32")
    if isinstance(model, kt.models.Whisper):  # log-mel frames, not ids
        frames = rng.normal(size=(2, model.num_frames, model.num_mel_bins))
        target = rng.integers(1, model.vocabulary_size, (2, 5)).astype("int32")
        return {
            "encoder_features": frames.astype("float32"),
            "decoder_token_ids": target,
        }
    if isinstance(model, kt.models.Seq2SeqLM):  # Seq2Seq, T5
        source = rng.integers(1, model.vocabulary_size, (2, 9)).astype("int32")
        source[1, 6:] = 0
        target = rng.integers(1, model.vocabulary_size, (2, 5)).astype("int32")
        return {"encoder_token_ids": source, "decoder_token_ids": target}
    if isinstance(model, kt.models.BERTClassifier | kt.models.BERTMaskedLM):
        backbone = model.backbone
        ids = rng.integers(1, backbone.vocabulary_size, (2, 10)).astype("int32")
        mask = np.ones_like(ids, dtype=bool)
        mask[1, 7:] = False
        inputs = {
            "token_ids": np.where(mask, ids, 0),
            "segment_ids": np.zeros_like(ids),
            "padding_mask": mask,
        }
        if isinstance(model, kt.models.BERTMaskedLM):
            inputs["mask_positions"] = np.array([[1, 4], [2, 5]], "int32")
        return inputs
    ids = rng.integers(1, model.vocabulary_size, (2, 10)).astype("int32")
    return ids


def outputs(model, inputs):
    """The model's float outputs, without the padding logit (-1e9)."""
    result = model(inputs)
    result = result if isinstance(result, dict) else {"logits": result}
    values = {k: np.asarray(v, "float32") for k, v in result.items()}
    return {k: v[..., 1:] if v.min() <= -1e8 else v for k, v in values.items()}


def numpy_int8(weights, axis, epsilon=1e-7):
    """Abs-max int8 rounding in numpy, float32 as the layers compute it:
    `scale = 127 / (max |w| over axis + epsilon)`, `values = round(w *
    scale)` (half to even) in [-127, 127]; the weight is `values / scale`."""
    weights = np.asarray(weights, "float32")
    largest = np.max(np.abs(weights), axis=axis, keepdims=True)
    scale = np.float32(127.0) / (largest + np.float32(epsilon))
    return np.clip(np.round(weights * scale), -127, 127).astype("int8"), scale


def numpy_blocks(matrix, block_size):
    """`numpy_int8` of an `(in, out)` matrix over blocks of `block_size`
    rows in each column (the last one shorter), no epsilon: values
    `(in, out)`, scales `(out, blocks)`."""
    rows, columns = matrix.shape
    blocks = -(-rows // block_size)
    padded = np.zeros((blocks * block_size, columns), "float32")
    padded[:rows] = matrix
    values, scale = numpy_int8(padded.reshape(blocks, block_size, columns), 1, 0.0)
    return values.reshape(-1, columns)[:rows], scale[:, 0].T


def numpy_quantized(layer, float_layer):
    """What `layer` (int8) should hold: `(values, scale)` in its variables'
    shapes, rounded in numpy from `float_layer`'s weights over the
    documented axis: a row of an embedding table (a tied head's output
    column), a block of rows of a projection's column, else a column."""
    if isinstance(layer, keras.layers.Embedding):
        values, scale = numpy_int8(float_layer.embeddings, axis=-1)
        return values, scale.reshape(-1)
    kernel = np.asarray(float_layer.kernel, "float32")
    rows = layer.matrix_shape()[0] if hasattr(layer, "matrix_shape") else None
    matrix = kernel.reshape(rows or kernel.shape[0], -1)
    if getattr(layer, "int8_block_size", None):
        values, scale = numpy_blocks(matrix, layer.int8_block_size)
    else:
        values, scale = numpy_int8(matrix, axis=0)
    return values.reshape(kernel.shape), scale.reshape(layer.kernel_scale.shape)


def quantized_pairs(quantized, model):
    return zip(
        [la for la in quantized._flatten_layers() if isinstance(la, QUANTIZED)],
        [la for la in model._flatten_layers() if isinstance(la, QUANTIZED)],
        strict=True,
    )


def dequantize_into(quantized, model):
    """Sets `model`'s projections and embeddings (a float copy of
    `quantized` before quantizing) to the weights that numpy's int8
    rounding of them stands for, over `quantized`'s axes and blocks (its
    own int8 values are not read)."""
    for source, target in quantized_pairs(quantized, model):
        values, scale = numpy_quantized(source, target)
        values = values.astype("float32")
        if isinstance(source, keras.layers.Embedding):
            target.embeddings.assign(values / scale[:, None])
            continue
        rows = source.matrix_shape()[0] if hasattr(source, "matrix_shape") else None
        matrix = values.reshape(rows or values.shape[0], -1)
        if getattr(source, "int8_block_size", None):  # scale (columns, blocks)
            scale = np.repeat(scale, source.int8_block_size, axis=1)
            weights = matrix / scale[:, : matrix.shape[0]].T
        else:
            weights = matrix / scale.reshape(1, -1)
        target.kernel.assign(weights.reshape(values.shape))


# The largest |quantized - float| output over the largest |float| output:
# measured 0.29% (BERT classifier), 0.68% (masked LM), 0.95% (GPT-2), 4.0%
# (Llama), 2.7% (Mistral), 7.2% (Qwen2, tied head), 4.8% (Marian), 2.3%
# (ViT), 1.7% (T5), 7.3% (FLAN-T5), 8.6% (Whisper, random log-mel frames);
# bounds 1.25x those.
# The error is int8's on each fixture's random, perturbed weights: the
# outputs equal those of the dequantized float weights (checked first).
MEASURED = {
    "bert_tiny_classifier": 0.005, "bert_tiny_mlm": 0.01, "gpt2_tiny": 0.015,
    "llama_tiny": 0.05, "mistral_tiny": 0.035, "qwen2_tiny": 0.09, "marian_tiny": 0.06,
    "vit_tiny": 0.03, "t5_tiny": 0.022, "flan_t5_tiny": 0.092,
    "whisper_tiny_random": 0.108,
}  # fmt: skip


INT8_CASES = [(name, 128) for name in sorted(MEASURED)] + [("llama_tiny", 8)]


@pytest.mark.parametrize("name, block_size", INT8_CASES)
def test_int8_values_and_scales_are_numpy_rounding(name, block_size):
    """Every quantized layer's int8 values and scales equal numpy's rounding
    of the float weights over the documented axis: projections (ours and
    Keras' heads) per output column, or per block of 8 rows; embedding
    tables, tied output heads included, per row. So each weight is within
    half a step, `max |w| / 254` of its column, block or row."""
    model = kt.models.from_pretrained(os.path.join(HF, name))
    quantized = kt.models.from_pretrained(os.path.join(HF, name))
    quantized.set_weights(model.get_weights())  # (an MLM's unused pooler)
    quantized.quantize("int8", block_size=block_size)
    kinds = set()
    for layer, float_layer in quantized_pairs(quantized, model):
        values, scale = numpy_quantized(layer, float_layer)
        if isinstance(layer, keras.layers.Embedding):
            got = layer.embeddings, layer.embeddings_scale
        else:
            got = layer.kernel, layer.kernel_scale
        assert got[0].dtype == "int8"
        np.testing.assert_array_equal(np.asarray(got[0]), values, err_msg=layer.path)
        np.testing.assert_allclose(np.asarray(got[1]), scale, rtol=1e-6)
        kinds.add(type(layer).__name__)
        if getattr(layer, "int8_block_size", None):
            kinds.add("blocks")
    assert {"Projection", "Dense"} <= kinds, kinds
    assert name == "vit_tiny" or kinds & {"Embedding", "TiedEmbedding"}, kinds
    if block_size == 8:
        assert "blocks" in kinds


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_quantized_outputs_are_the_dequantized_weights_outputs(name):
    model = kt.models.from_pretrained(os.path.join(HF, name))
    inputs = example_inputs(model)
    expected = outputs(model, inputs)
    model.quantize("int8")
    layers = [la for la in model._flatten_layers() if isinstance(la, QUANTIZED)]
    assert layers and all(la.quantization_mode == "int8" for la in layers)
    assert model.quantized_mode == "int8"
    got = outputs(model, inputs)
    # Exactly the float model with the dequantized weights: the scales are
    # applied everywhere (before, the raw int8 kernels were read).
    reference = kt.models.from_pretrained(os.path.join(HF, name))
    dequantize_into(model, reference)
    dequantized = outputs(reference, inputs)
    for key, value in expected.items():
        scale = np.abs(value).max()
        np.testing.assert_allclose(got[key], dequantized[key], atol=2e-5 * scale)
        error = np.abs(got[key] - value).max()
        assert 0 < error <= MEASURED[name] * scale, (key, error / scale)


def test_int8_blocks_are_exact_reload_and_decode(tmp_path):
    """int8 with blocks of 8 rows: the fixture's 15 projections (7 a
    layer and the output head) have 32 to 64 rows, 4 to 8 blocks of 8.
    Outputs are those of the weights each block's scale gives; the `.keras`
    file rebuilds the blocks and reloads the same outputs; cached decoding
    equals uncached."""
    model = kt.models.from_pretrained(os.path.join(HF, "llama_tiny"))
    inputs = example_inputs(model)
    # A BlockConfig's size is used in place of `block_size`.
    model.quantize(config=kt.layers.quantization.BlockConfig(8))
    blocked = [
        la for la in model._flatten_layers() if getattr(la, "int8_block_size", 0)
    ]
    assert len(blocked) == 15 and all(la.int8_block_size == 8 for la in blocked)
    got = outputs(model, inputs)["logits"]
    reference = kt.models.from_pretrained(os.path.join(HF, "llama_tiny"))
    dequantize_into(model, reference)
    expected = outputs(reference, inputs)["logits"]
    np.testing.assert_allclose(got, expected, atol=2e-5 * np.abs(expected).max())
    path = tmp_path / "blocks.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config()["quantization_block_size"] == 8
    np.testing.assert_array_equal(outputs(loaded, inputs)["logits"], got)
    ids = inputs[:1, :4]
    cached = kt.generation.generate(loaded, ids, 5)
    uncached = kt.generation.generate(loaded, ids, 5, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)


def test_quantized_keras_file_and_export_serve_the_same_tokens(tmp_path):
    # Blocks of 8 rows: 2 per column of the 16-wide projections, 8 of the
    # feed-forward output's 64 (a scale per column: the other tests here).
    task = kt.tasks.from_pretrained(os.path.join(HF, "gpt2_tiny"))
    task.quantize("int8", block_size=8)
    prompts = ["the cat", "a dog ran"]
    expected = task.generate(prompts, max_new_tokens=6)
    ids = task.tokenizer.tokenize(["the cat"]).to_list()
    cached = kt.generation.generate(task.model, np.array(ids), 6)
    uncached = kt.generation.generate(task.model, np.array(ids), 6, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)

    path = task.save(tmp_path / "quantized.keras")
    loaded = kt.tasks.load(path)
    assert loaded.model.quantized_mode == "int8"
    inputs = example_inputs(task.model)
    np.testing.assert_array_equal(
        np.asarray(loaded.model(inputs)), np.asarray(task.model(inputs))
    )
    assert loaded.generate(prompts, max_new_tokens=6) == expected
    # int8 weights reloaded: about a quarter of the float bytes (the tiny
    # model's position table and norms stay float).
    float_model = kt.models.from_pretrained(os.path.join(HF, "gpt2_tiny"))
    size = sum(np.asarray(w).nbytes for w in loaded.model.weights)
    assert size < 0.5 * sum(np.asarray(w).nbytes for w in float_model.weights)

    served = task.export(tmp_path / "served", max_new_tokens=6)
    request = {
        "prompts": np.array(prompts, dtype=object),
        "max_new_tokens": np.int32(6),
        "temperature": np.float32(0.0),
    }
    _, (out,) = run_export_test(served, [("generate", request)], tmp_path)
    assert [t.decode() for t in out["generated_text"]] == expected


def test_quantized_head_reloads_with_its_backbone(tmp_path):
    model = kt.models.from_pretrained(os.path.join(HF, "bert_tiny_classifier"))
    model.quantize("int8")
    assert model.backbone.quantized_mode == "int8"
    path = tmp_path / "classifier.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    inputs = example_inputs(model)
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), np.asarray(model(inputs)))


def test_a_backbone_quantized_first_keeps_its_blocks():
    """The backbone quantized with blocks of 8 rows (2 per column here),
    then its head with the default: the backbone's config keeps 8, so a
    file rebuilds the scales it holds (with 128 it rebuilt one scale per
    column, and loading failed on the shapes)."""
    model = kt.models.from_pretrained(os.path.join(HF, "bert_tiny_classifier"))
    model.backbone.quantize("int8", block_size=8)
    model.quantize("int8")
    assert model.backbone.get_config()["quantization_block_size"] == 8
    rebuilt = type(model).from_config(model.get_config())
    shapes = [tuple(v.shape) for v in model.variables if "kernel_scale" in v.path]
    assert (16, 2) in shapes
    assert [
        tuple(v.shape) for v in rebuilt.variables if "kernel_scale" in v.path
    ] == shapes


def test_unsupported_quantization_is_refused(tmp_path):
    model = kt.models.gpt2(
        20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=8,
    )  # fmt: skip
    before = [np.asarray(w) for w in model.weights]
    for mode in ["int4", "float8"]:
        with pytest.raises(ValueError, match=f"mode={mode!r}"):
            model.quantize(mode)
    with pytest.raises(ValueError, match="filters"):
        model.quantize("int8", filters="query")
    for block_size in [0, -4, 8.0, "128"]:
        with pytest.raises(ValueError, match=f"block_size={block_size!r}"):
            model.quantize("int8", block_size=block_size)
    assert all(
        np.array_equal(np.asarray(w), b)
        for w, b in zip(model.weights, before, strict=True)
    )  # nothing half-done
    model.quantize("int8")
    with pytest.raises(ValueError, match="already quantized"):
        model.quantize("int8")
    with pytest.raises(ValueError, match="quantized_mode='int8'"):
        kt.models.save_pretrained(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _tiny_gpt2():
    keras.utils.set_random_seed(0)
    return kt.models.gpt2(
        64, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0
    )


def _adapt(model):
    """LoRA on, with large adapter weights (so that it changes the tokens)."""
    model.enable_lora(2, targets=("query", "value"))
    rng = np.random.default_rng(1)
    for variable in model.trainable_variables:
        variable.assign(3 * rng.normal(size=variable.shape).astype("float32"))


def _quantize(model):
    """int8, with the scales moved (so that it changes the tokens)."""
    model.quantize("int8")
    for layer in model._flatten_layers():
        for name in ("kernel_scale", "embeddings_scale"):
            if hasattr(layer, name):
                getattr(layer, name).assign(getattr(layer, name) * 0.2)


@pytest.mark.parametrize("change", [_adapt, _quantize])
def test_generate_after_lora_or_quantize_uses_the_new_weights(change):
    """`generate` keeps compiled functions per model. `enable_lora` and
    `quantize` add or replace variables, and a function compiled before them
    kept reading the old ones: the adapter or the int8 weights were ignored."""
    ids = np.array([[5, 6, 7, 8]], "int32")
    model = _tiny_gpt2()
    before = kt.generation.generate(model, ids, 8)
    streamed_before = list(ChunkedDecoding(model, ids, 8, chunk_size=4))[-1]
    change(model)
    fresh = _tiny_gpt2()
    change(fresh)
    expected = kt.generation.generate(fresh, ids, 8)
    assert not np.array_equal(expected, before)  # the change shows
    np.testing.assert_array_equal(kt.generation.generate(model, ids, 8), expected)
    streamed = list(ChunkedDecoding(model, ids, 8, chunk_size=4))[-1]
    np.testing.assert_array_equal(streamed_before, before)
    np.testing.assert_array_equal(streamed, expected)
