"""A BERT masked-LM as a SavedModel: texts with a `[MASK]` in, the likeliest
tokens for it out.

Shape legend: B batch, T sequence length, K top_k, V vocabulary size.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import savedmodel
from keras_transformer.models import BERTMaskedLM
from keras_transformer.text import packing, tokenizer_checks


@positional_deprecated("top_k", "overwrite")
def export_fill_mask(model, tokenizer, path, *, top_k=5, overwrite=False):
    """Exports a `kt.models.BERTMaskedLM` and its tokenizer as a fill-mask
    SavedModel.

    The SavedModel has one signature, `fill_mask` (also `serving_default`):
    `text` string `(B,)`, each text written with `[MASK]`, to the `top_k`
    likeliest tokens at the text's first `[MASK]`, likeliest first:

    - `token`: string `(B, K)`, the vocabulary's tokens (e.g. `"##s"`);
    - `token_id`: int32 `(B, K)`;
    - `score`: float32 `(B, K)`, their probabilities;
    - `sequence`: string `(B, K)`, the text with that token at the mask,
      detokenized (other masks stay `[MASK]`);
    - `error`: string `(B,)`, empty for a filled row, else why it was not
      (no `[MASK]` in the text, or its first one past the model's
      `max_sequence_length`); such a row has `token` and `sequence` `""`,
      `token_id` -1 and `score` 0, and never fails the request.

    Texts are read as `kt.tasks.FillMask` reads them (`pack_masked_texts`),
    so a served row equals `FillMask.predict(text, top_k)` for a text with
    one mask, and its first mask's answers for a text with several (each
    mask's answers are computed with the others masked, as Hugging Face's
    fill-mask pipeline does).

    Loading the SavedModel needs TensorFlow and `import tensorflow_text`
    (which registers the tokenizer and packing ops), not keras_transformer.

    Args:
        model: a `kt.models.BERTMaskedLM`.
        tokenizer: its `kt.text` tokenizer, with `[CLS]`, `[SEP]` and
            `[MASK]` and no `bos_token` or `eos_token`. Its own
            `sequence_length`, if any, is ignored.
        path: the SavedModel directory to write.
        top_k: K, how many tokens to give for the mask, in `[1, V]`.
        overwrite: replace an existing non-empty `path`.

    Returns:
        The absolute path written.

    Example (loading; see docs/export.md for a complete run):

    ```python
    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops

    fill = tf.saved_model.load(path)
    out = fill.signatures["fill_mask"](text=tf.constant(["The [MASK] is blue."]))
    tokens, scores = out["token"], out["score"]  # (1, top_k) each
    ```
    """
    validation.check_model(model, BERTMaskedLM, "export_fill_mask")
    backbone = model.backbone
    path = savedmodel.check_path(path, overwrite)
    vocabulary_size = backbone.vocabulary_size  # V
    top_k = validation.check_top_k(top_k, vocabulary_size)
    cls_id, sep_id, mask_id = tokenizer_checks.check_fill_mask_tokenizer(
        tokenizer, vocabulary_size, "export_fill_mask"
    )
    sequence_length = backbone.max_sequence_length
    tokenizer = tokenizer_checks.without_sequence_length(tokenizer)
    vocabulary = tokenizer.get_vocabulary()
    # Ids past the tokenizer's vocabulary (a padded embedding) have no token.
    tokens = tf.constant(vocabulary + [""] * (vocabulary_size - len(vocabulary)))

    @tf.function(input_signature=[savedmodel.string_spec("text")])
    def fill_mask(text):
        packed = packing.pack_masked_texts(
            tokenizer, text, sequence_length, cls_id, sep_id, mask_id
        )
        is_mask = packed["token_ids"] == mask_id  # (B, T)
        found = tf.reduce_any(is_mask, axis=1)  # (B,)
        position = tf.argmax(tf.cast(is_mask, tf.int32), axis=1, output_type=tf.int32)
        logits = model(
            {**packed, "mask_positions": position[:, None]}, training=False
        )  # (B, 1, V)
        probabilities = tf.nn.softmax(tf.cast(logits[:, 0], tf.float32), axis=-1)
        score, token_id = tf.math.top_k(probabilities, top_k)  # (B, K)
        sequence = _filled_texts(tokenizer, packed, position, token_id, top_k)
        error = tf.where(
            tf.strings.regex_full_match(text, r"(?s).*\[MASK\].*"),
            f"the first [MASK] lies past the model's max_sequence_length "
            f"({sequence_length} tokens, [CLS] and [SEP] included)",
            "no [MASK] in the text",
        )
        found_k = found[:, None]
        return {
            "token": tf.where(found_k, tf.gather(tokens, token_id), ""),
            "token_id": tf.where(found_k, token_id, -1),
            "score": tf.where(found_k, score, 0.0),
            "sequence": tf.where(found_k, sequence, ""),
            "error": tf.where(found, "", error),
        }

    module = tf.Module()
    module.tokenizer = tokenizer
    module.fill_mask = fill_mask
    signatures = {"serving_default": fill_mask, "fill_mask": fill_mask}
    return savedmodel.save(module, signatures, path)


def _filled_texts(tokenizer, packed, position, token_id, top_k):
    """Each candidate `token_id` `(B, K)` at its text's `position`, the text
    detokenized with [CLS] and [SEP] dropped: strings `(B, K)`."""
    ids = tf.cast(packed["token_ids"], tf.int32)
    at = tf.one_hot(position, tf.shape(ids)[1], on_value=True, off_value=False)
    filled = tf.where(at[:, None], token_id[:, :, None], ids[:, None])  # (B, K, T)
    length = tf.reduce_sum(tf.cast(packed["padding_mask"], tf.int32), axis=1)
    inside = tf.range(tf.shape(ids)[1])[None] < (length - 1)[:, None]
    inside &= tf.range(tf.shape(ids)[1])[None] > 0  # (B, T)
    keep = tf.broadcast_to(inside[:, None], tf.shape(filled))
    kept = tf.ragged.boolean_mask(filled, keep)  # (B, K, None)
    return tf.reshape(
        tokenizer.detokenize(kept.merge_dims(0, 1), skip_special_tokens=True),
        [-1, top_k],
    )
