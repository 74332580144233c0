"""Hugging Face BERT checkpoints (`model_type: bert`) <-> `kt.models.BERT`
and its heads (`BertForMaskedLM` -> `BERTMaskedLM`,
`BertForSequenceClassification` -> `BERTClassifier`).

Our BERT computes what Hugging Face's `BertModel` computes (post-LN, exact
GELU, LayerNorm epsilon 1e-12, learned absolute positions, a tanh pooler), so
loading is a renaming and re-shaping of tensors:

- `nn.Linear` weights are `(out, in)`; Keras kernels are `(in, out)`;
- attention projections are split into heads: query/key/value kernels
  `(E, H, D)` with biases `(H, D)`, the output kernel `(H, D, E)`.

Shape legend: E hidden size, H heads, D head size, F intermediate size.
"""

import numpy as np

from keras_transformer.models.bert import BERT
from keras_transformer.models.bert_heads import BERTClassifier, BERTMaskedLM
from keras_transformer.models.initializers import (
    normal_initializer,
    placeholder_weights,
)
from keras_transformer.pretrained import checkpoint, keys
from keras_transformer.pretrained.family import Family
from keras_transformer.text import hf_writers
from keras_transformer.text.wordpiece import WordPieceTokenizer

# Hugging Face config values our BERT computes exactly.
SUPPORTED = {
    "hidden_act": ("gelu",),
    "position_embedding_type": ("absolute",),
}
LAYER_NORM_EPSILON = 1e-12


def load(path):
    """Our model of a BERT folder, weights in place."""
    config = checkpoint.read_config(path)
    return build(config, checkpoint.read_weights(path))


def save(model, path, tokenizer=None):
    """Writes a `BERT`, `BERTMaskedLM` or `BERTClassifier` (and its
    `WordPieceTokenizer`) as a Hugging Face folder."""
    if tokenizer is not None:
        hf_writers.check_savable(tokenizer, WordPieceTokenizer)
        size = getattr(model, "backbone", model).vocabulary_size
        checkpoint.check_tokenizer_size(tokenizer.vocabulary_size(), size, tokenizer)
    path = checkpoint.write_folder(path, *export(model))
    if tokenizer is not None:
        hf_writers.save_wordpiece(tokenizer, path)
    return path


def config_to_arguments(config):
    """`BERT` constructor arguments from a Hugging Face `config.json`."""
    checkpoint.check_supported(config, "BERT", SUPPORTED)
    epsilon = config.get("layer_norm_eps", LAYER_NORM_EPSILON)
    if not np.isclose(epsilon, LAYER_NORM_EPSILON, rtol=0, atol=1e-15):
        raise ValueError(
            "This BERT checkpoint's `layer_norm_eps` is not supported (supported: "
            f"{LAYER_NORM_EPSILON}). Received: layer_norm_eps={epsilon!r}"
        )
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=config["max_position_embeddings"],
        num_segments=config.get("type_vocab_size", 2),
        dropout=config.get("hidden_dropout_prob", 0.1),
    )


def arguments_to_config(model, architecture="BertModel"):
    """The Hugging Face `config.json` of a `BERT`."""
    return {
        "architectures": [architecture],
        "model_type": "bert",
        "vocab_size": model.vocabulary_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "hidden_size": model.hidden_dim,
        "intermediate_size": model.intermediate_dim,
        "max_position_embeddings": model.max_sequence_length,
        "type_vocab_size": model.num_segments,
        "hidden_dropout_prob": model.dropout,
        "attention_probs_dropout_prob": model.dropout,
        "hidden_act": "gelu",
        "layer_norm_eps": LAYER_NORM_EPSILON,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
        "initializer_range": 0.02,
    }


SAME = checkpoint.SAME
LINEAR = (lambda w: w.T, lambda w: w.T)


