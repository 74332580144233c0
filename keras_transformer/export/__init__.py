"""SavedModel export of end-to-end string models: the tokenizer, the model and
(for generation) the compiled decode loop in one graph that serves raw strings
with TensorFlow and tensorflow-text only; and of image classifiers that serve
encoded image files with TensorFlow only."""

from keras_transformer.export.classifier import export_classifier
from keras_transformer.export.encoder import export_encoder
from keras_transformer.export.fill_mask import export_fill_mask
from keras_transformer.export.generator import export_text_generator
from keras_transformer.export.image_classifier import export_image_classifier
from keras_transformer.export.speech_recognizer import export_speech_recognizer
from keras_transformer.export.translator import (
    export_summarizer,
    export_text2text,
    export_translator,
)
from keras_transformer.models.vit_inputs import preprocess_image

__all__ = [
    "export_speech_recognizer",
    "export_classifier",
    "export_encoder",
    "export_fill_mask",
    "export_image_classifier",
    "export_summarizer",
    "export_text2text",
    "export_text_generator",
    "export_translator",
    "preprocess_image",
]
