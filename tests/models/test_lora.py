"""LoRA on every model class: identical outputs at initialization, the
trainable counts rank * (in + out) per adapted matrix, fine-tuning that
lowers the loss with the base frozen, adapter files, merging, bad input."""

import json
import os

import keras
import numpy as np
import pytest
from safetensors import safe_open

import keras_transformer as kt
from tests.helpers import reference_import, run_model_saving_test, spread_weights
from tests.models.test_quantize import example_inputs

TINY = dict(num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32)


def make(family):
    keras.utils.set_random_seed(0)
    if family == "gpt2":
        model = kt.models.gpt2(40, **TINY, max_sequence_length=16, dropout=0.0)
    elif family == "llama":
        model = kt.models.llama(40, **TINY, num_key_value_heads=1)
    elif family == "seq2seq":
        model = kt.models.seq2seq(40, **TINY, max_sequence_length=16, dropout=0.0)
    elif family == "t5":
        model = kt.models.t5(40, **TINY, key_dim=6, dropout=0.0)
    elif family == "whisper":
        model = kt.models.whisper(
            40, **TINY, num_mel_bins=4, max_source_positions=6, dropout=0.0
        )
    elif family == "bert_classifier":
        backbone = kt.models.bert(40, **TINY, max_sequence_length=16, dropout=0.0)
        model = kt.models.bert_classifier(backbone, num_classes=3, dropout=0.0)
    else:
        model = kt.models.vit(image_size=8, patch_size=4, num_classes=3, **TINY)
    return spread_weights(model, layer_norms=False)


def matrix_sizes(layer):
    """`(in, out)` of a projection's kernel as a matrix."""
    inputs, weights = layer.equation.split("->")[0].split(",")
    if isinstance(layer, keras.layers.Dense):
        return tuple(layer.kernel.shape)
    shape = tuple(layer.kernel.shape)
    contracted = sum(1 for axis in weights if axis in inputs)
    rows = int(np.prod(shape[:contracted]))
    return rows, int(np.prod(shape)) // rows


FAMILIES = ["gpt2", "llama", "seq2seq", "t5", "whisper", "bert_classifier", "vit"]


@pytest.mark.parametrize("family", FAMILIES)
def test_enable_lora_keeps_outputs_and_trains_only_the_updates(family):
    model = make(family)
    inputs = example_inputs(model)
    before = keras.tree.map_structure(np.asarray, model(inputs))
    targets = ("query", "value", "attention_output")
    model.enable_lora(2, targets=targets, alpha=4)
    after = keras.tree.map_structure(np.asarray, model(inputs))
    keras.tree.map_structure(np.testing.assert_array_equal, after, before)
    adapted = [
        la
        for la in model._flatten_layers()
        if isinstance(la, keras.layers.EinsumDense | keras.layers.Dense)
        and la.name in targets
    ]
    assert len(adapted) >= 2 * len(targets)  # two blocks (and cross-attention)
    assert len(model.lora_layers()) == len(adapted)  # each named by its path
    expected = sum(2 * sum(matrix_sizes(la)) for la in adapted)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert trainable == expected
    assert all("lora_kernel" in v.path for v in model.trainable_variables)
    assert model.lora_rank == 2


def test_query_update_is_one_matrix_product():
    """A query kernel (E, H, D) is adapted as the (E, H*D) matrix."""
    model = make("gpt2")
    model.enable_lora(4)
    query = next(la for la in model._flatten_layers() if la.name == "query")
    assert tuple(query.lora_kernel_a.shape) == (16, 4)
    assert tuple(query.lora_kernel_b.shape) == (4, 16)
    b = np.random.default_rng(0).normal(size=(4, 16)).astype("float32")
    query.lora_kernel_b.assign(b)
    update = np.asarray(query.lora_kernel_a) @ b  # alpha = rank: scale 1
    np.testing.assert_allclose(
        np.asarray(query.kernel),
        np.asarray(query._kernel) + update.reshape(16, 2, 8),
        rtol=1e-6,
        atol=1e-6,
    )


