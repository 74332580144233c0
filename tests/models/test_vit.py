import time

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.models.initializers import placeholder_weights
from tests.helpers import run_layer_test, run_model_saving_test, to_numpy


def tiny_vit(**overrides):
    args = dict(num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32)
    return kt.models.vit(8, 2, 5, **{**args, **overrides})


def images(batch=3, size=8, channels=3, seed=0):
    return np.random.default_rng(seed).random((batch, size, size, channels), "float32")


def expected_parameters(config):
    """ViT's parameter count from its architecture, not from PRESETS."""
    e, f = config["hidden_dim"], config["intermediate_dim"]
    p, c = config["patch_size"], config.get("num_channels", 3)
    patches = (config["image_size"] // p) ** 2
    embeddings = p * p * c * e + e + e + (patches + 1) * e  # conv, class, positions
    block = 4 * (e * e + e) + e * f + f + f * e + e + 2 * (2 * e)  # + 2 LayerNorms
    head = 2 * e + e * config["num_classes"] + config["num_classes"]  # LN, Dense
    return embeddings + config["num_layers"] * block + head


@pytest.mark.parametrize(
    "name",
    [
        "vit_tiny",
        pytest.param("vit_base", marks=pytest.mark.slow),
        pytest.param("vit_large", marks=pytest.mark.slow),
    ],
)
def test_preset_parameter_counts(name):
    preset = kt.models.PRESETS[name]
    assert preset["parameters"] == expected_parameters(preset["config"])
    with placeholder_weights():  # zeros: drawing 304M random numbers is slow
        model = kt.models.vit(name)
    assert isinstance(model, kt.models.ViT)
    assert model.count_params() == preset["parameters"]
    published = {"vit_base": 86_567_656, "vit_large": 304_326_632}
    assert preset["parameters"] == published.get(name, preset["parameters"])


def test_from_preset_overrides_exactly_the_named_values():
    model = kt.models.vit("vit_tiny", num_classes=3, num_channels=1)
    config = {**kt.models.PRESETS["vit_tiny"]["config"], "num_classes": 3}
    for key, value in config.items():
        assert model.get_config()[key] == value, key
    assert model.num_channels == 1 and model.dropout == 0.0
    assert model.output_shape == (None, 3)
    assert kt.models.ViT.presets() == ["vit_base", "vit_large", "vit_tiny"]


def test_layers_are_attributes_and_the_blocks_pre_ln_gelu():
    model = tiny_vit()
    assert isinstance(model.patch_embedding, kt.layers.PatchEmbedding)
    assert len(model.blocks) == 2
    for block in model.blocks:
        assert block.normalize_first and block.layer_norm_epsilon == 1e-12
        assert block.activation is keras.activations.gelu
    assert model.final_layer_norm.epsilon == 1e-12
    assert model.classifier.units == 5
    # A checkpoint's own epsilon reaches every LayerNorm and the config.
    model = tiny_vit(layer_norm_epsilon=1e-6)
    for block in model.blocks:
        assert block.layer_norm_epsilon == 1e-6
        assert block.self_attention_layer_norm.epsilon == 1e-6
        assert block.feedforward_layer_norm.epsilon == 1e-6
    assert model.final_layer_norm.epsilon == 1e-6
    assert model.get_config()["layer_norm_epsilon"] == 1e-6
    again = kt.models.ViT.from_config(model.get_config())
    assert again.final_layer_norm.epsilon == 1e-6
    assert again.blocks[1].feedforward_layer_norm.epsilon == 1e-6


def test_a_permuted_batch_gives_permuted_logits():
    model = tiny_vit()
    x = images(batch=4)
    order = np.array([2, 0, 3, 1])
    logits = to_numpy(model(x))
    assert logits.shape == (4, 5)
    np.testing.assert_allclose(to_numpy(model(x[order])), logits[order], atol=1e-6)
    # Each image's logits depend on that image only: they are not all alike.
    assert np.abs(logits[0] - logits[1]).max() > 1e-4


def test_from_scratch_kernels_are_glorot_uniform_and_embeddings_normal():
    """Glorot-uniform kernels learn the digits better than N(0, 0.02²) at
    small widths (benchmarks/vit_init.py); a checkpoint overwrites them."""
    keras.utils.set_random_seed(0)
    model = tiny_vit(hidden_dim=64, intermediate_dim=128, num_heads=4)
    kernels = [v for v in model.weights if v.path.endswith("kernel")]
    assert len(kernels) == 1 + 2 * 6 + 1  # projection, 6 per block, classifier
    fans = {  # (fan in, fan out) as Keras counts them for each layer kind
        "projection": (2 * 2 * 3, 2 * 2 * 64),  # Conv2D: times the window
        "query": (64, 64), "key": (64, 64), "value": (64, 64),  # EinsumDense
        "attention_output": (64, 64),
        "feedforward_intermediate_dense": (64, 128),
        "feedforward_output_dense": (128, 64),
        "classifier": (64, 5),
    }  # fmt: skip
    for kernel in kernels:
        value = to_numpy(kernel)
        limit = np.sqrt(6 / sum(fans[kernel.path.split("/")[-2]]))
        assert np.abs(value).max() <= limit, kernel.path
        np.testing.assert_allclose(value.std(), limit / np.sqrt(3), rtol=0.1)
    embedding = model.patch_embedding
    for table in (embedding.class_embedding, embedding.position_embeddings):
        value = to_numpy(table)
        assert np.abs(value).max() <= 0.1  # N(0, 0.05²) truncated at 2σ
        np.testing.assert_allclose(value.std(), 0.044, rtol=0.2)
    with placeholder_weights():  # from_pretrained assigns every weight
        zeros = tiny_vit()
    assert all(not to_numpy(v).any() for v in zeros.weights if "kernel" in v.path)


def test_saving_round_trip_gives_identical_logits(tmp_path):
    model = tiny_vit(dropout=0.1)
    restored = run_model_saving_test(model, images(), tmp_path)
    assert type(restored) is kt.models.ViT
    assert restored.get_config() == model.get_config()


def test_patch_embedding_matches_a_numpy_reference():
    b, size, c, p, e = 2, 6, 3, 3, 4
    layer = kt.layers.PatchEmbedding(
        p, e, image_size=size, embeddings_initializer="random_normal"
    )
    x = images(batch=b, size=size, channels=c)
    output = run_layer_test(layer, x, expected_output_shape=(b, 5, e))
    kernel, bias = to_numpy(layer.projection.kernel), to_numpy(layer.projection.bias)
    assert kernel.shape == (p, p, c, e) and bias.shape == (e,)
    bias = np.random.default_rng(1).normal(size=e).astype("float32")
    layer.projection.bias.assign(bias)
    # (B, H, W, C) -> (B, H/P, P, W/P, P, C) -> row-major patches (B, N, P*P*C)
    n = size // p
    patches = x.reshape(b, n, p, n, p, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, n * n, p * p * c)
    projected = patches @ kernel.reshape(p * p * c, e) + bias  # (B, N, E)
    token = np.broadcast_to(to_numpy(layer.class_embedding), (b, 1, e))
    positions = to_numpy(layer.position_embeddings)
    expected = np.concatenate([token, projected], axis=1) + positions
    np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(output, to_numpy(layer(x)))  # the new bias counts


def test_patch_embedding_without_class_token():
    layer = kt.layers.PatchEmbedding(2, 8, image_size=4, class_token=False)
    x = images(batch=2, size=4)
    output = run_layer_test(layer, x, expected_output_shape=(2, 4, 8))
    assert layer.position_embeddings.shape == (4, 8)
    first_patch = x[:, :2, :2, :].reshape(2, 12) @ to_numpy(
        layer.projection.kernel
    ).reshape(12, 8)
    np.testing.assert_allclose(
        output[:, 0], first_patch + to_numpy(layer.position_embeddings)[0], atol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(patch_size=3, hidden_dim=8, image_size=8), "image_size=8, patch_size=3"),
        (dict(patch_size=0, hidden_dim=8, image_size=8), "patch_size=0"),
        (dict(patch_size=2, hidden_dim=-1, image_size=8), "hidden_dim=-1"),
        (dict(patch_size=2, hidden_dim=8, image_size=0), "image_size=0"),
        (dict(patch_size=2, hidden_dim=8, image_size=8, dropout=1.0), "dropout=1.0"),
        (dict(patch_size=2, hidden_dim=8, image_size=8, class_token=1), "class_tok"),
    ],
)
def test_patch_embedding_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kt.layers.PatchEmbedding(**kwargs)


