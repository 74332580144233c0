"""Text to model inputs, in-graph on tensorflow-text: tokenizers, vocabularies,
MLM masking, packing, tf.data pipelines and corpus files."""

from keras_transformer.text.bpe import BytePairTokenizer, bytes_to_unicode
from keras_transformer.text.bpe_training import build_bpe_vocabulary
from keras_transformer.text.char import CharTokenizer, build_char_vocabulary
from keras_transformer.text.checks import RESERVED_TOKENS
from keras_transformer.text.files import (
    download_imdb_reviews,
    download_tiny_shakespeare,
    load_labeled_text,
    load_text,
    load_text_pairs,
    read_tsv,
)
from keras_transformer.text.hf_tokenizers import tokenizer_from_pretrained
from keras_transformer.text.llama_tokenizer import LlamaTokenizer
from keras_transformer.text.masking import MaskedLMMaskGenerator
from keras_transformer.text.packing import (
    causal_lm_windows,
    pack_segments,
    pack_seq2seq,
)
from keras_transformer.text.pipelines import (
    causal_lm_dataset,
    classification_dataset,
    masked_lm_dataset,
    translation_dataset,
)
from keras_transformer.text.sentencepiece import (
    SentencePieceTokenizer,
    train_sentencepiece,
)
from keras_transformer.text.t5_tokenizer import T5Tokenizer
from keras_transformer.text.tokenizer import Tokenizer
from keras_transformer.text.vocabulary import build_wordpiece_vocabulary
from keras_transformer.text.whisper_tokenizer import WhisperTokenizer
from keras_transformer.text.wordpiece import WordPieceTokenizer

__all__ = [
    "RESERVED_TOKENS",
    "BytePairTokenizer",
    "CharTokenizer",
    "LlamaTokenizer",
    "T5Tokenizer",
    "WhisperTokenizer",
    "MaskedLMMaskGenerator",
    "SentencePieceTokenizer",
    "Tokenizer",
    "WordPieceTokenizer",
    "build_bpe_vocabulary",
    "build_char_vocabulary",
    "bytes_to_unicode",
    "build_wordpiece_vocabulary",
    "causal_lm_dataset",
    "causal_lm_windows",
    "classification_dataset",
    "download_imdb_reviews",
    "download_tiny_shakespeare",
    "load_labeled_text",
    "load_text",
    "load_text_pairs",
    "masked_lm_dataset",
    "pack_segments",
    "pack_seq2seq",
    "read_tsv",
    "tokenizer_from_pretrained",
    "train_sentencepiece",
    "translation_dataset",
]
