"""Tasks: a model and its tokenizer(s) as one object, text in, text out.

Each task saves to one `.keras` file (`task.save(path)`, `kt.tasks.load`),
comes from a Hugging Face folder (`Task.from_pretrained(path)`, or
`kt.tasks.from_pretrained(path)`, which picks the task from the folder's
`architectures`), and exports the string SavedModel `kt.export` writes
(`task.export(path)`).
"""

from keras_transformer.tasks.base import Task
from keras_transformer.tasks.fill_mask import FillMask
from keras_transformer.tasks.generation_request import GenerationOptions
from keras_transformer.tasks.image_classifier import ImageClassifier
from keras_transformer.tasks.registry import from_pretrained, load
from keras_transformer.tasks.sentence_encoder import SentenceEncoder
from keras_transformer.tasks.speech_recognizer import SpeechRecognizer
from keras_transformer.tasks.text2text import Text2Text
from keras_transformer.tasks.text_classifier import TextClassifier
from keras_transformer.tasks.text_generator import TextGenerator
from keras_transformer.tasks.translator import Summarizer, Translator

__all__ = [
    "FillMask",
    "GenerationOptions",
    "ImageClassifier",
    "SentenceEncoder",
    "SpeechRecognizer",
    "Summarizer",
    "Text2Text",
    "Task",
    "TextClassifier",
    "TextGenerator",
    "Translator",
    "from_pretrained",
    "load",
]
