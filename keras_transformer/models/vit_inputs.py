"""What a ViT takes: encoded image files recognised by their first bytes,
and decoded images preprocessed to the model's size and channels. The image
task and its SavedModel both use these, eagerly and in a graph.

Shape legend: B batch, S the model's image size, C its channels.
"""

import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation

# The formats a row may be in, each with the byte strings its file starts
# with (at these offsets); tf.io.decode_image sniffs the same ones.
FORMATS = (
    ("PNG", ((0, b"\x89PNG\r\n\x1a\n"),)),
    ("JPEG", ((0, b"\xff\xd8\xff"),)),
    ("GIF", ((0, b"GIF87a"),)),
    ("GIF", ((0, b"GIF89a"),)),
    ("BMP", ((0, b"BM"),)),
    ("WebP", ((0, b"RIFF"), (8, b"WEBP"))),
)
# tf.image.rgb_to_grayscale's luma weights (ITU-R BT.601).
LUMA = (0.2989, 0.5870, 0.1140)


def format_names(image_bytes):
    """Each input's image format by its first bytes (`FORMATS`), or ""."""
    # The first 16 bytes, padded with 16 zeros: substr raises past the end.
    head = tf.strings.join([tf.strings.substr(image_bytes, 0, 16), "\0" * 16])
    kind = tf.fill(tf.shape(image_bytes), "")
    for name, parts in FORMATS:
        match = tf.ones_like(image_bytes, tf.bool)
        for offset, part in parts:
            match &= tf.strings.substr(head, offset, len(part)) == part
        kind = tf.where(match, name, kind)
    return kind


def preprocess_image(
    image, num_channels, image_size, scale=1 / 255, mean=None, std=None
):
    """A decoded image as a ViT's input, as `export_image_classifier`
    preprocesses each row (steps 2 to 4 there).

    Alpha is dropped, grayscale repeated to RGB or RGB made gray by
    `tf.image.rgb_to_grayscale`'s weights, the image resized to `image_size`
    × `image_size` (bilinear, antialiased), then `x * scale` and
    `(x - mean) / std` per channel. Runs eagerly or in a graph.

    Args:
        image: pixel values in [0, 255], `(H, W, c)` with c in 1 to 4
            channels (uint8 or float, e.g. from `tf.io.decode_image`).
        num_channels: C, the model's channels: 1 or 3.
        image_size: S, the model's image size.
        scale: the positive factor pixel values are multiplied by first.
        mean: None, a number, or C numbers subtracted per channel after
            `scale`.
        std: None, a number, or C positive numbers pixels are divided by
            after `mean`.

    Returns:
        float32 `(S, S, C)`.

    Example:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> white = np.full((4, 6, 4), 255, "uint8")  # RGBA
        >>> pixels = kt.export.preprocess_image(white, 3, 2, mean=0.5, std=0.5)
        >>> tuple(pixels.shape), round(float(pixels[0, 0, 0]), 5)  # (1 - 0.5) / 0.5
        ((2, 2, 3), 1.0)
    """
    if num_channels not in (1, 3):
        raise ValueError(
            "`num_channels` must be 1 (grayscale) or 3 (RGB). "
            f"Received: num_channels={num_channels!r}"
        )
    validation.check_positive_int("image_size", image_size)
    validation.check_positive_number("scale", scale)
    mean = per_channel("mean", mean, num_channels, default=0.0)
    std = per_channel("std", std, num_channels, default=1.0, positive=True)
    image = tf.cast(image, tf.float32)
    if image.shape.rank is not None and image.shape.rank != 3:
        raise ValueError(
            "`image` must be one image (height, width, channels). "
            f"Received: image of shape {image.shape}"
        )
    count = tf.shape(image)[-1]
    image = image[..., : tf.where(count >= 3, 3, 1)]  # without alpha
    if num_channels == 3:
        image = tf.tile(image, [1, 1, 3 // tf.shape(image)[-1]])
    else:
        image = tf.cond(
            tf.shape(image)[-1] == 3,
            lambda: tf.reduce_sum(image * LUMA, axis=-1, keepdims=True),
            lambda: image,
        )
    image = tf.ensure_shape(image, [None, None, num_channels])
    image = tf.image.resize(image, [image_size, image_size], antialias=True)
    return (image * scale - mean) / std  # (S, S, C)


def per_channel(name, value, channels, default, positive=False):
    """`value` (None, a number or `channels` numbers) as float32 `(channels,)`."""
    if value is None:
        return np.full([channels], default, np.float32)
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    kind = "positive number" if positive else "number"
    if (
        array is None
        or isinstance(value, str)
        or array.shape not in ((), (channels,))
        or any(isinstance(v, bool) for v in np.ravel(np.asarray(value, object)))
        or not np.all(np.isfinite(array))
        or (positive and np.any(array <= 0))
    ):
        raise ValueError(
            f"`{name}` must be a {kind} or a sequence of {channels} {kind}s, one "
            f"per channel of the model. Received: {name}={value!r}"
        )
    return np.broadcast_to(array, [channels]).astype(np.float32)
