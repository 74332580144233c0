"""A seq2seq translator (or summarizer) as a SavedModel: sentences in,
translations out.

Shape legend: B batch, S source length, T target length (both the model's
max_sequence_length, fixed).
"""

import inspect

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import savedmodel
from keras_transformer.generation import decode_function, loop
from keras_transformer.generation.options import NOT_SAMPLER_OPTIONS
from keras_transformer.generation.registry import get_sampler
from keras_transformer.models import Seq2SeqLM
from keras_transformer.text import tokenizer_checks

# The exporters' options, in the order they were positional.
OPTIONS = (
    "max_new_tokens", "num_beams", "length_penalty", "start_token", "end_token",
    "jit_compile", "overwrite", "prefix", "generation_config",
)  # fmt: skip


@positional_deprecated(*OPTIONS)
def export_translator(
    model,
    source_tokenizer,
    target_tokenizer,
    path,
    *,
    max_new_tokens=None,
    num_beams=None,
    length_penalty=None,
    start_token=None,
    end_token=None,
    jit_compile=True,
    overwrite=False,
    prefix="",
    generation_config=None,
):
    """Exports a `seq2seq` model and both tokenizers as a SavedModel.

    The SavedModel has one signature, `translate` (also `serving_default`):
    `sentences` string `(B,)` -> `{"translation": string (B,)}`.

    Each sentence is tokenized in the graph and cut to its first
    `max_sequence_length` tokens (keeping the tokenizer's `eos_token` last,
    as `transformers`' `truncation=True` does). The decoder starts from
    `start_token` and
    stops at `end_token` or after `max_new_tokens` tokens; neither special
    token is written into the translation. An empty sentence
    (no tokens) translates to an empty string. With `num_beams=1` decoding is
    greedy, with the tokens of `kt.generation.generate(model, {...},
    max_new_tokens, end_token_id=...)`; otherwise beam search with
    `length_penalty`, as `generate(..., sampler="beam")`.

    A model with a `generation_config` (from `kt.models.from_pretrained`:
    an imported Marian or BART) decodes with those settings unless an
    argument says otherwise: its `decoder_start_token_id`, end token,
    `max_new_tokens`, beam search rules and options (`min_new_tokens`,
    `no_repeat_ngram_size`, ...), so that the export gives the tokens of
    `generate(model, {...}, **model.generation_config)`.

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
            model's `generation_config` value, else `max_sequence_length -
            1` (the start token takes one).
        num_beams: 1 for greedy decoding, more for beam search; `None`: the
            `generation_config`'s, else 1.
        length_penalty: beam search's length penalty alpha; `None`: the
            `generation_config`'s, else 0.6.
        start_token: the token the decoder starts from; `None`: the model's
            `decoder_start_token_id`, else `"[START]"`.
        end_token: the token that ends a translation, or a list of tokens
            (any of them ends it); `None`: the `generation_config`'s
            `end_token_id` (one id or several), else `"[END]"`.
        jit_compile: compile the decode loop with XLA. False gives a plain
            TensorFlow loop (slower) for servers without XLA's JIT.
        overwrite: replace an existing non-empty `path`.
        prefix: text put before every input in the graph (a T5 task's
            `"summarize: "`).
        generation_config: the settings to decode with instead of the
            model's `generation_config` (a task's, under its `task` entry).

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
    options = _options(locals())
    names = ("export_translator", "translate", "sentences", "translation")
    return _export(model, source_tokenizer, target_tokenizer, path, options, names)


@positional_deprecated(*OPTIONS)
def export_summarizer(
    model,
    tokenizer,
    path,
    *,
    max_new_tokens=None,
    num_beams=None,
    length_penalty=None,
    start_token=None,
    end_token=None,
    jit_compile=True,
    overwrite=False,
    prefix="",
    generation_config=None,
):
    """Exports a `seq2seq` summarizer (an imported BART) as a SavedModel.

    The same graph as `export_translator` with one tokenizer for documents
    and summaries, and the signature `summarize` (also `serving_default`):
    `documents` string `(B,)` -> `{"summary": string (B,)}`. A document
    longer than the model's `max_sequence_length` tokens is cut to it
    (`</s>` kept). An imported BART decodes with its checkpoint's settings
    (beam search, `no_repeat_ngram_size`, `min_new_tokens`, the forced
    `<s>` and `</s>`), giving the tokens of `kt.generation.generate(model,
    {...}, **model.generation_config)`; the other arguments are
    `export_translator`'s.

    Loading it needs TensorFlow and `import tensorflow_text` only.

    Args:
        model: a `kt.models.Seq2Seq` (or any `kt.models.Seq2SeqLM`).
        tokenizer: the `kt.text` tokenizer of documents and summaries.
        path: the SavedModel directory to write.
        max_new_tokens: see `export_translator`.
        num_beams: see `export_translator`.
        length_penalty: see `export_translator`.
        start_token: see `export_translator`.
        end_token: see `export_translator`.
        jit_compile: see `export_translator`.
        overwrite: replace an existing non-empty `path`.
        prefix: text put before every input in the graph (a T5 task's
            `"summarize: "`).
        generation_config: the settings to decode with instead of the
            model's `generation_config` (a task's, under its `task` entry).

    Returns:
        The absolute path written.

    Example (loading; see docs/pretrained.md for a complete run):

    ```python
    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops

    summarizer = tf.saved_model.load(path)
    out = summarizer.signatures["summarize"](documents=tf.constant([text]))
    summary = out["summary"].numpy()[0].decode()
    ```
    """
    options = _options(locals())
    names = ("export_summarizer", "summarize", "documents", "summary")
    return _export(model, tokenizer, tokenizer, path, options, names)


def export_text2text(model, tokenizer, path, **options):
    """Exports a text-to-text model (a FLAN-T5) as a SavedModel: the graph
    of `export_summarizer` with the signature `generate` (also
    `serving_default`): `texts` string `(B,)` -> `{"text": string (B,)}`.
    The keyword options are `export_translator`'s (`prefix`,
    `max_new_tokens`, `num_beams` ...).

    Loading it needs TensorFlow and `import tensorflow_text` only.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"export_text2text takes the options {list(OPTIONS)}. Received: {unknown}"
        )
    options = {**_options({**_DEFAULTS, **options})}
    names = ("export_text2text", "generate", "texts", "text")
    return _export(model, tokenizer, tokenizer, path, options, names)


