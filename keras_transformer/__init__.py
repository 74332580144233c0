"""keras-transformer: readable Transformer layers and models for Keras 3."""

__version__ = "0.1.0"

from keras_transformer import (  # noqa: E402
    export,
    generation,
    layers,
    models,
    tasks,
    text,
    training,
)

__all__ = [
    "__version__",
    "export",
    "generation",
    "layers",
    "models",
    "tasks",
    "text",
    "training",
]
