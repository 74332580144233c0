"""tf.data pipelines from raw text to batches each model family trains on.

Each function batches the raw strings first, then tokenizes, packs (and
masks) whole batches in one `map`, in parallel, and prefetches.
"""

import math

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text import checks
from keras_transformer.text.masking import MaskedLMMaskGenerator
from keras_transformer.text.packing import (
    as_ragged_ids,
    pack_segments,
    pack_seq2seq,
)
from keras_transformer.text.tokenizer import Tokenizer

AUTOTUNE = tf.data.AUTOTUNE


def _check(tokenizer, sequence_length, batch_size, name="tokenizer"):
    if not isinstance(tokenizer, Tokenizer):
        raise ValueError(
            f"`{name}` must be a keras_transformer.text tokenizer. "
            f"Received: {name}={tokenizer!r}"
        )
    validation.check_positive_int("sequence_length", sequence_length)
    validation.check_positive_int("batch_size", batch_size)


def _tokens(tokenizer, texts):
    return as_ragged_ids(tokenizer.tokenize(texts), "tokens")[0]  # (B, None)


def masked_lm_dataset(
    dataset,
    tokenizer,
    sequence_length,
    batch_size,
    mask_selection_rate=0.15,
    mask_selection_length=None,
):
    """Masked-LM pretraining batches for `kt.models.bert_masked_lm`.

    Each text is packed as `[CLS] text [SEP]` (trimmed to `sequence_length`),
    then corrupted by `kt.text.MaskedLMMaskGenerator` (80% `[MASK]`, 10%
    random, 10% unchanged); reserved tokens are never selected.

    Args:
        dataset: a `tf.data.Dataset` of single strings.
        tokenizer: a `kt.text` tokenizer with `[CLS]`, `[SEP]` and `[MASK]`.
        sequence_length: T.
        batch_size: texts per batch.
        mask_selection_rate: share of tokens to predict.
        mask_selection_length: P, predictions per sequence; defaults to
            `ceil(mask_selection_rate * sequence_length)`.

    Returns:
        A dataset of `(features, labels, sample_weights)`: `features` has
        `"token_ids"`, `"segment_ids"`, `"padding_mask"` `(B, T)` and
        `"mask_positions"` `(B, P)`; `labels` are the original ids `(B, P)`
        and `sample_weights` `(B, P)` are 0 at unused prediction slots. Train
        with `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`
        and `weighted_metrics`.
    """
    checks.check_string_dataset(dataset)
    _check(tokenizer, sequence_length, batch_size)
    if mask_selection_length is None:
        mask_selection_length = math.ceil(mask_selection_rate * sequence_length)
    cls_id = checks.special_token_id(tokenizer, checks.CLS, "masked_lm_dataset")
    sep_id = checks.special_token_id(tokenizer, checks.SEP, "masked_lm_dataset")
    masker = MaskedLMMaskGenerator(
        tokenizer.vocabulary_size(),
        checks.special_token_id(tokenizer, checks.MASK, "masked_lm_dataset"),
        mask_selection_length,
        mask_selection_rate,
        unselectable_token_ids=tokenizer.reserved_token_ids(),
    )

    def pack(texts):
        return pack_segments(_tokens(tokenizer, texts), sequence_length, cls_id, sep_id)

    def mask(packed):
        masked = masker(packed["token_ids"])
        features = {**packed, "token_ids": masked["token_ids"]}
        features["mask_positions"] = masked["mask_positions"]
        return features, masked["mask_ids"], masked["mask_weights"]

    # Tokenizing runs in parallel; masking draws its random numbers batch by
    # batch in order, so the masks follow `keras.utils.set_random_seed`.
    return (
        dataset.batch(batch_size)
        .map(pack, num_parallel_calls=AUTOTUNE)
        .map(mask)
        .prefetch(AUTOTUNE)
    )


