"""export_image_classifier: served without keras_transformer, it gives the
model's own probabilities on the pixels it was trained on, converts channels
and sizes, and a row that does not decode never fails the others."""

import io
import struct

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import run_export_test, spread_weights

SIZE = 8  # the model's image_size
LABELS = ["cat", "dog", "bird"]
MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
LUMA = np.array([0.2989, 0.5870, 0.1140], "float32")
NOT_AN_IMAGE = b"could not decode image: not a PNG, JPEG, GIF, BMP or WebP file"


def make_vit(channels):
    keras.utils.set_random_seed(0)
    model = kt.models.vit(SIZE, 4, 3, num_channels=channels, num_layers=1,
                          num_heads=2, hidden_dim=16, intermediate_dim=32)  # fmt: skip
    return spread_weights(model, scale=1.0, layer_norms=False)


def pixels(count, height=SIZE, width=SIZE, channels=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, height, width, channels), dtype=np.uint8)


def png(image):
    return tf.io.encode_png(image).numpy()


def jpeg(image):
    return tf.io.encode_jpeg(image, quality=95).numpy()


def bmp(image):
    """A 24-bit BMP: bottom-up rows of BGR, each padded to 4 bytes."""
    height, width, _ = image.shape
    stride = (3 * width + 3) // 4 * 4
    data = np.zeros((height, stride), np.uint8)
    data[:, : 3 * width] = image[::-1, :, ::-1].reshape(height, 3 * width)
    header = struct.pack("<2sIHHI", b"BM", 54 + data.size, 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, data.size,
                       2835, 2835, 0, 0)  # fmt: skip
    return header + info + data.tobytes()


def expected(model, images, mean=MEAN, std=STD):
    """The model's probabilities `(B, 3)` on float pixels `(B, S, S, C)` in
    [0, 255], preprocessed as the export documents."""
    x = (np.asarray(images, "float32") / 255 - np.float32(mean)) / np.float32(std)
    return tf.nn.softmax(model(x), axis=-1).numpy()


GOOD = pixels(6)  # (6, 8, 8, 3)
CORRUPT = {  # row -> (bytes, error)
    1: (b"definitely not an image", NOT_AN_IMAGE),
    3: (b"", b"could not decode image: the input is empty"),
    4: (png(GOOD[0])[:60], b"could not decode image: corrupt or truncated PNG data"),
    6: (
        jpeg(GOOD[1])[:200],
        b"could not decode image: corrupt or truncated JPEG data",
    ),  # fmt: skip
    7: (
        b"GIF89a" + b"\0" * 10,
        b"could not decode image: corrupt or truncated GIF data",
    ),  # fmt: skip
}
GRAY = pixels(1, channels=1, seed=1)[0]  # (8, 8, 1)
RGBA = pixels(1, channels=4, seed=2)[0]
BIG = pixels(1, height=24, width=16, seed=3)[0]  # resized to 8 x 8


def mixed_batch():
    """The GOOD images in order, with the CORRUPT rows among them."""
    rows, good = [], iter(GOOD)
    for row in range(len(GOOD) + len(CORRUPT)):
        rows.append(CORRUPT[row][0] if row in CORRUPT else png(next(good)))
    return rows


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model = make_vit(3)
    folder = tmp_path_factory.mktemp("image_classifier")
    path = kt.export.export_image_classifier(
        model, folder / "vit", labels=LABELS, mean=MEAN, std=STD
    )
    requests = [
        ("classify", {"image_bytes": [png(image) for image in GOOD]}),
        ("classify", {"image_bytes": mixed_batch()}),
        ("serving_default", {"image_bytes": [png(GRAY), png(RGBA), png(BIG)]}),
        ("classify", {"image_bytes": [bmp(GOOD[2]), jpeg(GOOD[3])]}),
        ("classify", {"image_bytes": np.zeros([0], "S1")}),
    ]
    names, results = run_export_test(path, requests, folder)
    return model, path, names, results


def check(out, probabilities, atol=3e-6):  # 10x the 3e-7 measured
    np.testing.assert_allclose(out["probabilities"], probabilities, atol=atol)
    class_id = probabilities.argmax(-1)
    np.testing.assert_array_equal(out["class_id"], class_id)
    assert out["class_id"].dtype == np.int32
    assert out["label"].astype(str).tolist() == [LABELS[i] for i in class_id]
    assert out["error"].tolist() == [b""] * len(probabilities)


def test_signatures(served):
    assert served[2] == ["classify", "serving_default"]


def test_probabilities_are_the_keras_models_on_the_same_pixels(served):
    model, _, _, (out, *_) = served
    probabilities = expected(model, GOOD)
    check(out, probabilities)
    print("max abs diff", np.abs(out["probabilities"] - probabilities).max())
    assert out["probabilities"].dtype == np.float32
    assert len(set(probabilities.argmax(-1))) > 1  # not degenerate
    # The normalization counts: without mean and std, other probabilities.
    assert not np.allclose(expected(model, GOOD, 0.0, 1.0), probabilities, atol=1e-3)


def test_corrupt_rows_get_an_error_and_the_others_are_classified(served):
    _, _, _, (clean, mixed, *_) = served
    good = [row for row in range(len(mixed["label"])) if row not in CORRUPT]
    for name in ("probabilities", "class_id", "label", "error"):
        np.testing.assert_array_equal(mixed[name][good], clean[name])
    bad = sorted(CORRUPT)
    assert mixed["error"][bad].tolist() == [CORRUPT[row][1] for row in bad]
    assert mixed["label"][bad].tolist() == [b""] * len(bad)
    np.testing.assert_array_equal(mixed["class_id"][bad], -1)
    np.testing.assert_array_equal(mixed["probabilities"][bad], 0.0)