ATTENTION = ("query", "key", "value", "attention_output")
FEEDFORWARD = ("feedforward_intermediate_dense", "feedforward_output_dense")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_random_update_is_the_kernel_plus_scaled_a_times_b(family, tmp_path):
    """Random A and B on every projection (Seq2Seq's cross-attention
    included): the outputs of a float copy whose kernels are
    `W + alpha / rank * A @ B`, computed in numpy on the kernel as an
    (in, out) matrix; `merge_lora()` and a `.keras` round trip keep them."""
    model, copy = make(family), make(family)
    inputs = example_inputs(model)
    base = keras.tree.map_structure(np.asarray, model(inputs))
    ffn = ("gate", "up", "down") if family == "llama" else FEEDFORWARD
    model.enable_lora(2, targets=ATTENTION + ffn, alpha=3)
    layers = model.lora_layers()
    if family == "seq2seq":  # the decoder's cross-attention is adapted too
        assert len(layers) == 2 * len(ATTENTION + ffn) * 2 + 2 * len(ATTENTION)
    rng = np.random.default_rng(1)
    plain = {
        layer.path.removeprefix(copy.name + "/"): layer
        for layer in copy.projection_layers()
    }
    for path, layer in layers.items():
        a = rng.normal(size=layer.lora_kernel_a.shape).astype("float32") * 0.3
        b = rng.normal(size=layer.lora_kernel_b.shape).astype("float32") * 0.3
        layer.lora_kernel_a.assign(a)
        layer.lora_kernel_b.assign(b)
        kernel = np.asarray(plain[path].kernel)
        plain[path].kernel.assign(kernel + 3 / 2 * (a @ b).reshape(kernel.shape))
    expected = keras.tree.map_structure(np.asarray, copy(inputs))
    outputs = keras.tree.map_structure(np.asarray, model(inputs))
    keras.tree.map_structure(
        lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5),
        outputs,
        expected,
    )
    change = keras.tree.map_structure(lambda x, y: np.abs(x - y).max(), outputs, base)
    assert min(keras.tree.flatten(change)) > 0.1  # the update counts
    model.merge_lora()
    merged = keras.tree.map_structure(np.asarray, model(inputs))
    keras.tree.map_structure(
        lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5),
        merged,
        expected,
    )
    run_model_saving_test(model, inputs, tmp_path)


def cycle_batches(vocabulary=40, length=9, count=64):
    start = np.random.default_rng(0).integers(0, vocabulary - 1, count)
    tokens = (start[:, None] + np.arange(length)) % (vocabulary - 1) + 1
    return tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32")


def test_fine_tuning_lowers_the_loss_and_keeps_the_base(tmp_path):
    model = make("gpt2")
    base = [np.asarray(v) for v in model.variables]
    model.enable_lora(4, targets=("query", "value", "feedforward_output_dense"))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-2),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    x, y = cycle_batches()
    history = model.fit(x, y, batch_size=16, epochs=8, verbose=0).history["loss"]
    assert history[-1] < 0.8 * history[0], history
    originals = [v for v in model.variables if "lora_kernel" not in v.path]
    for variable, value in zip(originals, base, strict=True):
        np.testing.assert_array_equal(np.asarray(variable), value)

    # The adapter alone: kilobytes, and it reproduces the fine-tuned model.
    logits = np.asarray(model(x[:2]))
    path = model.save_lora(tmp_path / "adapter.safetensors")
    with safe_open(path, framework="numpy") as file:
        names = sorted(file.keys())
    assert names == sorted(
        v.path.removeprefix(model.name + "/")
        for v in model.variables
        if "lora_kernel" in v.path
    )  # the adapter alone, named by path in the model
    assert os.path.getsize(path) < sum(v.nbytes for v in base) / 2
    fresh = make("gpt2")
    fresh.load_lora(path)
    assert fresh.lora_rank == 4
    np.testing.assert_array_equal(np.asarray(fresh(x[:2])), logits)

    # Merged: the same numbers, a plain model again, which quantizes.
    fresh.merge_lora()
    assert fresh.lora_rank is None
    assert not [v for v in fresh.variables if "lora_kernel" in v.path]
    assert len(fresh.trainable_variables) == len(base)
    np.testing.assert_allclose(np.asarray(fresh(x[:2])), logits, rtol=1e-5, atol=1e-5)
    # A .keras file of a LoRA model holds the merged weights.
    saved = model.save(tmp_path / "tuned.keras") or tmp_path / "tuned.keras"
    reloaded = keras.saving.load_model(saved)
    assert reloaded.lora_rank is None
    np.testing.assert_allclose(
        np.asarray(reloaded(x[:2])), logits, rtol=1e-5, atol=1e-5
    )
    fresh.quantize("int8")


