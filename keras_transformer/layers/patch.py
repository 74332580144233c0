"""Images to a sequence of patch embeddings, as the Vision Transformer reads them.

Shape legend: B batch, H height, W width, C channels, P patch size,
N number of patches `(H / P) * (W / P)`, E hidden size.
"""

import keras
from keras import ops

from keras_transformer import _validation as validation


@keras.saving.register_keras_serializable(package="keras_transformer")
class PatchEmbedding(keras.layers.Layer):
    """Non-overlapping square patches, projected linearly, plus learned positions.

    The image is cut into `patch_size` × `patch_size` patches, each flattened
    and projected to `hidden_dim` by one linear map: a `Conv2D` whose kernel
    and stride are both `patch_size` (kernel `(P, P, C, E)`, bias `(E,)`, as
    in ViT implementations). Patches are ordered row by row. A learned class
    token is prepended (its final state is what ViT classifies), then a
    learned position embedding is added to every position, then dropout.
    The channel count is taken from the inputs when the layer is built.

    Args:
        patch_size: side P of the square patches.
        hidden_dim: embedding size E.
        image_size: side of the square images the layer accepts; must be
            divisible by `patch_size`. It fixes the number of positions.
        class_token: whether a learned class token is prepended.
        dropout: dropout rate on the embeddings.
        kernel_initializer: initializer of the projection kernel.
        embeddings_initializer: initializer of the class token and the
            position embeddings.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float images `(B, image_size, image_size, C)`, channels last,
            with the C the layer was built for.
        training: whether dropout is active.

    Returns:
        `(B, N + 1, E)` with the class token first, or `(B, N, E)` with
        `class_token=False`; `N = (image_size / patch_size) ** 2`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> embed = kt.layers.PatchEmbedding(4, 16, image_size=8)
        >>> images = np.random.rand(2, 8, 8, 3).astype("float32")
        >>> tuple(embed(images).shape)  # 4 patches and the class token
        (2, 5, 16)

    References:
        Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
        Image Recognition at Scale", 2021.
    """

    def __init__(
        self,
        patch_size,
        hidden_dim,
        *,
        image_size,
        class_token=True,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        embeddings_initializer="truncated_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_int("patch_size", patch_size)
        validation.check_positive_int("hidden_dim", hidden_dim)
        validation.check_positive_int("image_size", image_size)
        validation.check_bool("class_token", class_token)
        validation.check_rate("dropout", dropout)
        if image_size % patch_size:
            raise ValueError(
                "`image_size` must be divisible by `patch_size`. "
                f"Received: image_size={image_size}, patch_size={patch_size}"
            )
        self.patch_size = patch_size
        self.hidden_dim = hidden_dim
        self.image_size = image_size
        self.class_token = class_token
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.num_patches = (image_size // patch_size) ** 2

    def build(self, inputs_shape):
        self._check_shape(inputs_shape)
        self.projection = keras.layers.Conv2D(
            self.hidden_dim,
            self.patch_size,
            strides=self.patch_size,
            kernel_initializer=_fresh(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="projection",
        )
        self.projection.build(inputs_shape)
        if self.class_token:
            self.class_embedding = self.add_weight(
                name="class_embedding",
                shape=(self.hidden_dim,),
                initializer=_fresh(self.embeddings_initializer),
            )
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.num_patches + int(self.class_token), self.hidden_dim),
            initializer=_fresh(self.embeddings_initializer),
        )
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.built = True

    def call(self, inputs, training=None):
        self._check_shape(inputs.shape)
        x = self.projection(ops.cast(inputs, self.compute_dtype))  # (B, H/P, W/P, E)
        x = ops.reshape(x, (-1, self.num_patches, self.hidden_dim))  # (B, N, E)
        if self.class_token:
            token = ops.cast(self.class_embedding, x.dtype)[None, None, :]  # (1, 1, E)
            token = ops.broadcast_to(token, (ops.shape(x)[0], 1, self.hidden_dim))
            x = ops.concatenate([token, x], axis=1)  # (B, N + 1, E)
        x = x + ops.cast(self.position_embeddings, x.dtype)[None]
        return self.dropout_layer(x, training=training)

    def _check_shape(self, shape):
        """Refuses a rank, image size or channel count the layer cannot take."""
        validation.check_rank("inputs", shape, 4)
        projection = getattr(self, "projection", None)  # None until built
        channels = shape[-1] if projection is None else projection.kernel.shape[2]
        expected = (None, self.image_size, self.image_size, channels)
        if channels is None or any(
            e is not None and s is not None and s != e
            for s, e in zip(shape, expected, strict=True)
        ):
            raise ValueError(
                f"`inputs` must be images of shape (batch, {self.image_size}, "
                f"{self.image_size}, channels)"
                + (f" with channels={channels}" if channels is not None else "")
                + f". Received: inputs with shape {tuple(shape)}"
            )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "hidden_dim": self.hidden_dim,
                "image_size": self.image_size,
                "class_token": self.class_token,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config

    def compute_output_shape(self, inputs_shape):
        length = self.num_patches + int(self.class_token)
        return (inputs_shape[0], length, self.hidden_dim)


def _fresh(initializer):
    """A new instance: Keras warns when one seeded initializer is used twice."""
    return keras.initializers.get(keras.initializers.serialize(initializer))
