"""`ImageClassifier`: a `kt.models.ViT` and its preprocessing, images in,
labels and probabilities out.

Images are preprocessed as `kt.export.export_image_classifier` does, so the
task and its export give the same outputs: decoded in their own channels,
alpha dropped, gray repeated to RGB (or RGB to gray by the luma weights),
resized to the model's `image_size` (bilinear, antialiased), then
`(x * scale - mean) / std` per channel.

Shape legend: B batch, H and W an image's height and width, c its
channels, S the model's image size, C its channels, N classes.
"""

import math
import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import export_image_classifier
from keras_transformer.models import ViT, vit_inputs
from keras_transformer.tasks.base import Task

# ViTImageProcessor's defaults, for a folder without preprocessor_config.json.
PROCESSOR_DEFAULTS = {
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


@keras.saving.register_keras_serializable(package="keras_transformer")
class ImageClassifier(Task):
    """A ViT and its preprocessing: images in, labels and probabilities out.

    Args:
        model: a `kt.models.ViT` with 1 (grayscale) or 3 (RGB) channels.
        class_names: N non-empty strings, one per class; None: the class
            ids as strings ("0", "1", ...).
        scale: the positive factor pixel values in [0, 255] are multiplied
            by first.
        mean: None, a number, or C numbers subtracted per channel after
            `scale`.
        std: None, a number, or C positive numbers pixels are divided by
            after `mean`.
        **kwargs: base `keras.Model` arguments (`name`).

    Example:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.vit(8, 4, 2, num_layers=1, num_heads=2,
        ...                       hidden_dim=8, intermediate_dim=16)
        >>> classifier = kt.tasks.ImageClassifier(model, ["cat", "dog"])
        >>> out = classifier.predict(np.zeros((8, 8, 3), "uint8"))
        >>> out["label"] in ("cat", "dog"), out["probabilities"].shape
        (True, (2,))
    """

    model_classes = (ViT,)
    serialized_arguments = ("model",)
    reads_text = False

    def __init__(
        self, model, class_names=None, *, scale=1 / 255, mean=None, std=None, **kwargs
    ):
        super().__init__(model, None, **kwargs)
        channels = model.num_channels  # C
        if channels not in (1, 3):
            raise ValueError(
                "kt.tasks.ImageClassifier needs a ViT of grayscale "
                "(num_channels=1) or RGB (num_channels=3) images. Received: "
                f"model with num_channels={channels!r}"
            )
        self.class_names = check_class_names(class_names, model.num_classes)
        validation.check_positive_number("scale", scale)
        self.scale = float(scale)
        self.mean = per_channel("mean", mean, channels)
        self.std = per_channel("std", std, channels, positive=True)

    @classmethod
    def from_pretrained(cls, path, dtype=None):
        """The classifier of a `ViTForImageClassification` folder: its
        weights, `id2label` names and `preprocessor_config.json`'s rescale
        factor, mean and std (`ViTImageProcessor`'s defaults without it).
        `dtype` must be None (ViT folders load in float32).

        Raises:
            FileNotFoundError: `path` has no `config.json`.
            ValueError: the folder is not a `ViTForImageClassification`, or
                its processor resizes to another size than the model's.
        """
        return super().from_pretrained(path, dtype=dtype)

    @classmethod
    def _from_folder(cls, model, tokenizer, config, path):
        file = os.path.join(path, "preprocessor_config.json")
        found = validation.read_json(file, missing_ok=True) or {}
        processor = {**PROCESSOR_DEFAULTS, **found}
        size = processor.get("size", model.image_size)
        sides = (
            {size.get("height"), size.get("width")}
            if isinstance(size, dict)
            else {size}
        )
        if processor.get("do_resize", True) and sides != {model.image_size}:
            raise ValueError(
                f"{file!r} resizes images to another size than the model's "
                f"image_size ({model.image_size}). Received: size={size!r}"
            )
        labels = config.get("id2label") or {}
        names = [labels.get(str(i)) for i in range(model.num_classes)]
        normalize = processor["do_normalize"]
        return cls(
            model,
            None if None in names else names,
            scale=processor["rescale_factor"] if processor["do_rescale"] else 1,
            mean=processor["image_mean"] if normalize else None,
            std=processor["image_std"] if normalize else None,
        )

    def predict(self, images):
        """Classifies images.

        Args:
            images: one image or a non-empty list of them; an image is a
                numpy array `(H, W, c)` of pixel values in [0, 255] (uint8 or
                float; c is 1, 3 or 4: alpha is dropped), the bytes of a PNG,
                JPEG, GIF, BMP or WebP file, or the path of one. A numpy
                array `(B, H, W, c)` is a batch.

        Returns:
            For a batch, `{"labels": list of B str, "class_ids": int32
            (B,), "probabilities": float32 (B, N)}`; for one image,
            `{"label": str, "class_id": int, "probabilities": float32
            (N,)}`. Probabilities are the softmax of the model's logits and
            labels the `class_names` (the class ids as strings without
            them), as the export serves them.

        Raises:
            ValueError: an image of another type or shape, or bytes that do
                not decode, before the model runs.
            FileNotFoundError: a path names no file.
        """
        items, single = split_images(images)
        pixels = [
            self._pixels(None if single else i, item) for i, item in enumerate(items)
        ]
        pixels = tf.stack(pixels)  # (B, S, S, C)
        logits = self.model(pixels, training=False)  # (B, N)
        probabilities = tf.nn.softmax(tf.cast(logits, "float32"), axis=-1).numpy()
        class_id = probabilities.argmax(-1).astype("int32")
        names = self.class_names or [str(i) for i in range(self.model.num_classes)]
        labels = [names[i] for i in class_id]
        if single:
            return {
                "label": labels[0],
                "class_id": int(class_id[0]),
                "probabilities": probabilities[0],
            }
        return {
            "labels": labels,
            "class_ids": class_id,
            "probabilities": probabilities,
        }

    def _pixels(self, index, item):
        """`images[index]` as the model's float32 input `(S, S, C)`."""
        image = decode(index, item)  # (H, W, c) float32 in [0, 255]
        model = self.model
        return vit_inputs.preprocess_image(
            image, model.num_channels, model.image_size, self.scale, self.mean, self.std
        )

    def export(self, path, **options):
        """`kt.export.export_image_classifier` of the model with this task's
        class names and preprocessing; served, its `label`, `class_id` and
        `probabilities` are `predict`'s on the same encoded images."""
        settings = {
            "labels": self.class_names,
            "scale": self.scale,
            "mean": self.mean,
            "std": self.std,
            **options,
        }
        return export_image_classifier(self.model, path, **settings)

    def get_config(self):
        return {
            **super().get_config(),
            "class_names": self.class_names,
            "scale": self.scale,
            "mean": self.mean,
            "std": self.std,
        }


def check_class_names(class_names, num_classes):
    if class_names is None:
        return None
    if (
        isinstance(class_names, str)
        or not isinstance(class_names, list | tuple)
        or len(class_names) != num_classes
        or not all(isinstance(name, str) and name for name in class_names)
    ):
        raise ValueError(
            f"`class_names` must be a list of {num_classes} non-empty strings, one "
            f"per class of the model. Received: class_names={class_names!r}"
        )
    return list(class_names)


def per_channel(name, value, channels, positive=False):
    """`value` (None, a number or `channels` numbers) as a list of
    `channels` floats (JSON, for the config), or None."""
    if value is None:
        return None
    if isinstance(value, np.ndarray | np.generic):
        value = value.tolist()
    values = list(value) if isinstance(value, list | tuple) else [value]
    if (
        len(values) not in (1, channels)
        or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
        or (positive and min(values) <= 0)
    ):
        kind = "positive number" if positive else "number"
        raise ValueError(
            f"`{name}` must be a {kind} or a sequence of {channels} {kind}s, one "
            f"per channel of the model. Received: {name}={value!r}"
        )
    return [float(v) for v in values] * (channels // len(values))


def split_images(images):
    """`(list of images, whether one image was given)`, or a ValueError."""
    if isinstance(images, np.ndarray) and images.ndim == 4:
        return list(images), False
    if isinstance(images, list | tuple):
        if not images:
            raise ValueError(
                "`images` must be an image or a non-empty list of images. "
                "Received: images=[]"
            )
        return list(images), False
    return [images], True


def decode(index, item):
    """One image (array, file bytes or path) as float32 `(H, W, c)`."""
    name = "images" if index is None else f"images[{index}]"
    if isinstance(item, str | os.PathLike):
        path = os.fspath(item)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"`{name}` names no image file. Received: {name}={path!r}"
            )
        with open(path, "rb") as f:
            item = f.read()
    if isinstance(item, bytes):
        kind = image_format(item)
        if kind is None:
            raise ValueError(
                f"`{name}` is not a PNG, JPEG, GIF, BMP or WebP file. Received: "
                f"{name}={item[:16]!r}{'...' if len(item) > 16 else ''}"
            )
        try:
            image = tf.io.decode_image(item, channels=0, expand_animations=False)
        except tf.errors.InvalidArgumentError:
            raise ValueError(
                f"`{name}` could not be decoded: corrupt or truncated {kind} data. "
                f"Received: {name}={item[:16]!r}{'...' if len(item) > 16 else ''} "
                f"({len(item)} bytes)"
            ) from None
        return tf.cast(image, tf.float32)
    if (
        isinstance(item, np.ndarray)
        and item.ndim == 3
        and item.shape[-1] in (1, 3, 4)
        and min(item.shape) > 0
        and (
            np.issubdtype(item.dtype, np.integer)
            or np.issubdtype(item.dtype, np.floating)
        )
    ):
        return tf.constant(item, tf.float32)
    raise ValueError(
        f"`{name}` must be a numpy array (height, width, 1, 3 or 4 channels) of "
        "pixel values, the bytes of an image file or its path. Received: "
        f"{name}={describe_image(item)}"
    )


def image_format(data):
    """The name of the format whose signature `data` starts with, or None."""
    for name, parts in vit_inputs.FORMATS:
        if all(data[offset : offset + len(part)] == part for offset, part in parts):
            return name
    return None


def describe_image(item):
    if isinstance(item, np.ndarray):
        return f"an array of shape {item.shape} and dtype {item.dtype}"
    return validation.describe(item)
