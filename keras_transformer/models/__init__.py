"""Model classes (registered functional `keras.Model` subclasses), their
factories and presets.

Each family is one module: `bert.py` (`BERT`; its heads in `bert_heads.py`),
`gpt.py` (`GPT2`), `llama.py` (`Llama`: Llama, Mistral, Qwen2), `gemma3.py`
(`Gemma3`),
`seq2seq.py` (`Seq2Seq`), `t5.py` (`T5`: T5, FLAN-T5), `vit.py` (`ViT`),
`whisper.py` (`Whisper`). `base.py`
holds what every class shares (size checks, the initializer, the config with
its dtype policy, presets: `presets.py`), `decoding.py` the small protocol
(`CausalLM`, `Seq2SeqLM`) that generation and export decode through.
"""

from keras_transformer.models.bert import BERT, bert
from keras_transformer.models.bert_heads import (
    BERTClassifier,
    BERTFeatureExtractor,
    BERTMaskedLM,
    bert_classifier,
    bert_feature_extractor,
    bert_masked_lm,
)
from keras_transformer.models.decoding import CausalLM, Seq2SeqLM
from keras_transformer.models.gemma3 import Gemma3, gemma3
from keras_transformer.models.gpt import GPT2, gpt2
from keras_transformer.models.llama import Llama, llama
from keras_transformer.models.presets import PRESETS
from keras_transformer.models.seq2seq import Seq2Seq, seq2seq
from keras_transformer.models.t5 import T5, t5
from keras_transformer.models.vit import ViT, vit
from keras_transformer.models.whisper import Whisper, whisper

# Last: the checkpoint converters build the classes above.
from keras_transformer.pretrained import from_pretrained, save_pretrained  # noqa: E402

__all__ = [
    "BERT",
    "BERTClassifier",
    "BERTFeatureExtractor",
    "BERTMaskedLM",
    "GPT2",
    "Gemma3",
    "Llama",
    "PRESETS",
    "CausalLM",
    "Seq2Seq",
    "Seq2SeqLM",
    "T5",
    "ViT",
    "Whisper",
    "bert",
    "bert_classifier",
    "bert_feature_extractor",
    "bert_masked_lm",
    "from_pretrained",
    "gemma3",
    "gpt2",
    "llama",
    "save_pretrained",
    "seq2seq",
    "t5",
    "vit",
    "whisper",
]
