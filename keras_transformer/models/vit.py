"""ViT: the Vision Transformer, an image classifier.

Shape legend: B batch, H = W image size, C channels, N patches, E hidden size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers import PatchEmbedding, TransformerEncoderBlock
from keras_transformer.models.base import ModelMixin, model_factory
from keras_transformer.models.initializers import initializer


@keras.saving.register_keras_serializable(package="keras_transformer")
class ViT(ModelMixin, keras.Model):
    """A Vision Transformer classifier, built functionally.

    Patch embeddings with a class token and learned positions
    (`kt.layers.PatchEmbedding`), pre-LN encoder blocks with GELU, a final
    LayerNorm, and a linear classifier on the class token's state.

    From scratch, every kernel (the patch projection, the blocks' dense
    layers, the classifier) is drawn Glorot-uniform, as in the paper's
    code and KerasHub's `ViTBackbone`, and the class token and positions
    from N(0, 0.05²) truncated at 2σ (`kt.layers.PatchEmbedding`'s
    defaults). BERT's N(0, 0.02²) suits widths near 768; at the small
    widths of ViTs trained from scratch it is several times smaller than
    Glorot's draws and learns worse: 8×8 digits, 2 layers, 64 hidden, Adam
    1e-3, 30 epochs reach 0.973 held-out over 5 seeds instead of 0.948,
    as KerasHub's (`benchmarks/vit_init.py`). A checkpoint overwrites
    every draw.

    Args:
        image_size: side of the square input images.
        patch_size: side of the square patches; must divide `image_size`.
        num_classes: number of output classes.
        num_channels: channels of the input images (3: RGB).
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width.
        dropout: dropout rate (embeddings, attention, residual branches).
        layer_norm_epsilon: epsilon of every LayerNorm (the blocks' and the
            final one); 1e-12 is Hugging Face's `ViTConfig` default.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: float images `(B, image_size, image_size, num_channels)`,
            channels last, already scaled as the model was trained on.

    Returns:
        Logits `(B, num_classes)`.

    Layers (attributes): `patch_embedding` (`kt.layers.PatchEmbedding`),
    `blocks` (a list of `kt.layers.TransformerEncoderBlock`),
    `final_layer_norm`, `classifier`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.ViT(8, 4, 10, num_layers=1, num_heads=2,
        ...                       hidden_dim=8, intermediate_dim=16)
        >>> images = np.random.rand(2, 8, 8, 3).astype("float32")
        >>> tuple(model(images).shape)
        (2, 10)

    References:
        Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
        Image Recognition at Scale", 2021.
    """

    family = "vit"

    def __init__(
        self,
        image_size,
        patch_size,
        num_classes,
        *,
        num_channels=3,
        num_layers=None,
        num_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        dropout=0.0,
        layer_norm_epsilon=1e-12,
        **kwargs,
    ):
        config = dict(
            image_size=image_size,
            patch_size=patch_size,
            num_classes=num_classes,
            num_channels=num_channels,
            num_layers=num_layers,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        for name, value in config.items():
            if name not in ("dropout", "layer_norm_epsilon"):
                validation.check_positive_int(name, value)
        validation.check_rate("dropout", dropout)
        validation.check_rate("layer_norm_epsilon", layer_norm_epsilon)
        if hidden_dim % num_heads:
            raise ValueError(
                "`hidden_dim` must be divisible by `num_heads`. "
                f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}"
            )
        # === Layers ===
        self.patch_embedding = PatchEmbedding(
            patch_size,
            hidden_dim,
            image_size=image_size,
            dropout=dropout,
            kernel_initializer=initializer("glorot_uniform"),
            embeddings_initializer=initializer("truncated_normal"),
            name="patch_embedding",
        )
        self.blocks = [
            TransformerEncoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation="gelu",
                normalize_first=True,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=initializer("glorot_uniform"),
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="final_layer_norm"
        )
        self.classifier = keras.layers.Dense(
            num_classes,
            kernel_initializer=initializer("glorot_uniform"),
            name="classifier",
        )
        # === Functional model ===
        images = keras.Input((image_size, image_size, num_channels), name="images")
        x = self.patch_embedding(images)  # (B, N + 1, E)
        for block in self.blocks:
            x = block(x)
        x = self.final_layer_norm(x)
        logits = self.classifier(x[:, 0, :])  # (B, num_classes): the class token
        super().__init__(images, logits, **{"name": "vit", **kwargs})
        self._set_config(**config)


vit = model_factory(
    ViT,
    "vit",
    "Builds a `kt.models.ViT` image classifier.",
    "A `kt.models.ViT` taking float images `(B, image_size, image_size, "
    "num_channels)` to logits `(B, num_classes)`.",
    """
    >>> import keras_transformer as kt
    >>> model = kt.models.vit(8, 2, 10, num_layers=1, num_heads=2,
    ...                       hidden_dim=8, intermediate_dim=16)
    >>> type(model).__name__, model.output_shape
    ('ViT', (None, 10))
    """,
)
__test__ = {"vit": vit}  # its example runs with the module's
