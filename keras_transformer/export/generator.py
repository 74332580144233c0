"""A GPT text generator as a SavedModel: prompts in, generated text out.

Shape legend: B batch, L the model's max_sequence_length (the fixed buffer).
"""

import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import savedmodel
from keras_transformer.generation import decode_function, loop
from keras_transformer.generation.samplers import RequestSampler
from keras_transformer.generation.speculative import speculative_decode_function
from keras_transformer.models import CausalLM
from keras_transformer.text import tokenizer_checks


@positional_deprecated("max_new_tokens", "end_token", "jit_compile", "overwrite")
def export_text_generator(
    model,
    tokenizer,
    path,
    *,
    max_new_tokens=None,
    end_token="[END]",
    jit_compile=True,
    overwrite=False,
    prompt_lookup_num_tokens=None,
    prompt_lookup_max_ngram_size=3,
    temperature=0.0,
):
    """Exports a `gpt2` model and its tokenizer as a string-to-string SavedModel.

        The SavedModel has two signatures. `serving_default` takes the
        strings alone, `prompts` string `(B,)`, and generates with this
        export's settings (`max_new_tokens` and `temperature`), so a client
        that sends only prompts (TF Serving's `{"instances": [...]}`) is
        served. `generate` takes the knobs too:

        - inputs: `prompts` string `(B,)`, `max_new_tokens` int32 scalar,
          `temperature` float32 scalar;
        - outputs: `text` string `(B,)` (the prompt as the model saw it followed by
          the generated text), `generated_text` string `(B,)` (the generated text
          only: the whole text with the decoded prompt cut off, so a
          SentencePiece continuation keeps its leading space) and
          `token_ids` int32 `(B, L)` (prompt and generated ids, 0 after
          them), with `L` the model's `max_sequence_length`; with prompt lookup
          also `lookup_steps` and `lookup_kept`, int32 scalars: the request's
          prompt-lookup steps (model passes over K + 1 positions) and the
          proposals they kept, for the batch as a whole (a serving metric).

        Each request's `max_new_tokens` is clipped to `[0, cap]`, `cap` being this
        function's `max_new_tokens`; every prompt gets exactly that many new tokens
        unless it stops at `end_token` (or one of a list) first. Prompts are tokenized
        in the graph and cut to their last `L - max_new_tokens` tokens (the text nearest
        to the continuation is kept), so prompt and new tokens always fit. An empty
        prompt starts from `end_token`, the separator `causal_lm_dataset`
        puts between documents, so the model begins a new document (with
        `end_token=None` it gives empty text). `temperature <= 0` is greedy
        decoding, with the tokens of `kt.generation.generate(model, ids,
        max_new_tokens, end_token_id=...)`; `temperature > 0` samples from
        softmax(logits / temperature) with a new random seed per call. The end
        token is kept in `token_ids` but not written into the texts.

        Decoding is the KV-cache loop of `kt.generation.generate` (compiled with
        XLA unless `jit_compile=False`), with a fixed buffer of `L` positions so
        the graph has static shapes. With `prompt_lookup_num_tokens=k` it is
        prompt-lookup decoding instead (see `kt.generation.generate`): each step
        proposes the k tokens that followed the latest earlier occurrence of the
        last n tokens and the model checks them in one pass. Greedy requests get
        exactly the same tokens, sampled ones the same distribution; it is
        faster when outputs repeat their prompts (summaries, edits, code).
        Loading the SavedModel needs TensorFlow and
        `import tensorflow_text` (which registers the tokenizer ops), not
        keras_transformer.

        Args:
            model: a `kt.models.GPT2` (or any `kt.models.CausalLM`), built by
                `kt.models.gpt2` or loaded from a `.keras` file.
            tokenizer: a `kt.text` tokenizer whose ids the model was trained on.
                Its own `sequence_length`, if any, is ignored.
            path: the SavedModel directory to write.
            max_new_tokens: the most new tokens a request may ask for; `None` is
                the model's `max_sequence_length - 1`.
            end_token: the token that ends a generation (and starts one from an
                empty prompt), or a list of tokens, any of which ends it (the
                first starts from an empty prompt); `None` never stops early.
            jit_compile: compile the decode loop with XLA. False gives a plain
                TensorFlow loop (slower) for servers without XLA's JIT.
            overwrite: replace an existing non-empty `path`.
            prompt_lookup_num_tokens: tokens proposed per step by prompt lookup;
                None decodes one token per step.
            prompt_lookup_max_ngram_size: the longest n-gram prompt lookup
                matches (it tries n from this down to 1).
            temperature: `serving_default`'s temperature: 0 (the default)
                is greedy decoding, > 0 samples.

        Returns:
            The absolute path written.

        Example (loading; see docs/export.md for a complete run):

        ```python
        import numpy as np
    import tensorflow as tf
        import tensorflow_text  # registers the tokenizer ops

        generator = tf.saved_model.load(path)
        out = generator.signatures["generate"](
            prompts=tf.constant(["Once upon a time"]),
            max_new_tokens=tf.constant(20),
            temperature=tf.constant(0.0),
        )
        text = out["text"].numpy()[0].decode()  # the prompt and its continuation
        # serving_default: the prompts alone, with the export's settings
        out = generator.signatures["serving_default"](tf.constant(["Hi"]))
        ```
    """
    max_new_tokens, end_id = _check_arguments(
        model,
        tokenizer,
        max_new_tokens,
        end_token,
        jit_compile,
        temperature,
        prompt_lookup_num_tokens,
        prompt_lookup_max_ngram_size,
    )
    path = savedmodel.check_path(path, overwrite)
    tokenizer = tokenizer_checks.without_sequence_length(tokenizer)
    decode = tf.function(
        _decode_function(
            model, end_id, prompt_lookup_num_tokens, prompt_lookup_max_ngram_size
        ),
        jit_compile=jit_compile,
    )
    lookup = prompt_lookup_num_tokens is not None
    generate = _generate_function(
        tokenizer, decode, model.max_sequence_length, max_new_tokens, end_id, lookup
    )

    @tf.function(input_signature=[savedmodel.string_spec("prompts")])
    def serve(prompts):
        return generate(
            prompts, tf.constant(max_new_tokens), tf.constant(float(temperature))
        )

    module = tf.Module()
    module.tokenizer = tokenizer
    module.generate = generate
    module.serve = serve
    return savedmodel.save(
        module, {"serving_default": serve, "generate": generate}, path
    )


