"""Hugging Face checkpoint folders <-> our models, exactly.

`kt.models.from_pretrained(path)` reads a local folder (`config.json`, the
weights in `model.safetensors` or its sharded index) and returns our model
class with the weights in place; `kt.models.save_pretrained(model, path)`
writes one back. One module per `model_type`.
"""

import os

from keras_transformer.models.bert import BERT
from keras_transformer.models.bert_heads import BERTClassifier, BERTMaskedLM
from keras_transformer.models.gpt import GPT2
from keras_transformer.models.seq2seq import Seq2Seq
from keras_transformer.models.vit import ViT
from keras_transformer.pretrained import bert, checkpoint, gpt2, seq2seq, vit
from keras_transformer.text.bpe import BytePairTokenizer
from keras_transformer.text.hf_tokenizers import (
    END,
    check_savable,
    check_seq2seq_tokenizer,
    save_seq2seq_tokenizer,
    save_tokenizer,
)
from keras_transformer.text.wordpiece import WordPieceTokenizer

FAMILIES = {
    "bert": bert,
    "gpt2": gpt2,
    "marian": seq2seq,
    "bart": seq2seq,
    "vit": vit,
}


def from_pretrained(path):
    """Loads a Hugging Face checkpoint folder as one of our models.

    Supported: `model_type: bert` (MiniLM and other BERT-shaped models
    included): `BertModel` -> `kt.models.BERT`, `BertForMaskedLM` ->
    `kt.models.BERTMaskedLM`, `BertForSequenceClassification` ->
    `kt.models.BERTClassifier`, by the config's `architectures`; and
    `model_type: gpt2` (`GPT2LMHeadModel`, `GPT2Model`) -> `kt.models.GPT2`,
    whose ids are GPT-2's plus one (id 0 is padding here), as the
    folder's `kt.text.tokenizer_from_pretrained` gives them; and the
    encoder-decoders `model_type: marian` (`MarianMTModel`, the opus-mt
    translators) and `model_type: bart` (`BartForConditionalGeneration`)
    -> `kt.models.Seq2Seq`, also with ids plus one, the checkpoint's
    generation settings (`generation_config.json`) in the model's
    `generation_config` and its decoder start token in
    `decoder_start_token_id`; and `model_type: vit`
    (`ViTForImageClassification`) -> `kt.models.ViT`, which takes images
    channels last, `(B, H, W, C)`, where transformers takes
    `pixel_values` `(B, C, H, W)` (`ViTModel`, without a classifier, is
    refused). Weights are read with `safetensors` (no torch
    or transformers needed); a config asking for something we do not
    compute is refused, naming the key, before any weight is built.

    Args:
        path: a local checkpoint folder.

    Returns:
        Our model computing what the checkpoint computes.

    Raises:
        FileNotFoundError: `path` has no `config.json` or no weights.
        ValueError: an unsupported `model_type` or configuration, or tensors
            missing or of the wrong shape.

    Examples:
        >>> import os, tempfile
        >>> import keras_transformer as kt
        >>> model = kt.models.bert(30, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16, max_sequence_length=8)
        >>> folder = kt.models.save_pretrained(model, tempfile.mkdtemp())
        >>> sorted(os.listdir(folder))
        ['config.json', 'model.safetensors']
        >>> type(kt.models.from_pretrained(folder)).__name__
        'BERT'
    """
    path = checkpoint.check_folder(path)
    config = checkpoint.read_config(path)
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(
            f"Unsupported checkpoint `model_type` (supported: {sorted(FAMILIES)}). "
            f"Received: model_type={model_type!r} in {path!r}"
        )
    if FAMILIES[model_type] is seq2seq:
        generation = checkpoint.read_generation_config(path)
        seq2seq.config_to_arguments(config, generation)  # checks, before reading
        return seq2seq.build(config, checkpoint.read_weights(path), generation)
    return FAMILIES[model_type].build(config, checkpoint.read_weights(path))


