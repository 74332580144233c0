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
from keras_transformer.pretrained import registry as _registry  # noqa: E402
from keras_transformer.text import hf_tokenizers as _hf_tokenizers  # noqa: E402

# The one wiring between rooms, here and nowhere else: text/ reads a folder
# whose tokenizer goes by its `model_type` with the reader its family's
# record names (text/ sits below pretrained/, so it cannot ask).
_hf_tokenizers.MODEL_TYPE_READERS.update(_registry.tokenizer_readers())

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