def test_patch_embedding_refuses_bad_images():
    layer = kt.layers.PatchEmbedding(2, 8, image_size=4)
    layer(images(size=4, channels=3))
    with pytest.raises(ValueError, match=r"channels=3. Received: .*\(3, 4, 4, 1\)"):
        layer(images(size=4, channels=1))
    with pytest.raises(ValueError, match=r"\(batch, 4, 4, channels\).*\(3, 6, 6, 3\)"):
        layer(images(size=6, channels=3))
    with pytest.raises(ValueError, match="rank 4"):
        layer(np.zeros((3, 4, 4), "float32"))


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(image_size=9), "image_size=9, patch_size=2"),
        (dict(patch_size=0), "patch_size=0"),
        (dict(num_classes=0), "num_classes=0"),
        (dict(num_channels=None), "num_channels=None"),
        (dict(num_layers=None), "num_layers=None"),
        (dict(hidden_dim=15), "hidden_dim=15, num_heads=2"),
        (dict(dropout=-0.1), "dropout=-0.1"),
        (dict(layer_norm_epsilon=-1e-6), "layer_norm_epsilon=-1e-06"),
    ],
)
def test_vit_refuses_bad_sizes(overrides, match):
    args = dict(image_size=8, patch_size=2, num_classes=5, num_layers=1,
                num_heads=2, hidden_dim=16, intermediate_dim=32)  # fmt: skip
    with pytest.raises(ValueError, match=match):
        kt.models.ViT(**{**args, **overrides})


