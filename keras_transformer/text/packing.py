"""Packing token ids into the fixed-length inputs each model family takes.

Shape legend: B batch, T sequence length, W windows.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.text import checks
from keras_transformer.text._lazy import tf_text


def as_ragged_ids(ids, name):
    """`(ids as a (B, None) int32 RaggedTensor, whether ids was one sequence)`.

    Dense 2-D ids lose their trailing padding (0).
    """
    ids = checks.as_token_ids(ids, name)
    unbatched = ids.shape.rank == 1
    if unbatched:
        ids = ids[None]
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.RaggedTensor.from_tensor(ids, padding=0)
    return tf.cast(ids, tf.int32), unbatched


def _check_id(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive integer (0 is padding). "
            f"Received: {name}={value!r}"
        )


def pack_segments(segments, sequence_length, cls_id, sep_id):
    """Packs one or more segments as `[CLS] A [SEP] B [SEP]`, padded with 0.

    When the segments are too long, tokens are trimmed from their ends round
    robin (tensorflow-text's `RoundRobinTrimmer`): one token at a time from
    each segment still longer than its share, so a short segment keeps all
    its tokens.

    Args:
        segments: token ids of one segment, or a list/tuple of segments; each
            `(B, None)` ragged, `(B, T)` dense (trailing 0s are padding) or one
            sequence `(T,)`.
        sequence_length: T, the packed length.
        cls_id: the id put first (`[CLS]`).
        sep_id: the id put after each segment (`[SEP]`).

    Returns:
        A dict of `(B, T)` tensors (or `(T,)` for one sequence): int32
        `"token_ids"`, int32 `"segment_ids"` (0 for `[CLS]`, A and its `[SEP]`,
        1 for B and its `[SEP]`, ...; 0 at padding) and bool `"padding_mask"`,
        the inputs of `kt.models.bert`.

    Examples:
        >>> import keras_transformer as kt
        >>> packed = kt.text.pack_segments(([5, 6, 7, 8], [9, 10, 11]), 8, 2, 3)
        >>> packed["token_ids"].numpy().tolist()  # 5 room: A keeps 3, B keeps 2
        [2, 5, 6, 7, 3, 9, 10, 3]
        >>> packed["segment_ids"].numpy().tolist()
        [0, 0, 0, 0, 0, 1, 1, 1]
    """
    if not isinstance(segments, list | tuple):
        segments = [segments]
    if not segments:
        raise ValueError("`segments` must not be empty. Received: segments=[]")
    validation.check_positive_int("sequence_length", sequence_length)
    if sequence_length < len(segments) + 1:
        raise ValueError(
            f"`sequence_length` must leave room for [CLS] and {len(segments)} "
            f"[SEP]. Received: sequence_length={sequence_length}"
        )
    _check_id("cls_id", cls_id)
    _check_id("sep_id", sep_id)
    converted = [as_ragged_ids(s, f"segments[{i}]") for i, s in enumerate(segments)]
    unbatched = converted[0][1]
    trimmer = tf_text.RoundRobinTrimmer(sequence_length - len(segments) - 1)
    trimmed = trimmer.trim([ids for ids, _ in converted])
    token_ids, segment_ids = tf_text.combine_segments(trimmed, cls_id, sep_id)
    token_ids, mask = tf_text.pad_model_inputs(token_ids, sequence_length)
    segment_ids, _ = tf_text.pad_model_inputs(segment_ids, sequence_length)
    packed = {
        "token_ids": token_ids,
        "segment_ids": tf.cast(segment_ids, tf.int32),
        "padding_mask": tf.cast(mask, tf.bool),
    }
    if unbatched:
        packed = {name: value[0] for name, value in packed.items()}
    return packed


def pack_seq2seq(source, target, source_length, target_length, start_id, end_id):
    """Encoder inputs, decoder inputs `[START] y` and labels `y [END]`.

    The source is truncated or padded to `source_length`. The target is first
    cut to `target_length - 1` tokens, so the labels always end with `[END]`
    and the decoder inputs are the labels shifted right by one.

    Args:
        source: source token ids, `(B, None)` ragged, `(B, S)` dense (trailing
            0s are padding) or one sequence `(S,)`.
        target: target token ids, in the same forms.
        source_length: S, the encoder length.
        target_length: T, the decoder length.
        start_id: the `[START]` id.
        end_id: the `[END]` id.

    Returns:
        `(inputs, labels)`: `inputs` is `{"encoder_token_ids": (B, S),
        "decoder_token_ids": (B, T)}` (the inputs of `kt.models.seq2seq`) and
        `labels` is `(B, T)`, all int32 and 0-padded.

    Examples:
        >>> import keras_transformer as kt
        >>> inputs, labels = kt.text.pack_seq2seq([7, 8, 9], [10, 11], 4, 4, 5, 6)
        >>> inputs["decoder_token_ids"].numpy().tolist(), labels.numpy().tolist()
        ([5, 10, 11, 0], [10, 11, 6, 0])
    """
    validation.check_positive_int("source_length", source_length)
    validation.check_positive_int("target_length", target_length)
    if target_length < 2:
        raise ValueError(
            "`target_length` must be at least 2 ([START]/[END] and one token). "
            f"Received: target_length={target_length}"
        )
    _check_id("start_id", start_id)
    _check_id("end_id", end_id)
    source, unbatched = as_ragged_ids(source, "source")
    target, _ = as_ragged_ids(target, "target")
    target = target[:, : target_length - 1]

    def column(value):  # (B, 1), also for empty targets
        return tf.RaggedTensor.from_tensor(tf.fill([target.nrows(), 1], value))

    shape = [None, target_length]
    decoder = tf.concat([column(start_id), target], axis=1).to_tensor(shape=shape)
    labels = tf.concat([target, column(end_id)], axis=1).to_tensor(shape=shape)
    inputs = {
        "encoder_token_ids": source.to_tensor(shape=[None, source_length]),
        "decoder_token_ids": decoder,
    }
    if unbatched:
        return {name: value[0] for name, value in inputs.items()}, labels[0]
    return inputs, labels


def causal_lm_windows(token_ids, sequence_length):
    """Cuts a token stream into next-token-prediction windows.

    Window `w` holds tokens `[w·T, (w+1)·T)` as inputs and the same span
    shifted by one as labels, so every token after the first is a label
    exactly once; the last incomplete window is dropped.

    Args:
        token_ids: a 1-D int stream `(N,)`, e.g. documents joined by `[END]`.
        sequence_length: T.

    Returns:
        `(inputs, labels)`, each int32 `(W, T)` with `W = (N - 1) // T`.

    Examples:
        >>> import keras_transformer as kt
        >>> inputs, labels = kt.text.causal_lm_windows([1, 2, 3, 4, 5, 6, 7, 8], 3)
        >>> inputs.numpy().tolist(), labels.numpy().tolist()
        ([[1, 2, 3], [4, 5, 6]], [[2, 3, 4], [5, 6, 7]])
    """
    validation.check_positive_int("sequence_length", sequence_length)
    stream = tf.convert_to_tensor(token_ids)
    if not stream.dtype.is_integer or stream.shape.rank != 1:
        raise ValueError(
            "`token_ids` must be a 1-D stream of integer ids. Received: "
            f"token_ids with dtype {stream.dtype.name} and shape {stream.shape}"
        )
    stream = tf.cast(stream, tf.int32)
    windows = (tf.size(stream) - 1) // sequence_length
    span = windows * sequence_length
    inputs = tf.reshape(stream[:span], [windows, sequence_length])
    labels = tf.reshape(stream[1 : span + 1], [windows, sequence_length])
    return inputs, labels


def pack_bert_inputs(tokenizer, texts, sequence_length, cls_id, sep_id):
    """`[CLS] A [SEP] (B [SEP])` model inputs `(B, T)` from string batches."""
    segments = [tokenizer.tokenize(text) for text in texts]  # (B, None) each
    return pack_segments(segments, sequence_length, cls_id, sep_id)


def pack_masked_texts(tokenizer, texts, sequence_length, cls_id, sep_id, mask_id):
    """BERT inputs `(B, T)` from strings `(B,)` written with `[MASK]`.

    Each text is split at `[MASK]`, the pieces are tokenized and joined by
    `mask_id` (as Hugging Face's tokenizers treat the mask token), packed as
    `[CLS] text [SEP]` trimmed to `sequence_length`, and the batch cut after
    its longest row (padding changes no output of a BERT model).

    Args:
        tokenizer: a `kt.text` tokenizer without `sequence_length`, bos or
            eos token (each piece is tokenized alone).
        texts: string `(B,)`.
        sequence_length: the packed length before the cut.
        cls_id: the id of `[CLS]`.
        sep_id: the id of `[SEP]`.
        mask_id: the id of `[MASK]`.

    Returns:
        `{"token_ids", "segment_ids", "padding_mask"}`, each `(B, T)`.
    """
    pieces = tf.strings.split(texts, sep=checks.MASK)  # (B, None)
    ids = tokenizer.tokenize(pieces.flat_values)  # (pieces, None)
    # A [MASK] after every piece but the last of its text.
    last = pieces.row_splits[1:] - 1
    masked = tf.ones_like(pieces.flat_values, tf.int64)
    masked = tf.tensor_scatter_nd_update(masked, last[:, None], tf.zeros_like(last))
    masks = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(masked)], mask_id), masked
    )
    ids = tf.concat([ids, tf.cast(masks, ids.dtype)], axis=1)
    ids = pieces.with_flat_values(ids).merge_dims(1, 2)  # (B, None)
    packed = pack_segments(ids, sequence_length, cls_id, sep_id)
    lengths = tf.reduce_sum(tf.cast(packed["padding_mask"], tf.int32), axis=1)
    longest = tf.reduce_max(lengths)
    return {name: value[:, :longest] for name, value in packed.items()}
