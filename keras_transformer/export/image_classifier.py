"""A ViT image classifier as a SavedModel: encoded image files in, labels out.

Shape legend: B batch (rows of the request), K rows that decoded, S the
model's image size, C its channels, N classes.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import savedmodel
from keras_transformer.models import ViT, vit_inputs


def export_image_classifier(
    model,
    path,
    labels=None,
    *,
    scale=1 / 255,
    mean=None,
    std=None,
    jit_compile=False,
    overwrite=False,
):
    """Exports a `kt.models.ViT` as a SavedModel that classifies image files.

    The SavedModel has one signature, `classify` (also `serving_default`):
    `image_bytes` string `(B,)`, each row the bytes of a PNG, JPEG, GIF, BMP
    or WebP file, to

    - `label`: string `(B,)`, from `labels` (the class id as a string, "0",
      "1", ..., without them); empty for a row that did not decode;
    - `class_id`: int32 `(B,)`, the most probable class, -1 for such a row;
    - `probabilities`: float32 `(B, N)`, the softmax of the model's logits,
      zeros for such a row;
    - `error`: string `(B,)`, empty for a classified row, else why it was not
      (`"could not decode image: ..."`).

    A row that does not decode never fails the request: the other rows are
    classified as if it were not there. A row is refused when it does not
    start with the signature of one of those formats (empty rows included),
    or when TensorFlow's decoder raises on it (corrupt or truncated data):
    rows are decoded in the graph by a `tf.data` pipeline whose
    `ignore_errors()` drops the rows that raise. Damage the decoder does not
    notice (altered bytes inside compressed pixel data, say) gives a wrong
    image that is classified like any other.

    Every row is preprocessed in the graph as the model was trained on:

    1. decoded by `tf.io.decode_image` (`expand_animations=False`: a GIF's
       first frame) in its own channels;
    2. converted to the model's channels: alpha is dropped (transparent
       pixels keep their stored colour), grayscale is repeated to RGB, and
       RGB becomes gray by `tf.image.rgb_to_grayscale`'s weights
       (0.2989 R + 0.5870 G + 0.1140 B, not rounded);
    3. resized to the model's `image_size` × `image_size` by
       `tf.image.resize` (bilinear, `antialias=True`, so shrinking averages
       the pixels; a square image of that size is unchanged; other aspect
       ratios are stretched, not cropped);
    4. `x * scale`, then `(x - mean) / std` per channel when they are given,
       on float32 pixel values in [0, 255].

    Loading the SavedModel needs TensorFlow only, not keras_transformer.

    Args:
        model: a `kt.models.ViT` with 1 (grayscale) or 3 (RGB) channels.
        path: the SavedModel directory to write.
        labels: a list of N non-empty strings, one per class, or None for
            the class ids as strings.
        scale: the positive factor that pixel values in [0, 255] are
            multiplied by first (1/255: [0, 1]; 1: unscaled).
        mean: None, a number, or a sequence of C numbers subtracted per
            channel after `scale`.
        std: None, a number, or a sequence of C positive numbers that
            pixels are divided by after `mean`.
        jit_compile: compile the model's forward pass with XLA (once per
            number of decoded rows seen). Decoding and resizing run outside
            XLA either way. TF Serving runs XLA on CPU only with
            `--xla_cpu_compilation_enabled=true`.
        overwrite: replace an existing non-empty `path`.

    Returns:
        The absolute path written.

    Example (loading; see docs/export.md for a complete run):

    ```python
    import tensorflow as tf

    classifier = tf.saved_model.load(path)
    with open("digit.png", "rb") as f:
        out = classifier.signatures["classify"](image_bytes=tf.constant([f.read()]))
    label, error = out["label"].numpy()[0], out["error"].numpy()[0]
    ```
    """
    mean, std = _check_arguments(model, labels, scale, mean, std, jit_compile)
    path = savedmodel.check_path(path, overwrite)
    num_classes = model.num_classes
    names = tf.constant(
        [str(i) for i in range(num_classes)] if labels is None else list(labels)
    )
    decode = _decode_function(model.num_channels, model.image_size, scale, mean, std)
    forward = tf.function(
        lambda pixels: model(pixels, training=False), jit_compile=jit_compile
    )

    @tf.function(input_signature=[savedmodel.string_spec("image_bytes")])
    def classify(image_bytes):
        batch = tf.shape(image_bytes, out_type=tf.int64)[0]
        kind = vit_inputs.format_names(image_bytes)  # the format's name, or ""
        candidates = kind != ""
        rows, pixels = decode(image_bytes, candidates)  # (K,), (K, S, S, C)
        logits = forward(pixels)  # (K, N)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        class_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        at = rows[:, None]  # (K, 1)
        decoded = tf.scatter_nd(at, tf.ones_like(rows, tf.bool), [batch])  # (B,)
        probabilities = tf.scatter_nd(at, probabilities, [batch, num_classes])
        class_id = tf.scatter_nd(at, class_id + 1, [batch]) - 1  # -1: not decoded
        label = tf.where(decoded, tf.gather(names, tf.maximum(class_id, 0)), "")
        return {
            "label": label,
            "class_id": class_id,
            "probabilities": probabilities,
            "error": tf.where(decoded, "", _errors(image_bytes, kind, candidates)),
        }

    module = tf.Module()
    module.classify = classify
    signatures = {"serving_default": classify, "classify": classify}
    return savedmodel.save(module, signatures, path)


def _check_arguments(model, labels, scale, mean, std, jit_compile):
    """`export_image_classifier`'s checks, before any work: the per-channel
    `(mean, std)`."""
    validation.check_model(model, ViT, "export_image_classifier")
    channels = model.num_channels
    if channels not in (1, 3):
        raise ValueError(
            "`export_image_classifier` needs a ViT for grayscale (num_channels=1) "
            "or RGB (num_channels=3) images. Received: model with "
            f"num_channels={channels!r}"
        )
    num_classes = model.num_classes
    if labels is not None and (
        isinstance(labels, str)
        or not hasattr(labels, "__len__")
        or len(labels) != num_classes
        or not all(isinstance(label, str) and label for label in labels)
    ):
        raise ValueError(
            f"`labels` must be a list of {num_classes} non-empty strings, one per "
            f"class of the model. Received: labels={labels!r}"
        )
    validation.check_positive_number("scale", scale)
    mean = vit_inputs.per_channel("mean", mean, channels, default=0.0)
    std = vit_inputs.per_channel("std", std, channels, default=1.0, positive=True)
    validation.check_bool("jit_compile", jit_compile)
    return mean, std


def _decode_function(channels, size, scale, mean, std):
    """`(image_bytes (B,), candidates (B,)) -> (rows (K,), pixels (K, S, S,
    C))`: the candidate rows that decode, and their pixels."""

    def preprocess(data):
        image = tf.io.decode_image(data, channels=0, expand_animations=False)
        return vit_inputs.preprocess_image(image, channels, size, scale, mean, std)

    def decode(image_bytes, candidates):
        rows = tf.where(candidates)[:, 0]
        dataset = tf.data.Dataset.from_tensor_slices(
            (rows, tf.gather(image_bytes, rows))
        )
        dataset = dataset.map(
            lambda row, data: (row, preprocess(data)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        dataset = dataset.ignore_errors().batch(
            tf.maximum(tf.size(rows, out_type=tf.int64), 1)
        )
        # At most one batch; none when no row decodes.
        empty = (tf.zeros([0], tf.int64), tf.zeros([0, size, size, channels]))
        return dataset.reduce(
            empty,
            lambda state, batch: (
                tf.concat([state[0], batch[0]], 0),
                tf.concat([state[1], batch[1]], 0),
            ),
        )

    return decode


def _errors(image_bytes, kind, candidates):
    """Why each input would not decode (read only where it did not)."""
    return tf.where(
        candidates,
        tf.strings.join(
            ["could not decode image: corrupt or truncated ", kind, " data"]
        ),
        tf.where(
            tf.strings.length(image_bytes) == 0,
            "could not decode image: the input is empty",
            "could not decode image: not a PNG, JPEG, GIF, BMP or WebP file",
        ),
    )