def save_pretrained(model, path, tokenizer=None):
    """Writes `model` (and its tokenizer) as a Hugging Face checkpoint folder.

    The folder loads with `kt.models.from_pretrained` and with Hugging Face
    `transformers` (`BertModel.from_pretrained(path)`,
    `GPT2LMHeadModel.from_pretrained(path)`,
    `MarianMTModel.from_pretrained(path)`,
    `BartForConditionalGeneration.from_pretrained(path)`,
    `ViTForImageClassification.from_pretrained(path)`). The ids of a
    `GPT2` or `Seq2Seq` go back to the checkpoint's (minus one): the
    padding row 0 is dropped. A `Seq2Seq` is written as Marian (sinusoidal
    positions) or BART (learned positions) when its options are one of
    theirs (what `from_pretrained` gives), with a `generation_config.json`
    of its `generation_config`.

    Args:
        model: a `kt.models.BERT`, `BERTMaskedLM`, `BERTClassifier`,
            `GPT2`, Marian- or BART-shaped `Seq2Seq`, or `ViT`.
        path: the folder to write (created if needed).
        tokenizer: optionally the model's tokenizer: a
            `kt.text.WordPieceTokenizer` for BERT (written as `vocab.txt`
            and `tokenizer_config.json`) or a `kt.text.BytePairTokenizer`
            for GPT-2 (`vocab.json`, `merges.txt`, `tokenizer_config.json`).
            For a `Seq2Seq`: a BART `kt.text.BytePairTokenizer`, or a Marian
            `(source, target)` pair of `kt.text.SentencePieceTokenizer`
            with a vocabulary (`source.spm`, `target.spm`, `vocab.json`).
            None for a `ViT`: its config has `num_labels`, no label names,
            and no image processor is written.

    Returns:
        The folder's absolute path.
    """
    models = BERT | BERTMaskedLM | BERTClassifier | GPT2 | Seq2Seq | ViT
    if not isinstance(model, models):
        raise ValueError(
            "`model` must be a kt.models.BERT, BERTMaskedLM, BERTClassifier, "
            f"GPT2, Seq2Seq or ViT. Received: model={model!r}"
        )
    if isinstance(model, Seq2Seq):
        return _save_seq2seq(model, path, tokenizer)
    if isinstance(model, ViT):
        if tokenizer is not None:
            raise ValueError(
                "A ViT has no tokenizer: `tokenizer` must be None. "
                f"Received: tokenizer={tokenizer!r}"
            )
        path = os.path.abspath(os.fspath(path))
        checkpoint.write_folder(path, *vit.export(model))
        return path
    is_gpt2 = isinstance(model, GPT2)
    if tokenizer is not None:
        check_savable(tokenizer, BytePairTokenizer if is_gpt2 else WordPieceTokenizer)
        if tokenizer.vocabulary_size() > _vocabulary_size(model):
            raise ValueError(
                f"`tokenizer` has {tokenizer.vocabulary_size()} ids but `model` "
                f"only {_vocabulary_size(model)}: they do not belong together. "
                f"Received: tokenizer={tokenizer!r}"
            )
    path = os.path.abspath(os.fspath(path))
    if is_gpt2:
        end = None
        if tokenizer is not None and END in tokenizer.get_vocabulary():
            end = tokenizer.token_to_id(END)
        checkpoint.write_folder(path, *gpt2.export(model, end))
    else:
        checkpoint.write_folder(path, *bert.export(model))
    if tokenizer is not None:
        save_tokenizer(tokenizer, path)
    return path


def _save_seq2seq(model, path, tokenizer):
    config, generation, tensors = seq2seq.export(model)  # checks the model first
    if tokenizer is not None:
        check_seq2seq_tokenizer(tokenizer, config["model_type"], model.vocabulary_size)
    path = os.path.abspath(os.fspath(path))
    checkpoint.write_folder(path, config, tensors, generation)
    if tokenizer is not None:
        save_seq2seq_tokenizer(tokenizer, path, config)
    return path


def _vocabulary_size(model):
    return getattr(model, "backbone", model).vocabulary_size
