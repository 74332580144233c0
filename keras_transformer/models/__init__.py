"""Model factories: each returns a functional `keras.Model`."""

from keras_transformer.models.bert import (
    bert,
    bert_classifier,
    bert_feature_extractor,
    bert_masked_lm,
)
from keras_transformer.models.gpt import gpt2
from keras_transformer.models.presets import PRESETS
from keras_transformer.models.seq2seq import seq2seq

__all__ = [
    "PRESETS",
    "bert",
    "bert_classifier",
    "bert_feature_extractor",
    "bert_masked_lm",
    "gpt2",
    "seq2seq",
]
