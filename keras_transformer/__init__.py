"""keras-transformer: readable Transformer layers and models for Keras 3."""

__version__ = "0.1.0"

from keras_transformer import (  # noqa: E402
    export,
    generation,
    layers,
    models,
    serving,
    tasks,
    text,
    training,
)
from keras_transformer.pretrained.registry import tokenizer_readers  # noqa: E402

# The one wiring between rooms, here and nowhere else: text/ reads a folder
# whose tokenizer goes by its `model_type` with the reader its family's
# record names (text/ sits below pretrained/, so it cannot ask).
text.hf_tokenizers.use_model_type_readers(tokenizer_readers())
del tokenizer_readers

__all__ = [
    "__version__",
    "export",
    "generation",
    "layers",
    "models",
    "serving",
    "tasks",
    "text",
    "training",
]