# The exporters' keyword options, the same for translator and summarizer.
OPTIONS = (
    "max_new_tokens",
    "num_beams",
    "length_penalty",
    "start_token",
    "end_token",
    "jit_compile",
    "overwrite",
    "prefix",
    "generation_config",
)


def _options(arguments):
    """The options among an exporter's `locals()`, taken first thing."""
    return {name: arguments[name] for name in OPTIONS}


def _export(model, source_tokenizer, target_tokenizer, path, options, names):
    caller, signature, input_name, output_name = names
    validation.check_model(model, Seq2SeqLM, caller)
    path = savedmodel.check_path(path, options["overwrite"])
    settings = options["generation_config"]
    if settings is None:
        settings = getattr(model, "generation_config", None)
    settings = dict(settings or {})
    prefix = options["prefix"]
    if not isinstance(prefix, str):
        raise ValueError(f"`prefix` must be a string. Received: prefix={prefix!r}")
    sampler, max_new_tokens = _sampler(model, settings, options)
    validation.check_bool("jit_compile", options["jit_compile"])
    for name, tokenizer, size in (
        ("source_tokenizer", source_tokenizer, model.encoder_vocabulary_size),
        ("target_tokenizer", target_tokenizer, model.decoder_vocabulary_size),
    ):
        tokenizer_checks.check_tokenizer(tokenizer, name, size)
    ids = (
        _special_id(model, target_tokenizer, "start_token", options["start_token"],
                    "[START]", getattr(model, "decoder_start_token_id", None)),
        _special_id(model, target_tokenizer, "end_token", options["end_token"],
                    "[END]", settings.get("end_token_id")),
    )  # fmt: skip
    source_tokenizer = tokenizer_checks.without_sequence_length(source_tokenizer)
    target_tokenizer = tokenizer_checks.without_sequence_length(target_tokenizer)
    decode = tf.function(
        decode_function(model, sampler), jit_compile=options["jit_compile"]
    )
    run = _run_function(
        model, (source_tokenizer, target_tokenizer), decode, prefix, ids,
        max_new_tokens, output_name,
    )  # fmt: skip
    function = tf.function(run, input_signature=[savedmodel.string_spec(input_name)])
    module = tf.Module()
    module.source_tokenizer = source_tokenizer
    module.target_tokenizer = target_tokenizer
    setattr(module, signature, function)
    return savedmodel.save(
        module, {"serving_default": function, signature: function}, path
    )