def _dense(prefix, layer, converter=LINEAR, bias=SAME):
    return [
        (f"{prefix}.weight", layer.kernel, converter),
        (f"{prefix}.bias", layer.bias, bias),
    ]


def _masked_lm_pairs(model):
    return [
        *_dense("cls.predictions.transform.dense", model.mlm_dense),
        *checkpoint.norm_pairs(
            "cls.predictions.transform.LayerNorm", model.mlm_layer_norm
        ),
        ("cls.predictions.bias", model.mlm_bias.bias, SAME),
    ]


def _classifier_config(model):
    return {
        "id2label": {str(i): f"LABEL_{i}" for i in range(model.num_classes)},
        "label2id": {f"LABEL_{i}": i for i in range(model.num_classes)},
        "classifier_dropout": model.dropout,
    }


def _nothing(model):
    return []


def _no_keys(model):
    return {}


# Each head: its architecture -> (our class, its own tensors as `BertFor*`
# names them, the config keys it writes).
HEADS = {
    "BertModel": (BERT, _nothing, _no_keys),
    "BertForMaskedLM": (BERTMaskedLM, _masked_lm_pairs, _no_keys),
    "BertForSequenceClassification": (
        BERTClassifier,
        lambda model: _dense("classifier", model.classifier_logits),
        _classifier_config,
    ),
}


def _head(model):
    """The architecture of `model` in `HEADS`: its class's, or that of the
    nearest base class listed."""
    classes = {cls: name for name, (cls, _, _) in HEADS.items()}
    return next(classes[c] for c in type(model).__mro__ if c in classes)


def _pairs(model, pooler=True):
    """`(Hugging Face name, our variable, to ours, to theirs)` for every
    tensor of a `BERT`; the converters map numpy arrays between the two
    layouts."""
    heads, size = model.num_heads, model.hidden_dim // model.num_heads
    same, norm, dense = SAME, checkpoint.norm_pairs, _dense
    split, split_bias, merge = checkpoint.head_converters(heads, size)

    tables = model.embeddings
    segments = model.segment_embedding
    pairs = [
        ("embeddings.word_embeddings.weight", tables.token_embedding.embeddings, same),
        ("embeddings.position_embeddings.weight", tables.position_embeddings, same),
        ("embeddings.token_type_embeddings.weight", segments.embeddings, same),
        *norm("embeddings.LayerNorm", model.embeddings_layer_norm),
    ]
    for i, block in enumerate(model.blocks):
        prefix = f"encoder.layer.{i}"
        attention = block.self_attention_layer
        for name, layer in [
            ("query", attention.query_dense),
            ("key", attention.key_dense),
            ("value", attention.value_dense),
        ]:
            pairs += dense(f"{prefix}.attention.self.{name}", layer, split, split_bias)
        pairs += dense(
            f"{prefix}.attention.output.dense", attention.output_dense, merge
        )
        pairs += norm(
            f"{prefix}.attention.output.LayerNorm", block.self_attention_layer_norm
        )
        pairs += dense(
            f"{prefix}.intermediate.dense", block.feedforward_intermediate_dense
        )
        pairs += dense(f"{prefix}.output.dense", block.feedforward_output_dense)
        pairs += norm(f"{prefix}.output.LayerNorm", block.feedforward_layer_norm)
    if pooler:
        pairs += dense("pooler.dense", model.pooled_dense)
    return pairs


# Tensors a checkpoint may hold that carry nothing of their own: a buffer of
# position ids, and BertForMaskedLM's decoder, tied to the token embedding
# and to `cls.predictions.bias` (checked by value in `_check_tied`).
IGNORED = (
    "embeddings.position_ids",
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
)
# BertForMaskedLM's decoder copies: `(copy, the tensor it must equal)`.
TIED = (
    ("cls.predictions.decoder.weight", "embeddings.word_embeddings.weight"),
    ("cls.predictions.decoder.bias", "cls.predictions.bias"),
)


