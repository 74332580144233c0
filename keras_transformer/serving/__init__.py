"""Serving many users at once: `Engine` (continuous batching over one
KV cache of slots) and the OpenAI-compatible HTTP app over it
(`keras-transformer serve`)."""

from keras_transformer.serving.engine import Engine, QueueFull
from keras_transformer.serving.rows import Reply

__all__ = ["Engine", "QueueFull", "Reply"]
