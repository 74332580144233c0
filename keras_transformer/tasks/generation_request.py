"""`GenerationOptions`, `GenerationRequest` and `Seq2SeqRequest`: one
generation call's options, checked once, before any work is done.

The task gathers its call's keyword arguments into one frozen
`GenerationOptions`, builds a request from it and decodes it; the request
holds the prompts' ids, the end ids, the decoder (a
`kt.generation.Sampler`, the task's `generation_config` applied) and what
the texts become afterwards; a `Seq2SeqRequest` the sources' ids and
`generate`'s options. A new option (a forced prompt, a task prefix) is one
field here.

Shape legend: B prompts (times `num_return_sequences`), P a prompt's ids.
"""

import dataclasses

from keras_transformer import _validation as validation
from keras_transformer.generation import get_sampler
from keras_transformer.tasks import generation_settings as settings
from keras_transformer.tasks import inputs

# `generate` keywords that decode otherwise than the one-token loop.
SPECULATIVE = (
    "draft_model",
    "num_speculative_tokens",
    "prompt_lookup_num_tokens",
    "prompt_lookup_max_ngram_size",
)


@dataclasses.dataclass(frozen=True)
class GenerationOptions:
    """How a `TextGenerator` call decodes, one value from the task to the
    loop: `generate` and `chat` build it from their keyword arguments (same
    names, same meaning) and a server can build one per request.

    Creating one checks every option that needs no model (a ValueError
    naming it); `GenerationRequest` checks the rest against the task.

    Attributes:
        max_new_tokens: the most new tokens per text.
        sampler: a sampler name or `kt.generation.Sampler`; None, the
            task's `generation_config` decides (greedy unless it samples).
        seed: the samplers' seed, or None.
        stop: stop strings (a string or a list), or None.
        num_return_sequences: texts per prompt.
        repetition_penalty: None (the task's), or a number > 0.
        return_full_text: prefix each text with its prompt.
        stream: return an iterator of pieces.
        stream_chunk_size: tokens per piece, or None (adaptive).
        sampler_args: the sampler's arguments and options, a dict
            (`temperature`, `top_k`, `no_repeat_ngram_size`, ...).
        min_buffer_length: `generate`'s (a chat's is larger: its turns
            reuse one compiled loop), or None.

    Example:
        >>> import keras_transformer as kt
        >>> options = kt.tasks.GenerationOptions(max_new_tokens=8, stop="###")
        >>> options.stops, options.max_new_tokens
        (('###',), 8)
    """

    max_new_tokens: int = 32
    sampler: object = None
    seed: object = None
    stop: object = None
    num_return_sequences: int = 1
    repetition_penalty: object = None
    return_full_text: bool = False
    stream: bool = False
    stream_chunk_size: object = None
    sampler_args: dict = dataclasses.field(default_factory=dict)
    min_buffer_length: object = None

    def __post_init__(self):
        validation.check_max_new_tokens(self.max_new_tokens)
        validation.check_positive_int("num_return_sequences", self.num_return_sequences)
        validation.check_bool("return_full_text", self.return_full_text)
        validation.check_bool("stream", self.stream)
        validation.check_positive_int(
            "stream_chunk_size", self.stream_chunk_size, allow_none=True
        )
        inputs.check_stop(self.stop)
        if not isinstance(self.sampler_args, dict):
            raise ValueError(
                "`sampler_args` must be a dict. "
                f"Received: sampler_args={self.sampler_args!r}"
            )

    @property
    def stops(self):
        """The stop strings, checked, as a tuple (none: empty)."""
        return inputs.check_stop(self.stop)

    def decoder(self, task):
        """`(sampler name or instance, kt.generation.Sampler, speculative
        arguments)`: the call's sampler with the task's `generation_config`
        where the call leaves it out."""
        sampler, repetition_penalty, sampler_args = settings.of_call(
            task.generation_config,
            self.sampler,
            self.repetition_penalty,
            dict(self.sampler_args),
        )
        if repetition_penalty is not None:
            sampler_args["repetition_penalty"] = repetition_penalty
        speculative = {k: sampler_args.pop(k) for k in SPECULATIVE if k in sampler_args}
        return sampler, get_sampler(sampler, **sampler_args), speculative


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    """A checked generation call: `GenerationOptions` applied to a task's
    prompts (`of_texts`) or to the ids a chat rendered (`of_rows`).

    Attributes:
        single: the call had one prompt (a string): one text comes back.
        rows: the prompts' ids, cut to their last `max_sequence_length -
            max_new_tokens` ones and repeated `num_return_sequences` times
            (sampling; beam search returns its best beams itself).
        ends: the ids that end a text.
        max_new_tokens: the most new tokens per text.
        decoder: the `kt.generation.Sampler`.
        seed: the samplers' seed, or None.
        stops: the stop strings (none: empty).
        num_return_sequences: texts per prompt.
        prefixes: per row, the text put before its generated text
            (`return_full_text`), or None.
        stream: return an iterator of pieces.
        stream_chunk_size: tokens per piece, or None (adaptive).
        speculative: the speculative or prompt-lookup decoding arguments.
        min_buffer_length: `generate`'s, or None.
    """

    single: bool
    rows: list
    ends: tuple
    max_new_tokens: int
    decoder: object
    seed: object
    stops: tuple
    num_return_sequences: int
    prefixes: object
    stream: bool
    stream_chunk_size: object
    speculative: dict
    min_buffer_length: object = None

    @property
    def uses_pieces(self):
        """Whether it decodes in chunks (streaming, stop strings)."""
        return self.decoder.uses_shared_loop and not self.speculative

    @classmethod
    def of_texts(cls, task, texts, options, *, single):
        """The request of `TextGenerator.generate`: every option checked
        (a ValueError naming it) before the prompts are tokenized.

        Args:
            task: the `TextGenerator` (its model, tokenizer, end ids and
                `generation_config`).
            texts: the prompts' texts.
            options: a `GenerationOptions`.
            single: whether the call had one prompt.
        """
        if options.stream and not single:
            raise ValueError(
                "`stream=True` streams one prompt, a string. Received: "
                f"prompts={inputs.preview(texts)}"
            )
        n = options.num_return_sequences
        prefixes = [t for t in texts for _ in range(n)]
        return cls._of(
            task,
            options,
            lambda: inputs.tokenize(task.tokenizer, texts, "prompts"),
            single=single,
            ends=task.end_ids(),
            prefixes=prefixes if options.return_full_text else None,
        )

    @classmethod
    def of_rows(cls, task, row, options, *, ends):
        """The request of one prompt already in ids (`chat`'s rendered
        conversation, ending at `ends`)."""
        return cls._of(task, options, lambda: [row], single=True, ends=ends)

    @classmethod
    def _of(cls, task, options, make_rows, *, single, ends, prefixes=None):
        limit = task.model.max_sequence_length
        max_new_tokens = options.max_new_tokens
        if max_new_tokens >= limit:
            raise ValueError(
                f"`max_new_tokens` must be below the model's max_sequence_length "
                f"({limit}). Received: max_new_tokens={max_new_tokens!r}"
            )
        stops = options.stops
        sampler, decoder, speculative = options.decoder(task)
        stream, n = options.stream, options.num_return_sequences
        if stream and not (decoder.uses_shared_loop and not speculative):
            raise ValueError(
                "`stream=True` decodes with the greedy, temperature, top_k or "
                "top_p sampler, without speculative decoding. Received: "
                f"stream=True with sampler={sampler!r}"
                + (f" and {sorted(speculative)}" if speculative else "")
            )
        beams = decoder.num_rows  # beam search: its beams
        if n > 1 and decoder.is_greedy or n > beams > 1 or (n > 1 and stream):
            raise ValueError(
                f"`num_return_sequences` must be 1 with greedy decoding or "
                f"streaming, and at most `num_beams` with beam search. Received: "
                f"num_return_sequences={n!r} with sampler={sampler!r}"
                + (f" (num_beams={beams})" if beams > 1 else "")
                + (" and stream=True" if stream else "")
            )
        if beams > 1:  # beam search returns its n best beams itself
            decoder = decoder.returning(n)
        rows = [row[-(limit - max_new_tokens) :] for row in make_rows()]
        if beams == 1:
            rows = [row for row in rows for _ in range(n)]
        return cls(
            single=single,
            rows=rows,
            ends=ends,
            max_new_tokens=max_new_tokens,
            decoder=decoder,
            seed=options.seed,
            stops=stops,
            num_return_sequences=n,
            prefixes=prefixes,
            stream=stream,
            stream_chunk_size=options.stream_chunk_size,
            speculative=speculative,
            min_buffer_length=options.min_buffer_length,
        )


@dataclasses.dataclass(frozen=True)
class Seq2SeqRequest:
    """A checked `Translator.translate` or `Summarizer.summarize` call.

    Attributes:
        single: the call had one text (a string): one text comes back.
        texts: the source texts.
        rows: each text's source ids, cut to the model's length.
        empty: bool per text: no source ids (its output is `""`).
        options: `kt.generation.generate`'s keyword arguments
            (`max_new_tokens`, `sampler`, `end_token_id` and the sampler's
            options: the model's `generation_config` under the call's).
        seed: the samplers' seed, or None.
    """

    single: bool
    texts: list
    rows: list
    empty: object
    options: dict
    seed: object