def _key(weights, name):
    """The checkpoint's key for tensor `name`: with or without the `bert.`
    prefix that `BertFor*` checkpoints add, and with the old `gamma`/`beta`
    LayerNorm names."""
    candidates = [name, f"bert.{name}"]
    if name.endswith("LayerNorm.weight"):
        candidates += [c.replace(".weight", ".gamma") for c in list(candidates)]
    if name.endswith("LayerNorm.bias"):
        candidates += [c.replace(".bias", ".beta") for c in list(candidates)]
    return keys.find_key(weights, name, candidates, "BERT ", "architecture")


ARCHITECTURES = tuple(HEADS)


def build(config, weights):
    """Our model of a checkpoint: `BERT`, `BERTMaskedLM` or `BERTClassifier`."""
    architecture = checkpoint.check_architecture(config, "BERT", ARCHITECTURES)
    if architecture == "BertForMaskedLM":
        # Our masked-LM head decodes with the token embedding itself.
        checkpoint.check_supported(config, "BERT", {"tie_word_embeddings": (True,)})
        _check_tied(weights)
    with placeholder_weights():  # every weight is assigned below
        backbone = BERT(**config_to_arguments(config))
        if architecture == "BertModel":
            model = backbone
        elif architecture == "BertForMaskedLM":
            model = BERTMaskedLM(backbone)
        else:
            labels = config.get("id2label") or {}
            dropout = config.get("classifier_dropout")
            if dropout is None:
                dropout = config.get("hidden_dropout_prob", 0.1)
            model = BERTClassifier(
                backbone, len(labels) or config.get("num_labels", 2), dropout=dropout
            )
    # BertForMaskedLM has no pooler: ours gets fresh initial weights.
    pooler = architecture != "BertForMaskedLM"
    head_pairs = HEADS[architecture][1](model)
    checkpoint.assign(
        _pairs(backbone, pooler=pooler) + head_pairs, weights, _key, IGNORED
    )
    if not pooler:
        kernel = backbone.pooled_dense.kernel
        kernel.assign(normal_initializer()(kernel.shape, kernel.dtype))
    return model


def _check_tied(weights):
    """A ValueError naming a decoder copy whose values differ from the
    tensor `BERTMaskedLM` ties it to (an untied head would be dropped)."""
    for copy, tied in TIED:
        if copy not in weights:
            continue
        value, source = weights[copy], weights[_key(weights, tied)]
        if value.shape != source.shape or not np.array_equal(value, source):
            raise ValueError(
                f"The checkpoint's {copy!r} differs from its {tied!r}; "
                "kt.models.BERTMaskedLM ties the two (untied decoders are not "
                f"supported). Received: {copy!r} of shape {value.shape}, {tied!r} "
                f"of shape {source.shape}"
            )


def export(model):
    """`(config, tensors)` of a `BERT`, `BERTMaskedLM` or `BERTClassifier` in
    Hugging Face's names and layouts."""
    backbone = getattr(model, "backbone", model)
    architecture = _head(model)
    _, head_pairs, head_config = HEADS[architecture]
    config = {**arguments_to_config(backbone, architecture), **head_config(model)}
    prefix = "" if architecture == "BertModel" else "bert."
    pairs = [
        (prefix + name, variable, converters)
        for name, variable, converters in _pairs(
            backbone, pooler=architecture != "BertForMaskedLM"
        )
    ] + head_pairs(model)
    return config, checkpoint.tensors(pairs)


FAMILY = Family(
    name="BERT",
    model_types=("bert",),
    classes=(BERT, BERTMaskedLM, BERTClassifier),
    architectures={
        "BertModel": (BERT, "SentenceEncoder"),
        "BertForMaskedLM": (BERTMaskedLM, "FillMask"),
        "BertForSequenceClassification": (BERTClassifier, "TextClassifier"),
    },
    load=load,
    save=save,
    default_architectures={"bert": "BertModel"},
)
