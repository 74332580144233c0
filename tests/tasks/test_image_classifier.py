"""kt.tasks.ImageClassifier: the model's probabilities on the pixels the
export preprocesses, from arrays, file bytes and paths; the export served
without the library; the ViT fixture's labels and processor; save/load."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.export.test_image_classifier import (
    BIG,
    GOOD,
    GRAY,
    LABELS,
    LUMA,
    MEAN,
    RGBA,
    SIZE,
    STD,
    bmp,
    expected,
    jpeg,
    make_vit,
    png,
)
from tests.helpers import run_export_test

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")
ATOL = 3e-6  # as the export's tests: 10x the 3e-7 measured


@pytest.fixture(scope="module")
def classifier():
    return kt.tasks.ImageClassifier(make_vit(3), LABELS, mean=MEAN, std=STD)


def check(out, probabilities):
    np.testing.assert_allclose(out["probabilities"], probabilities, atol=ATOL)
    class_id = probabilities.argmax(-1)
    np.testing.assert_array_equal(out["class_ids"], class_id)
    assert out["labels"] == [LABELS[i] for i in class_id]


def test_arrays_bytes_and_paths_give_the_models_probabilities(classifier, tmp_path):
    """A batch array, a list of PNG files' bytes and of their paths: the
    softmax of the model on (x / 255 - mean) / std, by hand."""
    probabilities = expected(classifier.model, GOOD)
    assert len(set(probabilities.argmax(-1))) > 1  # not degenerate
    out = classifier.predict(GOOD)
    check(out, probabilities)
    assert out["probabilities"].dtype == np.float32
    files = [png(image) for image in GOOD]
    paths = []
    for i, data in enumerate(files):
        paths.append(tmp_path / f"{i}.png")
        paths[-1].write_bytes(data)
    for images in (files, [str(p) for p in paths], paths, list(GOOD)):
        check(classifier.predict(images), probabilities)
    one = classifier.predict(files[1])  # one image: one label
    assert one["label"] == LABELS[probabilities[1].argmax()]
    assert one["class_id"] == probabilities[1].argmax()
    np.testing.assert_allclose(one["probabilities"], probabilities[1], atol=ATOL)
    # Mean and std count: without them, other probabilities.
    plain = kt.tasks.ImageClassifier(classifier.model, LABELS)
    assert not np.allclose(
        plain.predict(GOOD)["probabilities"], probabilities, atol=1e-3
    )


def test_channels_sizes_and_formats_are_converted(classifier):
    big = tf.image.resize(BIG.astype("float32"), [SIZE, SIZE], antialias=True)
    decoded = tf.io.decode_jpeg(jpeg(GOOD[3])).numpy()  # what JPEG keeps
    images = [png(GRAY), png(RGBA), png(BIG), bmp(GOOD[2]), jpeg(GOOD[3])]
    reference = [np.repeat(GRAY, 3, -1), RGBA[..., :3], big.numpy(), GOOD[2], decoded]
    check(classifier.predict(images), expected(classifier.model, reference))
    arrays = classifier.predict([GRAY, RGBA, BIG.astype("float32")])
    check(arrays, expected(classifier.model, reference[:3]))
    gray = kt.tasks.ImageClassifier(make_vit(1), scale=1.0)
    rgb = GOOD[0].astype("float32") @ LUMA
    logits = gray.model(np.stack([rgb, GRAY[..., 0]])[..., None])
    out = gray.predict([GOOD[0], GRAY])
    np.testing.assert_allclose(  # the luma sum in another order: 1e-5
        out["probabilities"], tf.nn.softmax(logits).numpy(), atol=1e-5
    )
    assert out["labels"] == [str(i) for i in out["class_ids"]]  # no class names


def test_export_serves_predict_without_the_library(classifier, tmp_path):
    files = [png(image) for image in GOOD] + [png(GRAY), png(BIG), jpeg(GOOD[1])]
    path = classifier.export(tmp_path / "vit")
    names, (served,) = run_export_test(
        path, [("classify", {"image_bytes": files})], tmp_path
    )
    assert names == ["classify", "serving_default"]
    out = classifier.predict(files)
    np.testing.assert_allclose(served["probabilities"], out["probabilities"], atol=ATOL)
    np.testing.assert_array_equal(served["class_id"], out["class_ids"])
    assert served["label"].astype(str).tolist() == out["labels"]


def test_from_pretrained_reads_labels_and_the_processor():
    """The fixture's id2label and preprocessor_config.json; on raw images
    transformers' processor resized with PIL (8-bit rounding), so the
    probabilities are close to its, not equal."""
    folder = os.path.join(HF, "vit_tiny")
    task = kt.tasks.from_pretrained(folder)
    assert type(task) is kt.tasks.ImageClassifier
    assert task.class_names == ["cat", "dog", "bird", "fish", "horse"]
    assert task.scale == pytest.approx(1 / 255)
    assert task.mean == [0.485, 0.456, 0.406] and task.std == [0.229, 0.224, 0.225]
    reference = np.load(os.path.join(HF, "vit_tiny_outputs.npz"))
    out = task.predict(reference["raw_images"])  # (2, 24, 20, 3) uint8
    theirs = tf.nn.softmax(reference["raw_logits"]).numpy()
    np.testing.assert_allclose(out["probabilities"], theirs, atol=0.02)
    assert out["labels"] == [task.class_names[i] for i in theirs.argmax(-1)]


def test_save_and_load_give_the_same_outputs(classifier, tmp_path):
    files = [png(image) for image in GOOD[:3]]
    before = classifier.predict(files)
    path = classifier.save(tmp_path / "classifier.keras")
    for loaded in (kt.tasks.load(path), keras.saving.load_model(path)):
        assert type(loaded) is kt.tasks.ImageClassifier
        assert loaded.get_config() == classifier.get_config()
        after = loaded.predict(files)
        np.testing.assert_array_equal(after["probabilities"], before["probabilities"])
        assert after["labels"] == before["labels"]


def test_bad_input_is_refused_before_the_model_runs(classifier, tmp_path):
    bad = {
        "images=\\[\\]": [],
        "images=5": 5,
        "images=None": None,
        "images=b'not an image'": b"not an image",
        "corrupt or truncated PNG": png(GOOD[0])[:60],
        "images\\[0\\]=an array of shape \\(8, 8\\)": [GOOD[0][..., 0]],
        "shape \\(8, 8, 2\\)": GOOD[0][..., :2],
        "dtype <U1": np.full((8, 8, 3), "a"),
        "images\\[1\\]=3": [png(GOOD[0]), 3],
    }
    for message, images in bad.items():
        with pytest.raises(ValueError, match=message):
            classifier.predict(images)
    with pytest.raises(FileNotFoundError, match="images\\[1\\]='a'"):
        classifier.predict([GOOD[0], "a"])  # a str is a path
    with pytest.raises(FileNotFoundError, match="missing.png"):
        classifier.predict(str(tmp_path / "missing.png"))
    model = classifier.model
    for argument, value, message in [
        ("class_names", ["a", "b"], "class_names=\\['a', 'b'\\]"),
        ("class_names", "abc", "class_names='abc'"),
        ("class_names", ["a", "", "c"], "non-empty"),
        ("scale", 0, "scale=0"),
        ("mean", [0.5, 0.5], "mean=\\[0.5, 0.5\\]"),
        ("std", [1.0, 0.0, 1.0], "std=\\[1.0, 0.0, 1.0\\]"),
        ("std", "1", "std='1'"),
    ]:
        with pytest.raises(ValueError, match=message):
            kt.tasks.ImageClassifier(model, **{argument: value})
    seq2seq = kt.models.seq2seq(20, num_layers=1, num_heads=2, hidden_dim=8,
                                intermediate_dim=16)  # fmt: skip
    with pytest.raises(ValueError, match="kt.models.ViT.*'seq2seq'"):
        kt.tasks.ImageClassifier(seq2seq)
    with pytest.raises(ValueError, match="num_channels=2"):
        kt.tasks.ImageClassifier(make_vit(2))


def test_preprocess_image_refuses_bad_arguments():
    image = np.zeros((4, 4, 3), "uint8")
    preprocess = kt.export.preprocess_image
    for arguments, message in [
        ((image, 2, 4), "num_channels=2"),
        ((image, 3, 0), "image_size=0"),
        ((image[..., 0], 3, 4), r"shape \(4, 4\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            preprocess(*arguments)
    with pytest.raises(ValueError, match=r"std=\[1, 0, 1\]"):
        preprocess(image, 3, 4, std=[1, 0, 1])
