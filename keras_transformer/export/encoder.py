"""A BERT sentence encoder as a SavedModel: text in, embeddings out.

Shape legend: B batch, T sequence length, E hidden size.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import savedmodel
from keras_transformer.models import BERT, BERTFeatureExtractor
from keras_transformer.text import checks as text_checks
from keras_transformer.text import packing, tokenizer_checks

FEATURE_OUTPUTS = ("pooled_output", "mean_pooled_output")


@positional_deprecated("sequence_length", "overwrite")
def export_encoder(model, tokenizer, path, *, sequence_length=None, overwrite=False):
    """Exports a BERT encoder and its tokenizer as a sentence-embedding SavedModel.

    The SavedModel has one signature, `encode` (also `serving_default`):
    `text` string `(B,)` -> `{"pooled_output": float32 (B, E),
    "mean_pooled_output": float32 (B, E)}`, the outputs of
    `kt.models.BERTFeatureExtractor` (the tanh-pooled `[CLS]` vector, and
    the mean of the last hidden states over real tokens, `[CLS]` and `[SEP]`
    included).

    Texts are tokenized in the graph and packed as `[CLS] text [SEP]` by
    `kt.text.pack_segments`, keeping the first `sequence_length - 2` tokens.
    An empty string is encoded as `[CLS] [SEP]`.

    Loading the SavedModel needs TensorFlow and `import tensorflow_text`
    (which registers the tokenizer and packing ops), not keras_transformer.

    Args:
        model: a `kt.models.BERT` backbone or a
            `kt.models.BERTFeatureExtractor`.
        tokenizer: a `kt.text` tokenizer with `[CLS]` and `[SEP]`. Its own
            `sequence_length`, if any, is ignored.
        path: the SavedModel directory to write.
        sequence_length: T, the packed length; None is the model's
            `max_sequence_length`.
        overwrite: replace an existing non-empty `path`.

    Returns:
        The absolute path written.

    Example (loading; see docs/export.md for a complete run):

    ```python
    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops

    encoder = tf.saved_model.load(path)
    out = encoder.signatures["encode"](text=tf.constant(["a sentence"]))
    embeddings = out["mean_pooled_output"]  # float32 (batch, hidden)
    ```
    """
    validation.check_model(model, (BERT, BERTFeatureExtractor), "export_encoder")
    backbone = getattr(model, "backbone", model)  # a BERTFeatureExtractor's
    path = savedmodel.check_path(path, overwrite)
    sequence_length = validation.check_sequence_length(
        sequence_length, backbone.max_sequence_length, minimum=2
    )
    tokenizer_checks.check_tokenizer(tokenizer, "tokenizer", backbone.vocabulary_size)
    cls_id = text_checks.special_token_id(tokenizer, text_checks.CLS, "encoding")
    sep_id = text_checks.special_token_id(tokenizer, text_checks.SEP, "encoding")
    tokenizer = tokenizer_checks.without_sequence_length(tokenizer)
    extractor = BERTFeatureExtractor(model) if model is backbone else model

    @tf.function(input_signature=[savedmodel.string_spec("text")])
    def encode(text):
        inputs = packing.pack_bert_inputs(
            tokenizer, [text], sequence_length, cls_id, sep_id
        )
        outputs = extractor(inputs, training=False)
        return {name: tf.cast(outputs[name], tf.float32) for name in FEATURE_OUTPUTS}

    module = tf.Module()
    module.tokenizer = tokenizer
    module.encode = encode
    return savedmodel.save(module, {"serving_default": encode, "encode": encode}, path)