def _check_arguments(
    model,
    tokenizer,
    max_new_tokens,
    end_token,
    jit_compile,
    temperature,
    prompt_lookup_num_tokens,
    prompt_lookup_max_ngram_size,
):
    """`export_text_generator`'s checks, before any work: its
    `max_new_tokens` (None: all but a first token) and end ids (None, an
    id, or a list)."""
    validation.check_model(model, CausalLM, "export_text_generator")
    limit = model.max_sequence_length  # L
    if max_new_tokens is None:
        max_new_tokens = limit - 1
    max_new_tokens = validation.check_max_new_tokens_fit(
        max_new_tokens, limit, "a prompt's first token"
    )
    validation.check_bool("jit_compile", jit_compile)
    number = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if not number or not 0 <= temperature < float("inf"):
        raise ValueError(
            "`temperature` must be a number >= 0 (0 is greedy). Received: "
            f"temperature={temperature!r}"
        )
    validation.check_positive_int(
        "prompt_lookup_num_tokens", prompt_lookup_num_tokens, allow_none=True
    )
    validation.check_positive_int(
        "prompt_lookup_max_ngram_size", prompt_lookup_max_ngram_size
    )
    tokenizer_checks.check_tokenizer(tokenizer, "tokenizer", model.vocabulary_size)
    end_id = tokenizer_checks.end_token_ids(
        tokenizer, "end_token", end_token, allow_none=True
    )
    return max_new_tokens, end_id