def _sampler(model, settings, options):
    """The checked `(sampler, max_new_tokens)` of an export: greedy, or
    beam search with `num_beams` and `length_penalty`, under the settings."""
    limit = model.max_sequence_length
    max_new_tokens = options["max_new_tokens"]
    if max_new_tokens is None:
        max_new_tokens = min(settings.get("max_new_tokens", limit - 1), limit - 1)
    max_new_tokens = validation.check_max_new_tokens_fit(
        max_new_tokens, limit, "the start token"
    )
    num_beams, length_penalty = options["num_beams"], options["length_penalty"]
    if num_beams is None:
        num_beams = (
            settings.get("num_beams", 1) if settings.get("sampler") == "beam" else 1
        )
    validation.check_positive_int("num_beams", num_beams)
    if length_penalty is None:
        length_penalty = settings.get("length_penalty", 0.6)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, int | float):
        raise ValueError(
            "`length_penalty` must be a number. "
            f"Received: length_penalty={length_penalty!r}"
        )
    sampler_options = {
        k: v for k, v in settings.items() if k not in NOT_SAMPLER_OPTIONS
    }
    sampler_options.pop("num_beams", None)
    sampler_options.pop("length_penalty", None)
    if num_beams == 1:
        for key in ("rules", "early_stopping"):
            sampler_options.pop(key, None)
        return get_sampler("greedy", **sampler_options), max_new_tokens
    sampler = get_sampler(
        "beam", num_beams=num_beams, length_penalty=length_penalty, **sampler_options
    )
    return sampler, max_new_tokens


def _run_function(model, tokenizers, decode, prefix, ids, max_new_tokens, output):
    """The signature's function: sentences `(B,)` in, `{output: (B,)}`."""
    source_tokenizer, target_tokenizer = tokenizers
    start_id, end_id = ids  # the end: an id, or a list of ids
    limit = model.max_sequence_length  # S and T

    def run(sentences):
        if prefix:  # a T5 task's "summarize: "
            sentences = tf.strings.join([prefix, sentences])
        source = source_tokenizer.tokenize(sentences)
        source = source_tokenizer.truncate(source, limit)
        source = model.pad_source(source.to_tensor(), limit)  # (B, S)
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
        tokens = tf.where(loop.is_end(tokens, end_id), 0, tokens)
        empty = tf.logical_not(tf.reduce_any(model.source_mask(source), axis=1))
        tokens = tf.where(empty[:, None], 0, tokens)
        return {output: target_tokenizer.detokenize(tokens, skip_special_tokens=True)}

    return run


def _special_id(model, tokenizer, name, token, default, model_id):
    """The id of `token` (or the ids of a list of tokens), else the model's
    own id(s), else `default`'s."""
    if token is None and model_id is not None:
        if isinstance(model_id, list | tuple):
            return [int(i) for i in model_id]
        return int(model_id)
    token = default if token is None else token
    if name == "end_token":
        return tokenizer_checks.end_token_ids(tokenizer, name, token)
    return tokenizer_checks.token_id(tokenizer, name, token)


# The options' defaults, as `export_translator` declares them.
_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(export_translator).parameters.items()
    if name in OPTIONS
}
