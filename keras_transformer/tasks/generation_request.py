"""`GenerationRequest` and `Seq2SeqRequest`: one generation call's
options, checked once, before any work is done.

The task builds a request from its call's arguments and decodes it; the
request holds the prompts' ids, the end ids, the decoder (a
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
class GenerationRequest:
    """A checked generation call.

    Attributes:
        single: the call had one prompt (a string): one text comes back.
        texts: the prompts' texts (`[""]` for a chat).
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
        min_buffer_length: `generate`'s (a chat's is larger: its turns
            reuse one compiled loop), or None.
    """

    single: bool
    texts: list
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
    def of_call(
        cls,
        task,
        texts,
        *,
        single,
        rows=None,
        ends=None,
        max_new_tokens=32,
        sampler=settings.DEFAULT_SAMPLER,
        seed=None,
        stop=None,
        num_return_sequences=1,
        repetition_penalty=None,
        return_full_text=False,
        stream=False,
        stream_chunk_size=None,
        sampler_args=None,
        min_buffer_length=None,
    ):
        """The request of a `TextGenerator` call: every argument checked
        (a ValueError naming it) before the prompts are tokenized.

        Args:
            task: the `TextGenerator` (its model, tokenizer, end ids and
                `generation_config`).
            texts: the prompts' texts.
            single: whether the call had one prompt.
            rows: the prompts' ids where the call made them (a chat), else
                None: `texts` are tokenized.
            ends: the end ids; None: the task's.
            max_new_tokens: the most new tokens per text.
            sampler: a sampler name or `kt.generation.Sampler`.
            seed: the samplers' seed.
            stop: stop strings.
            num_return_sequences: texts per prompt.
            repetition_penalty: None (the task's), or > 1.
            return_full_text: prefix each text with its prompt.
            stream: return an iterator of pieces.
            stream_chunk_size: tokens per piece (None: adaptive).
            sampler_args: the sampler's arguments and options (all as
                `TextGenerator.generate` takes them).
            min_buffer_length: `generate`'s, or None.
        """
        stops = inputs.check_stop(stop)
        limit = task.model.max_sequence_length
        max_new_tokens = validation.check_max_new_tokens(max_new_tokens)
        if max_new_tokens >= limit:
            raise ValueError(
                f"`max_new_tokens` must be below the model's max_sequence_length "
                f"({limit}). Received: max_new_tokens={max_new_tokens!r}"
            )
        validation.check_positive_int("num_return_sequences", num_return_sequences)
        n = num_return_sequences
        validation.check_bool("return_full_text", return_full_text)
        validation.check_bool("stream", stream)
        validation.check_positive_int(
            "stream_chunk_size", stream_chunk_size, allow_none=True
        )
        sampler, repetition_penalty, sampler_args = settings.of_call(
            task.generation_config,
            sampler,
            repetition_penalty,
            dict(sampler_args or {}),
        )
        if repetition_penalty is not None:
            sampler_args["repetition_penalty"] = repetition_penalty
        speculative = {k: sampler_args.pop(k) for k in SPECULATIVE if k in sampler_args}
        decoder = get_sampler(sampler, **sampler_args)
        if stream and not (decoder.uses_shared_loop and not speculative):
            raise ValueError(
                "`stream=True` decodes with the greedy, temperature, top_k or "
                "top_p sampler, without speculative decoding. Received: "
                f"stream=True with sampler={sampler!r}"
                + (f" and {sorted(speculative)}" if speculative else "")
            )
        if stream and not single:
            raise ValueError(
                "`stream=True` streams one prompt, a string. Received: "
                f"prompts={inputs.preview(texts)}"
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
        if rows is None:
            rows = inputs.tokenize(task.tokenizer, texts, "prompts")
        rows = [row[-(limit - max_new_tokens) :] for row in rows]
        if beams == 1:
            rows = [row for row in rows for _ in range(n)]
        return cls(
            single=single,
            texts=texts,
            rows=rows,
            ends=task.end_ids() if ends is None else ends,
            max_new_tokens=max_new_tokens,
            decoder=decoder,
            seed=seed,
            stops=stops,
            num_return_sequences=n,
            prefixes=[t for t in texts for _ in range(n)] if return_full_text else None,
            stream=stream,
            stream_chunk_size=stream_chunk_size,
            speculative=speculative,
            min_buffer_length=min_buffer_length,
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
