"""Hugging Face checkpoint folders <-> our models, exactly.

`kt.models.from_pretrained(path)` reads a local folder (`config.json`, the
weights in `model.safetensors` or its sharded index) and returns our model
class with the weights in place; `kt.models.save_pretrained(model, path)`
writes one back. One module per `model_type`.
"""

import os

from keras_transformer.models.bert import BERT
from keras_transformer.models.bert_heads import BERTClassifier, BERTMaskedLM
from keras_transformer.pretrained import bert, checkpoint
from keras_transformer.text.pretrained import check_savable, save_tokenizer

FAMILIES = {"bert": bert}


def from_pretrained(path):
    """Loads a Hugging Face checkpoint folder as one of our models.

    Supported now: `model_type: bert` (MiniLM and other BERT-shaped models
    included): `BertModel` -> `kt.models.BERT`, `BertForMaskedLM` ->
    `kt.models.BERTMaskedLM`, `BertForSequenceClassification` ->
    `kt.models.BERTClassifier`, by the config's `architectures`. Weights
    are read with `safetensors` (no torch or transformers needed).

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
    return FAMILIES[model_type].build(config, checkpoint.read_weights(path))


def save_pretrained(model, path, tokenizer=None):
    """Writes `model` (and its tokenizer) as a Hugging Face checkpoint folder.

    The folder loads with `kt.models.from_pretrained` and with Hugging Face
    `transformers` (`BertModel.from_pretrained(path)`).

    Args:
        model: a `kt.models.BERT`, `BERTMaskedLM` or `BERTClassifier`.
        path: the folder to write (created if needed).
        tokenizer: optionally a `kt.text.WordPieceTokenizer`, written as
            `vocab.txt` and `tokenizer_config.json`.

    Returns:
        The folder's absolute path.
    """
    if not isinstance(model, BERT | BERTMaskedLM | BERTClassifier):
        raise ValueError(
            "`model` must be a kt.models.BERT, BERTMaskedLM or BERTClassifier (the "
            f"models save_pretrained writes so far). Received: model={model!r}"
        )
    path = os.path.abspath(os.fspath(path))
    if tokenizer is not None:
        check_savable(tokenizer)
    checkpoint.write_folder(path, *bert.export(model))
    if tokenizer is not None:
        save_tokenizer(tokenizer, path)
    return path
