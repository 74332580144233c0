"""A BERT classifier as a SavedModel: text (or text pairs) in, labels out.

Shape legend: B batch, T sequence length, C classes.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import savedmodel
from keras_transformer.models import BERTClassifier
from keras_transformer.text import checks as text_checks
from keras_transformer.text import packing, tokenizer_checks


@positional_deprecated("class_names", "sequence_length", "overwrite")
def export_classifier(
    model, tokenizer, path, *, class_names=None, sequence_length=None, overwrite=False
):
    """Exports a `bert_classifier` model and its tokenizer as a SavedModel.

    The SavedModel has two signatures:

    - `classify` (also `serving_default`): `text` string `(B,)`;
    - `classify_pair`: `text` and `text_pair` strings `(B,)`, for sentence
      pairs;

    both returning `label` (string `(B,)` from `class_names`, or the int32
    class index without them) and `probabilities` float32 `(B, C)`.

    Texts are tokenized in the graph and packed as `[CLS] A [SEP]` or
    `[CLS] A [SEP] B [SEP]` by `kt.text.pack_segments`: longer inputs are
    trimmed to `sequence_length` tokens in all, from the end of each segment,
    round robin. Empty strings are fine (`[CLS] [SEP]`).

    Loading the SavedModel needs TensorFlow and `import tensorflow_text`
    (which registers the tokenizer and packing ops), not keras_transformer.

    Args:
        model: a `kt.models.BERTClassifier` (from `kt.models.bert_classifier`).
        tokenizer: a `kt.text` tokenizer with `[CLS]` and `[SEP]`. Its own
            `sequence_length`, if any, is ignored.
        path: the SavedModel directory to write.
        class_names: a list of `C` label strings, or None for int labels.
        sequence_length: T, the packed length; None is the model's
            `max_sequence_length`.
        overwrite: replace an existing non-empty `path`.

    Returns:
        The absolute path written.

    Example (loading; see docs/export.md for a complete run):

    ```python
    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops

    classifier = tf.saved_model.load(path)
    out = classifier.signatures["classify"](text=tf.constant(["great film"]))
    labels, probabilities = out["label"], out["probabilities"]
    ```
    """
    validation.check_model(model, BERTClassifier, "export_classifier")
    backbone = model.backbone
    path = savedmodel.check_path(path, overwrite)
    num_classes = model.num_classes
    if class_names is not None and (
        isinstance(class_names, str)
        or not hasattr(class_names, "__len__")
        or len(class_names) != num_classes
        or not all(isinstance(name, str) for name in class_names)
    ):
        raise ValueError(
            f"`class_names` must be a list of {num_classes} strings, one per "
            f"class of the model. Received: class_names={class_names!r}"
        )
    sequence_length = validation.check_sequence_length(
        sequence_length, backbone.max_sequence_length, minimum=3
    )
    tokenizer_checks.check_tokenizer(tokenizer, "tokenizer", backbone.vocabulary_size)
    cls_id = text_checks.special_token_id(tokenizer, text_checks.CLS, "classification")
    sep_id = text_checks.special_token_id(tokenizer, text_checks.SEP, "classification")
    tokenizer = tokenizer_checks.without_sequence_length(tokenizer)
    names = None if class_names is None else tf.constant(list(class_names))

    def outputs(texts):
        inputs = packing.pack_bert_inputs(
            tokenizer, texts, sequence_length, cls_id, sep_id
        )
        logits = model(inputs, training=False)  # (B, C)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        label = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        if names is not None:
            label = tf.gather(names, label)
        return {"label": label, "probabilities": probabilities}

    @tf.function(input_signature=[savedmodel.string_spec("text")])
    def classify(text):
        return outputs([text])

    @tf.function(
        input_signature=[
            savedmodel.string_spec("text"),
            savedmodel.string_spec("text_pair"),
        ]
    )
    def classify_pair(text, text_pair):
        return outputs([text, text_pair])

    module = tf.Module()
    module.tokenizer = tokenizer
    module.classify = classify
    module.classify_pair = classify_pair
    signatures = {
        "serving_default": classify,
        "classify": classify,
        "classify_pair": classify_pair,
    }
    return savedmodel.save(module, signatures, path)