@pytest.mark.parametrize("block_size", [None, 8])
def test_lora_on_an_int8_base_trains_saves_and_merges(tmp_path, block_size):
    """QLoRA: the int8 base stays frozen and int8, the float updates train
    beside it (query, value: our fused products; the feed-forward output:
    our int8 Dense), and the adapter, `.keras` file and merge give the
    trained model's outputs (to int8 rounding once merged), with a scale
    per column or per block of 8 rows (2 or 4 blocks here)."""
    model = make("gpt2")
    model.quantize("int8", block_size=block_size)
    blocked = [
        la for la in model._flatten_layers() if getattr(la, "int8_block_size", 0)
    ]
    assert len(blocked) == (12 if block_size else 0)  # 6 a layer, 2 layers
    x, y = cycle_batches()
    before = np.asarray(model(x[:2]))
    base = {v.path: np.asarray(v) for v in model.variables}
    model.enable_lora(4, targets=("query", "value", "feedforward_output_dense"))
    np.testing.assert_array_equal(np.asarray(model(x[:2])), before)  # B = 0
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert trainable == 2 * (2 * 4 * (16 + 16) + 4 * (32 + 16))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-2),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    history = model.fit(x, y, batch_size=16, epochs=8, verbose=0).history["loss"]
    assert history[-1] < 0.8 * history[0], history
    for variable in model.variables:
        if variable.path in base:
            np.testing.assert_array_equal(np.asarray(variable), base[variable.path])
    kernels = [v for v in model.variables if v.path.endswith("query/kernel")]
    assert kernels and all(v.dtype == "int8" for v in kernels)
    # Every update trained, the attention's (fused products) included.
    updates = [v for v in model.trainable_variables if "lora_kernel_b" in v.path]
    assert len(updates) == 6 and all(np.any(np.asarray(v) != 0) for v in updates)
    logits = np.asarray(model(x[:2]))
    assert not np.allclose(logits, before)

    path = model.save_lora(tmp_path / "adapter.safetensors")
    fresh = make("gpt2")
    fresh.quantize("int8", block_size=block_size)
    fresh.load_lora(path)
    np.testing.assert_array_equal(np.asarray(fresh(x[:2])), logits)
    # Merging (and a .keras file, which holds merged weights) quantizes the
    # merged kernels again: int8 rounding apart, the same outputs.
    scale = np.max(np.abs(logits))
    saved = tmp_path / "tuned.keras"
    model.save(saved)
    reloaded = keras.saving.load_model(saved)
    assert reloaded.lora_rank is None and reloaded.quantized_mode == "int8"
    fresh.merge_lora()
    assert fresh.lora_rank is None
    change = np.max(np.abs(logits - before))
    for merged in (fresh, reloaded):
        error = np.max(np.abs(np.asarray(merged(x[:2])) - logits))
        assert error < 0.05 * scale and error < 0.2 * change
    np.testing.assert_array_equal(np.asarray(reloaded(x[:2])), np.asarray(fresh(x[:2])))


def test_bad_lora_input(tmp_path):
    model = make("gpt2")
    for rank in [0, -1, 2.0, True]:
        with pytest.raises(ValueError, match="rank"):
            model.enable_lora(rank)
    with pytest.raises(ValueError, match="'nope'"):
        model.enable_lora(2, targets=("query", "nope"))
    with pytest.raises(ValueError, match="alpha"):
        model.enable_lora(2, alpha=0)
    with pytest.raises(ValueError, match="save_lora"):
        model.save_lora(tmp_path / "a.safetensors")
    assert model.lora_rank is None and len(model.trainable_variables) > 10
    model.enable_lora(2)
    with pytest.raises(ValueError, match="already enabled"):
        model.enable_lora(2)
    with pytest.raises(ValueError, match="merge_lora"):
        model.quantize("int8")
    path = model.save_lora(tmp_path / "a.safetensors")
    assert os.listdir(tmp_path) == ["a.safetensors"]  # nothing half-written

    other = kt.models.gpt2(40, **{**TINY, "hidden_dim": 8}, max_sequence_length=16)
    with pytest.raises(ValueError, match="another base"):
        other.load_lora(path)
    assert other.lora_rank is None  # refused before any change
    wider = make("gpt2")
    wider.enable_lora(4)
    with pytest.raises(ValueError, match="do not fit"):
        wider.load_lora(path)
    with pytest.raises(FileNotFoundError, match="missing"):
        wider.load_lora(tmp_path / "missing.safetensors")

    fused = make("gpt2")
    fused.enable_lora(2)
    with pytest.raises(ValueError, match="merge_lora"):
        fused.quantize("int8")  # quantize the base first (QLoRA), or merge


HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")