def _decode_function(model, end_id, lookup_tokens, lookup_ngram):
    """`(tokens (B, L), start, stop, seed, temperature) -> (tokens,
    stats)`: stats int32 `(2,)` are prompt lookup's `[steps, kept
    proposals]`, zeros without it."""

    def decode(tokens, start, stop, seed, temperature):
        batch = tf.shape(tokens)[0]
        source = tf.zeros([batch, 1], tf.int32)  # unused by a decoder-only model
        end_token_id = tf.constant(-1 if end_id is None else end_id, tf.int32)
        sampler = RequestSampler(temperature)
        if lookup_tokens is None:
            body = decode_function(model, sampler)
            tokens = body(tokens, source, start, stop, end_token_id, seed)
            return tokens, tf.zeros([2], tf.int32)
        body = speculative_decode_function(
            model, sampler, lookup_tokens, max_ngram_size=lookup_ngram
        )
        return body(tokens, source, start, stop, end_token_id, seed)

    return decode


def _generate_function(tokenizer, decode, limit, cap, end_id, lookup):
    """The `generate` signature: prompts, `max_new_tokens` (clipped to
    `cap`) and temperature in; text, generated text and ids out."""
    # An empty prompt's first token: the (first) end token, or any id if there
    # is none (those rows are blanked afterwards).
    first_id = 1 if end_id is None else int(np.reshape(end_id, [-1])[0])

    @tf.function(
        input_signature=[
            savedmodel.string_spec("prompts"),
            tf.TensorSpec([], tf.int32, name="max_new_tokens"),
            tf.TensorSpec([], tf.float32, name="temperature"),
        ]
    )
    def generate(prompts, max_new_tokens, temperature):
        new = tf.clip_by_value(max_new_tokens, 0, cap)
        ids = tokenizer.tokenize(prompts)[:, -(limit - new) :]  # (B, None)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        tokens = ids.to_tensor(shape=[None, limit])  # (B, L), 0-padded
        empty = lengths == 0
        positions = tf.range(limit)[None]  # (1, L)
        tokens = tf.where(empty[:, None] & (positions == 0), first_id, tokens)
        lengths = tf.maximum(lengths, 1)
        seed = tf.random.uniform([2], maxval=tf.int32.max, dtype=tf.int32)
        tokens, stats = decode(
            tokens,
            tf.reduce_min(lengths),
            tf.reduce_max(lengths) + new,
            seed,
            temperature,
        )
        # Rows decode to the longest prompt's stop: cut each at its own, so a
        # result never depends on the other prompts of the batch.
        tokens = tf.where(positions < (lengths + new)[:, None], tokens, 0)
        if end_id is None:
            tokens = tf.where(empty[:, None], 0, tokens)
            visible = tokens
        else:
            visible = tf.where(loop.is_end(tokens, end_id), 0, tokens)
        text = tokenizer.detokenize(visible, skip_special_tokens=True)
        outputs = {
            "text": text,
            "generated_text": _continuation(tokenizer, text, visible, lengths),
            "token_ids": tokens,
        }
        if lookup:
            outputs["lookup_steps"] = stats[0]
            outputs["lookup_kept"] = stats[1]
        return outputs

    return generate


def _continuation(tokenizer, text, visible, lengths):
    """Each row's generated text: its `text` with the decoded prompt (the
    first `lengths` ids of `visible`) cut off, as `TextGenerator.generate`
    computes it; where the prompt's text is not a prefix (new ids completed
    its last character), the new ids decoded alone."""
    positions = tf.range(tf.shape(visible)[1])[None]
    head = tokenizer.detokenize(
        tf.where(positions < lengths[:, None], visible, 0), skip_special_tokens=True
    )
    size = tf.strings.length(head)  # bytes
    prefix = tf.strings.substr(text, tf.zeros_like(size), size) == head
    rest = tf.strings.substr(text, size, tf.strings.length(text) - size)
    alone = tokenizer.detokenize(
        tf.where(positions >= lengths[:, None], visible, 0), skip_special_tokens=True
    )
    return tf.where(prefix, rest, alone)
