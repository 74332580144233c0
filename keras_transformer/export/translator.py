"""A seq2seq translator as a SavedModel: sentences in, translations out.

Shape legend: B batch, S source length, T target length (both the model's
max_sequence_length, fixed).
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import common
from keras_transformer.generation import decode_function
from keras_transformer.generation.samplers import BeamSampler, GreedySampler
from keras_transformer.models import Seq2SeqLM


def export_translator(
    model,
    source_tokenizer,
    target_tokenizer,
    path,
    max_new_tokens=None,
    num_beams=1,
    length_penalty=0.6,
    start_token="[START]",
    end_token="[END]",
    jit_compile=True,
    overwrite=False,
):
    """Exports a `seq2seq` model and both tokenizers as a SavedModel.

    The SavedModel has one signature, `translate` (also `serving_default`):
    `sentences` string `(B,)` -> `{"translation": string (B,)}`.

    Each sentence is tokenized in the graph and cut to its first
    `max_sequence_length` tokens. The decoder starts from `start_token` and
    stops at `end_token` or after `max_new_tokens` tokens; neither special
    token is written into the translation. An empty sentence
    (no tokens) translates to an empty string. With `num_beams=1` decoding is
    greedy, with the tokens of `kt.generation.generate(model, {...},
    max_new_tokens, end_token_id=...)`; otherwise beam search with
    `length_penalty`, as `generate(..., sampler="beam")`.

    Loading the SavedModel needs TensorFlow and `import tensorflow_text`
    (which registers the tokenizer ops), not keras_transformer.

    Args:
        model: a `kt.models.Seq2Seq` (or any `kt.models.Seq2SeqLM`), built by
            `kt.models.seq2seq` or loaded from a `.keras` file.
        source_tokenizer: the `kt.text` tokenizer of the source language.
        target_tokenizer: the `kt.text` tokenizer of the target language (it
            may be the same object); it needs `start_token` and `end_token`.
        path: the SavedModel directory to write.
        max_new_tokens: the longest translation in tokens; `None` is the
            model's `max_sequence_length - 1` (the start token takes one).
        num_beams: 1 for greedy decoding, more for beam search.
        length_penalty: beam search's length penalty alpha.
        start_token: the token the decoder starts from.
        end_token: the token that ends a translation.
        jit_compile: compile the decode loop with XLA. False gives a plain
            TensorFlow loop (slower) for servers without XLA's JIT.
        overwrite: replace an existing non-empty `path`.

    Returns:
        The absolute path written.

    Example (loading; see docs/export.md for a complete run):

    ```python
    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops

    translator = tf.saved_model.load(path)
    out = translator.signatures["translate"](sentences=tf.constant(["hello"]))
    translation = out["translation"].numpy()[0].decode()
    ```
    """
    common.check_model(model, Seq2SeqLM, "export_translator")
    source_limit = limit = model.max_sequence_length  # S and T
    path = common.check_path(path, overwrite)
    if max_new_tokens is None:
        max_new_tokens = limit - 1
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or not 1 <= max_new_tokens < limit
    ):
        raise ValueError(
            "`max_new_tokens` must be an integer in [1, max_sequence_length - 1] "
            f"(the model's max_sequence_length is {limit}, and the start token "
            f"takes one position). Received: max_new_tokens={max_new_tokens!r}"
        )
    validation.check_positive_int("num_beams", num_beams)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, int | float):
        raise ValueError(
            "`length_penalty` must be a number. "
            f"Received: length_penalty={length_penalty!r}"
        )
    validation.check_bool("jit_compile", jit_compile)
    sampler = (
        GreedySampler() if num_beams == 1 else BeamSampler(num_beams, length_penalty)
    )
    common.check_tokenizer(
        source_tokenizer,
        "source_tokenizer",
        model.encoder_vocabulary_size,
    )
    common.check_tokenizer(
        target_tokenizer,
        "target_tokenizer",
        model.decoder_vocabulary_size,
    )
    start_id = common.token_id(target_tokenizer, "start_token", start_token)
    end_id = common.token_id(target_tokenizer, "end_token", end_token)
    source_tokenizer = common.without_sequence_length(source_tokenizer)
    target_tokenizer = common.without_sequence_length(target_tokenizer)
    decode = tf.function(decode_function(model, sampler), jit_compile=jit_compile)

    @tf.function(input_signature=[common.string_spec("sentences")])
    def translate(sentences):
        source = source_tokenizer.tokenize(sentences)[:, :source_limit]
        source = source.to_tensor(shape=[None, source_limit])  # (B, S), 0-padded
        batch = tf.shape(source)[0]
        tokens = tf.pad(tf.fill([batch, 1], start_id), [[0, 0], [0, limit - 1]])
        tokens = decode(
            tokens,  # (B, T): the start token, then room
            source,
            tf.constant(1),
            tf.constant(1 + max_new_tokens),
            tf.constant(end_id),
            tf.zeros([2], tf.int32),  # greedy and beam search draw nothing
        )
        tokens = tokens[:, 1:]
        tokens = tf.where(tokens == end_id, 0, tokens)
        empty = tf.reduce_all(source == 0, axis=1)
        tokens = tf.where(empty[:, None], 0, tokens)
        return {"translation": target_tokenizer.detokenize(tokens)}

    module = tf.Module()
    module.source_tokenizer = source_tokenizer
    module.target_tokenizer = target_tokenizer
    module.translate = translate
    return common.save(
        module, {"serving_default": translate, "translate": translate}, path
    )