def test_vit_refuses_images_it_was_not_built_for():
    model = tiny_vit(num_channels=1)
    with pytest.raises(ValueError, match=r"channels=1. Received: .*\(3, 8, 8, 3\)"):
        model(images(channels=3))
    # Keras checks the functional input first; its message names `images`.
    with pytest.raises(ValueError, match=r"'images'.*\(None, 8, 8, 1\).*\(3, 4, 4"):
        model(images(size=4, channels=1))


@pytest.mark.slow
def test_vit_learns_the_digits():
    """scikit-learn's bundled 8×8 digits (no download): 1797 images, 360 held
    out; a 3-layer, 32-wide ViT on 2×2 patches, 30 epochs (0.978 measured;
    with its position embeddings zeroed and frozen, 0.717: a ViT that
    cannot tell patches apart fails the bound). Label smoothing, not
    augmentation, is what helps here: shifting 8×8 digits by a pixel hurt
    held-out accuracy."""
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]  # (1797, 8, 8, 1)
    y = digits.target.astype("int32")
    order = np.random.default_rng(0).permutation(len(x))
    test, train = order[:360], order[360:]
    keras.utils.set_random_seed(0)
    model = kt.models.vit(8, 2, 10, num_channels=1, num_layers=3, num_heads=4,
                          hidden_dim=32, intermediate_dim=64)  # fmt: skip
    epochs, steps = 30, int(np.ceil(len(train) / 64))
    model.compile(
        optimizer=keras.optimizers.AdamW(
            keras.optimizers.schedules.CosineDecay(
                0.0, epochs * steps, warmup_target=1e-3, warmup_steps=2 * steps
            ),
            weight_decay=0.05,
        ),
        loss=keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=0.1
        ),
    )
    start = time.perf_counter()
    model.fit(x[train], np.eye(10)[y[train]], batch_size=64, epochs=epochs, verbose=0)
    seconds = time.perf_counter() - start
    predictions = np.argmax(to_numpy(model.predict(x[test], verbose=0)), axis=-1)
    accuracy = np.mean(predictions == y[test])
    print(f"digits: held-out accuracy {accuracy:.4f} after {seconds:.0f} s of fit")
    assert accuracy >= 0.95