def classification_dataset(dataset, tokenizer, sequence_length, batch_size):
    """Classification batches for `kt.models.bert_classifier`.

    Args:
        dataset: a `tf.data.Dataset` of `(text, label)` or of
            `((text_a, text_b), label)` for sentence pairs; labels are ints.
        tokenizer: a `kt.text` tokenizer with `[CLS]` and `[SEP]`.
        sequence_length: T; pairs are trimmed round robin.
        batch_size: examples per batch.

    Returns:
        A dataset of `(features, labels)`: `features` has `"token_ids"`,
        `"segment_ids"` and `"padding_mask"` `(B, T)` (`[CLS] A [SEP] B
        [SEP]`); `labels` are `(B,)`.
    """
    _check(tokenizer, sequence_length, batch_size)
    spec = dataset.element_spec if isinstance(dataset, tf.data.Dataset) else None
    texts_spec = spec[0] if isinstance(spec, tuple) and len(spec) == 2 else None
    pair = isinstance(texts_spec, tuple) and len(texts_spec) == 2
    leaves = texts_spec if pair else (texts_spec,)
    if texts_spec is None or not all(map(checks.is_string_spec, leaves)):
        raise ValueError(
            "`dataset` must be a tf.data.Dataset of (text, label) or "
            f"((text_a, text_b), label). Received: {dataset!r}"
        )
    cls_id = checks.special_token_id(tokenizer, checks.CLS, "classification_dataset")
    sep_id = checks.special_token_id(tokenizer, checks.SEP, "classification_dataset")

    def prepare(texts, labels):
        segments = [_tokens(tokenizer, t) for t in (texts if pair else (texts,))]
        return pack_segments(segments, sequence_length, cls_id, sep_id), labels

    return (
        dataset.batch(batch_size)
        .map(prepare, num_parallel_calls=AUTOTUNE)
        .prefetch(AUTOTUNE)
    )


def causal_lm_dataset(
    dataset, tokenizer, sequence_length, batch_size, end_token=checks.END
):
    """Next-token batches for `kt.models.gpt2` from a stream of documents.

    Every text is tokenized and followed by `end_token`; the resulting stream is
    cut into consecutive windows of `sequence_length + 1` tokens (the last
    incomplete one is dropped), each giving inputs `w[:-1]` and labels
    `w[1:]`. Windows cross document boundaries, as in GPT-2 training.

    Args:
        dataset: a `tf.data.Dataset` of single strings (documents or lines).
        tokenizer: a `kt.text` tokenizer with `end_token`.
        sequence_length: T, the model's context.
        batch_size: windows per batch.
        end_token: the token between documents (GPT-2's is
            `<|endoftext|>`).

    Returns:
        A dataset of `(token_ids, labels)`, both int32 `(B, T)`.
    """
    checks.check_string_dataset(dataset)
    _check(tokenizer, sequence_length, batch_size)
    end_id = checks.special_token_id(tokenizer, end_token, "causal_lm_dataset")

    def stream(texts):
        tokens = _tokens(tokenizer, texts)
        ends = tf.RaggedTensor.from_tensor(tf.fill([tokens.nrows(), 1], end_id))
        return tf.concat([tokens, ends], axis=1).flat_values  # (N,)

    windows = (
        dataset.batch(256)
        .map(stream, num_parallel_calls=AUTOTUNE)
        .unbatch()
        .batch(sequence_length + 1, drop_remainder=True)
    )
    return windows.map(lambda w: (w[:-1], w[1:])).batch(batch_size).prefetch(AUTOTUNE)


def translation_dataset(
    dataset,
    tokenizer,
    sequence_length,
    batch_size,
    target_tokenizer=None,
    target_sequence_length=None,
):
    """Translation batches for `kt.models.seq2seq`.

    Args:
        dataset: a `tf.data.Dataset` of `(source, target)` strings.
        tokenizer: the source tokenizer (and the target's unless
            `target_tokenizer` is given).
        sequence_length: S, the source length.
        batch_size: pairs per batch.
        target_tokenizer: a tokenizer with `[START]` and `[END]` for targets.
        target_sequence_length: T, the target length (default S).

    Returns:
        A dataset of `(inputs, labels)`: `inputs` is `{"encoder_token_ids":
        (B, S), "decoder_token_ids": (B, T)}` with decoder inputs
        `[START] y`, and `labels` `(B, T)` are `y [END]` (see
        `kt.text.pack_seq2seq`).
    """
    validation.check_positive_int(
        "target_sequence_length", target_sequence_length, allow_none=True
    )
    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
    target_sequence_length = target_sequence_length or sequence_length
    _check(tokenizer, sequence_length, batch_size)
    _check(target_tokenizer, target_sequence_length, batch_size, "target_tokenizer")
    spec = dataset.element_spec if isinstance(dataset, tf.data.Dataset) else None
    if not (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(map(checks.is_string_spec, spec))
    ):
        raise ValueError(
            "`dataset` must be a tf.data.Dataset of (source, target) strings. "
            f"Received: {dataset!r}"
        )
    start_id = checks.special_token_id(target_tokenizer, checks.START, "translation")
    end_id = checks.special_token_id(target_tokenizer, checks.END, "translation")

    def prepare(source, target):
        return pack_seq2seq(
            _tokens(tokenizer, source),
            _tokens(target_tokenizer, target),
            sequence_length,
            target_sequence_length,
            start_id,
            end_id,
        )

    return (
        dataset.batch(batch_size)
        .map(prepare, num_parallel_calls=AUTOTUNE)
        .prefetch(AUTOTUNE)
    )