@pytest.mark.parametrize("name", ["gpt2_tiny", "llama_tiny"])
def test_peft_adapters_give_peft_logits_and_round_trip(name, tmp_path):
    """Fixtures from make_peft_fixtures.py: peft's logits of base + adapter,
    the adapter reloaded from its folder."""
    model = kt.models.from_pretrained(os.path.join(HF, name))
    reference = np.load(os.path.join(HF, f"{name}_lora_logits.npz"))
    ids = reference["input_ids"] + 1  # our ids: theirs + 1
    base = np.asarray(model(ids))[..., 1:]
    model.load_lora(os.path.join(HF, f"{name}_lora"))
    logits = np.asarray(model(ids))[..., 1:]
    assert np.abs(base - reference["logits"]).max() > 0.05  # the adapter counts
    np.testing.assert_allclose(logits, reference["logits"], rtol=0, atol=1e-4)

    # Written back as a PEFT folder (GPT-2's q/k/v as one c_attn update):
    # read again, the same logits.
    folder = model.save_lora(tmp_path / "adapter", format="peft")
    assert sorted(os.listdir(folder)) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    again = kt.models.from_pretrained(os.path.join(HF, name))
    again.load_lora(folder)
    np.testing.assert_allclose(np.asarray(again(ids))[..., 1:], logits, atol=1e-5)
    peft = reference_import("peft")
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(HF, name))
    theirs = peft.PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        written = theirs(input_ids=torch.tensor(reference["input_ids"])).logits
    np.testing.assert_allclose(written.numpy(), reference["logits"], atol=1e-4)


def test_our_gpt2_adapter_written_for_peft_reads_back_exactly(tmp_path):
    """Separate query and value updates (not one c_attn update) and an MLP
    one: written as a block c_attn update of rank 2r with rank_pattern."""
    model = kt.models.from_pretrained(os.path.join(HF, "gpt2_tiny"))
    model.enable_lora(
        2, targets=("query", "value", "feedforward_output_dense"), alpha=3
    )
    rng = np.random.default_rng(1)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype("float32") * 0.3)
    ids = np.array([[5, 9, 40, 3, 7]])
    expected = np.asarray(model(ids))
    folder = model.save_lora(tmp_path / "adapter", format="peft")
    config = json.load(open(os.path.join(folder, "adapter_config.json")))
    assert config["target_modules"] == ["attn.c_attn", "mlp.c_proj"]
    assert config["rank_pattern"] == {"attn.c_attn": 4} and config["r"] == 2
    again = kt.models.from_pretrained(os.path.join(HF, "gpt2_tiny"))
    again.load_lora(folder)
    np.testing.assert_allclose(np.asarray(again(ids)), expected, rtol=1e-5, atol=1e-4)
    peft = reference_import("peft")
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    base = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(HF, "gpt2_tiny")
    )
    theirs = peft.PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        logits = theirs(input_ids=torch.tensor(ids - 1)).logits.numpy()
    np.testing.assert_allclose(expected[..., 1:], logits, rtol=0, atol=1e-4)


def test_bad_peft_adapters(tmp_path):
    import shutil

    folder = tmp_path / "adapter"
    shutil.copytree(os.path.join(HF, "gpt2_tiny_lora"), folder)
    config = json.load(open(folder / "adapter_config.json"))
    json.dump({**config, "use_dora": True}, open(folder / "adapter_config.json", "w"))
    model = kt.models.from_pretrained(os.path.join(HF, "gpt2_tiny"))
    with pytest.raises(ValueError, match="use_dora"):
        model.load_lora(folder)
    json.dump(config, open(folder / "adapter_config.json", "w"))
    llama = kt.models.from_pretrained(os.path.join(HF, "llama_tiny"))
    with pytest.raises(ValueError, match="transformer.h.0.attn.c_attn.lora_A"):
        llama.load_lora(folder)  # another family's adapter
    assert model.lora_rank is None and llama.lora_rank is None
    os.remove(folder / "adapter_model.safetensors")
    with pytest.raises(FileNotFoundError, match="adapter_model.safetensors"):
        model.load_lora(folder)
    bert = make("bert_classifier")
    bert.enable_lora(2)
    with pytest.raises(ValueError, match="GPT2 and Llama"):
        bert.save_lora(tmp_path / "bert", format="peft")
    with pytest.raises(ValueError, match="format"):
        bert.save_lora(tmp_path / "bert", format="hf")


def test_peft_adapter_into_lora_already_enabled_with_another_alpha():
    model = kt.models.from_pretrained(os.path.join(HF, "gpt2_tiny"))
    targets = ("query", "key", "value", "attention_output")
    model.enable_lora(4, targets=(*targets, "feedforward_intermediate_dense"), alpha=8)
    model.load_lora(os.path.join(HF, "gpt2_tiny_lora"))
    reference = np.load(os.path.join(HF, "gpt2_tiny_lora_logits.npz"))
    logits = np.asarray(model(reference["input_ids"] + 1))[..., 1:]
    np.testing.assert_allclose(logits, reference["logits"], rtol=0, atol=1e-4)