def test_grayscale_alpha_and_bigger_images_are_converted(served):
    model, _, _, (_, _, out, _, _) = served
    big = tf.image.resize(BIG.astype("float32"), [SIZE, SIZE], antialias=True)
    images = [np.repeat(GRAY, 3, axis=-1), RGBA[..., :3], big.numpy()]
    check(out, expected(model, images))
    assert not np.allclose(
        expected(model, [BIG[:SIZE, :SIZE]]), out["probabilities"][2]
    )


def test_bmp_and_jpeg(served):
    model, _, _, (_, _, _, out, _) = served
    decoded = tf.io.decode_jpeg(jpeg(GOOD[3])).numpy()  # what JPEG keeps
    check(out, expected(model, [GOOD[2], decoded]))


def test_an_empty_batch(served):
    out = served[3][4]
    assert out["probabilities"].shape == (0, 3) and out["label"].shape == (0,)


def test_gif_and_webp(served):
    image = pytest.importorskip("PIL.Image")
    model, path, _, _ = served
    files = []
    for kind in ("GIF", "WEBP"):
        buffer = io.BytesIO()
        image.fromarray(GOOD[4]).save(buffer, kind, lossless=True)
        files.append(buffer.getvalue())
    out = tf.saved_model.load(path).signatures["classify"](image_bytes=files)
    decoded = [tf.io.decode_image(f, expand_animations=False).numpy() for f in files]
    check({k: v.numpy() for k, v in out.items()}, expected(model, decoded))


def test_rgb_jpeg_into_a_grayscale_model_with_xla(tmp_path):
    model = make_vit(1)
    path = kt.export.export_image_classifier(
        model, tmp_path / "gray", scale=1.0, jit_compile=True
    )
    classify = tf.saved_model.load(path).signatures["classify"]
    files = [jpeg(GOOD[0]), png(GRAY), b"\x89PNG\r\n\x1a\n"]  # a header only
    out = {k: v.numpy() for k, v in classify(image_bytes=files).items()}
    rgb = tf.io.decode_jpeg(files[0]).numpy().astype("float32")
    images = np.stack([rgb @ LUMA, GRAY[..., 0]])[..., None]  # (2, 8, 8, 1)
    probabilities = tf.nn.softmax(model(images), axis=-1).numpy()  # scale 1
    np.testing.assert_allclose(out["probabilities"][:2], probabilities, atol=1e-5)
    class_id = probabilities.argmax(-1)
    assert out["label"].tolist() == [str(i).encode() for i in class_id] + [b""]
    np.testing.assert_array_equal(out["class_id"], [*class_id, -1])
    assert out["error"][2] == b"could not decode image: corrupt or truncated PNG data"


def test_existing_paths_need_overwrite(served, tmp_path):
    model = served[0]
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "old").write_text("old")
    with pytest.raises(ValueError, match=f"overwrite=True.*path='{taken}'"):
        kt.export.export_image_classifier(model, taken)
    assert [p.name for p in taken.iterdir()] == ["old"]
    kt.export.export_image_classifier(model, taken, overwrite=True)
    assert (taken / "saved_model.pb").exists() and not (taken / "old").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]  # no staging left


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(labels=["a", "b"]), r"3 non-empty strings.*labels=\['a', 'b'\]"),
        (dict(labels="abc"), "labels='abc'"),
        (dict(labels=["a", "", "c"]), r"labels=\['a', '', 'c'\]"),
        (dict(scale=0), "scale=0"),
        (dict(scale="1/255"), "scale='1/255'"),
        (dict(scale=float("nan")), "scale=nan"),
        (dict(mean=[0.5, 0.5]), r"3 numbers.*mean=\[0.5, 0.5\]"),
        (dict(mean="0.5"), "mean='0.5'"),
        (dict(std=[[0.2, 0.2, 0.2]]), r"std=\[\[0.2, 0.2, 0.2\]\]"),
        (dict(std=[0.2, 0.0, 0.2]), r"positive numbers.*std=\[0.2, 0.0, 0.2\]"),
        (dict(std=-1), "std=-1"),
        (dict(mean=[0.5, float("inf"), 0.5]), r"mean=\[0.5, inf, 0.5\]"),
        (dict(mean=True), "mean=True"),
        (dict(jit_compile=1), "jit_compile=1"),
        (dict(overwrite="yes"), "overwrite='yes'"),
    ],
)
def test_bad_arguments(served, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        kt.export.export_image_classifier(served[0], tmp_path / "a", **kwargs)
    assert not (tmp_path / "a").exists()


def test_models_that_do_not_take_images(tmp_path):
    export = kt.export.export_image_classifier
    bert = kt.models.bert(10, num_layers=1, num_heads=2, hidden_dim=8,
                          intermediate_dim=16, max_sequence_length=8)  # fmt: skip
    with pytest.raises(ValueError, match="kt.models.ViT.*model=.*'bert'"):
        export(bert, tmp_path / "a")
    four = kt.models.vit(4, 2, 2, num_channels=4, num_layers=1, num_heads=2,
                         hidden_dim=8, intermediate_dim=16)  # fmt: skip
    with pytest.raises(ValueError, match="num_channels=4"):
        export(four, tmp_path / "a")
    with pytest.raises(ValueError, match="ViT.*model='vit_tiny'"):
        export("vit_tiny", tmp_path / "a")
    assert not (tmp_path / "a").exists()
