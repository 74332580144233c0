"""keras-transformer: readable Transformer layers and models for Keras 3."""

__version__ = "0.1.0"

from keras_transformer import generation, layers, models, text, training  # noqa: E402

__all__ = ["__version__", "generation", "layers", "models", "text", "training"]
