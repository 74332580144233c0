"""TextGenerator: a causal language model and its tokenizer; prompts in,
text out.

Shape legend: B prompts (times `num_return_sequences`), P the longest
prompt, N new tokens, L the model's max_sequence_length.
"""

import keras
import numpy as np

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import export_text_generator
from keras_transformer.generation.decode import CONVERSATION_BUFFER
from keras_transformer.generation.stream import (
    CHUNK_SIZE,
    PIECE_SECONDS,
    ChunkedDecoding,
)
from keras_transformer.models import CausalLM
from keras_transformer.tasks import generation_settings as settings
from keras_transformer.tasks import inputs, text_stream
from keras_transformer.tasks.base import Task
from keras_transformer.tasks.generation_request import (
    GenerationOptions,
    GenerationRequest,
)
from keras_transformer.text import causal_lm_dataset
from keras_transformer.training import (
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
)

# Tokens that end a document, in the order they are looked for.
END_TOKENS = ("<|endoftext|>", "[END]")


@keras.saving.register_keras_serializable(package="keras_transformer")
class TextGenerator(Task):
    """A causal LM (`kt.models.GPT2`, any `kt.models.CausalLM`) with its
    tokenizer: `generate` text from prompts, `score` texts, `fit` on raw text.

    Args:
        model: a `kt.models.CausalLM`, e.g. from `kt.models.gpt2` or
            `kt.models.from_pretrained`.
        tokenizer: the `kt.text` tokenizer whose ids the model takes.
        end_token: what ends a generation: a token or its id, or a list of
            them (a text ends at any); `"auto"` takes `<|endoftext|>` or
            `[END]`, whichever the vocabulary has (None if neither), and
            `from_pretrained` the config's `eos_token_id` (one or a list);
            None never ends early. `fit` separates documents with the first.
        generation_config: None, or `generate`'s and `chat`'s defaults as
            a `generation_config.json` holds them (`do_sample`,
            `temperature`, `top_k`, `top_p`, `repetition_penalty`; see
            docs/tasks.md); a call's own arguments win.
        **kwargs: base `keras.Model` arguments (`name`).

    Example:

    >>> import keras_transformer as kt
    >>> tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(["abc"]))
    >>> model = kt.models.gpt2(tokenizer.vocabulary_size(), num_layers=1,
    ...                        num_heads=2, hidden_dim=8, intermediate_dim=16,
    ...                        max_sequence_length=16)
    >>> generator = kt.tasks.TextGenerator(model, tokenizer)
    >>> text = generator.generate("ab", max_new_tokens=4)
    >>> isinstance(text, str)
    True
    """

    model_classes = (CausalLM,)

    def __init__(
        self, model, tokenizer, end_token="auto", generation_config=None, **kwargs
    ):
        super().__init__(model, tokenizer, **kwargs)
        self.generation_config = settings.check(generation_config)
        if isinstance(end_token, str) and end_token == "auto":
            vocabulary = set(tokenizer.get_vocabulary())
            end_token = next((t for t in END_TOKENS if t in vocabulary), None)
        self.end_token, self.end_token_id = inputs.check_end_token(tokenizer, end_token)

    @classmethod
    def _from_folder(cls, model, tokenizer, config, path):
        end, defaults = settings.read(path, config)
        if end is None:
            return cls(model, tokenizer, generation_config=defaults)
        return cls(model, tokenizer, end_token=end, generation_config=defaults)

    @positional_deprecated(
        "max_new_tokens", "sampler", "seed", "stop", "num_return_sequences",
        "repetition_penalty", "return_full_text", "stream", "stream_chunk_size",
    )  # fmt: skip
    def generate(
        self,
        prompts,
        *,
        max_new_tokens=32,
        sampler=None,
        seed=None,
        stop=None,
        num_return_sequences=1,
        repetition_penalty=None,
        return_full_text=False,
        stream=False,
        stream_chunk_size=None,
        **sampler_args,
    ):
        """Continues each prompt with up to `max_new_tokens` new tokens.

        Every prompt of a batch gets up to `max_new_tokens` new tokens,
        whatever the lengths of the others. A prompt longer than the model's
        `max_sequence_length - max_new_tokens` tokens keeps its last ones
        (the text nearest to the continuation), as the exported generator
        does. Generation ends at the end token, which is not part of the
        text.

        Args:
            prompts: a non-empty string, or a list of them (one string when
                streaming).
            max_new_tokens: the most new tokens per text, in
                `[1, max_sequence_length - 1]`; 32 by default, a short
                continuation (`chat` gives a reply 256, a whole answer; the
                seq2seq tasks follow the checkpoint's generation settings,
                as a translation is as long as its source).
            sampler: `"greedy"`, `"temperature"`, `"top_k"`, `"top_p"`,
                `"beam"`, or a `kt.generation.Sampler` (see
                `kt.generation.generate`). None (the default): the task's
                `generation_config` where it samples (a folder's
                `generation_config.json` with `do_sample: true`), else
                greedy, as the seq2seq tasks and `transcribe` read None.
            seed: int seed for the samplers that draw.
            stop: a string or a list of strings; a text ends at the first
                occurrence of any of them in its generated text (one
                spanning several tokens, or ending inside one, included)
                and is cut before it. Generation stops once every text has
                one (checked after every piece, see `stream_chunk_size`;
                beam search and speculative decoding only cut).
            num_return_sequences: texts per prompt (sampling samplers: each
                an independent draw; beam search: the best beams, at most
                `num_beams`; as Hugging Face, greedy decoding gives one).
            repetition_penalty: > 1 discourages ids already in the text
                (Hugging Face's `repetition_penalty`); None: the task's
                `generation_config`'s, else off (1.0 turns it off).
            return_full_text: prefix each text with its prompt.
            stream: return an iterator of text pieces as tokens are made
                (one prompt; not beam search). Joined, the pieces are the
                text `stream=False` returns; a piece never splits a
                character.
            stream_chunk_size: tokens decoded between two pieces (and
                between two stop-string checks). None (the default) starts
                at 16 tokens and grows the pieces toward 0.25 s each (at
                most 8 times per piece), so a fast model is not slowed by
                many small pieces and a slow one still streams every 16
                tokens; an int fixes the size.
            **sampler_args: the sampler's arguments (`temperature`, `top_k`,
                `top_p`, `num_beams`, ...) and options
                (`no_repeat_ngram_size`, `min_new_tokens`, ...).

        Returns:
            A string for a string prompt, a list of strings for a list; with
            `num_return_sequences > 1`, a list of that many strings per
            prompt instead of each string; with `stream=True`, an iterator
            of strings.
        """
        single, texts = inputs.check_texts("prompts", prompts)
        options = GenerationOptions(
            max_new_tokens=max_new_tokens,
            sampler=sampler,
            seed=seed,
            stop=stop,
            num_return_sequences=num_return_sequences,
            repetition_penalty=repetition_penalty,
            return_full_text=return_full_text,
            stream=stream,
            stream_chunk_size=stream_chunk_size,
            sampler_args=sampler_args,
        )
        return self._generate(
            GenerationRequest.of_texts(self, texts, options, single=single)
        )

    def _generate(self, request):
        """The texts (or the iterator of pieces) of a `GenerationRequest`."""
        if request.stream:
            prefixes = request.prefixes
            return self._stream(request, prefixes[0] if prefixes else "")
        if request.uses_pieces and request.stops:  # stop once every text has one
            *_, (generated, _) = self._pieces(request)
        else:
            new = text_stream.generated_ids(
                self.model, request.rows, request.ends, request.max_new_tokens,
                request.decoder, request.seed, request.speculative,
                request.min_buffer_length,
            )  # fmt: skip
            per_row = len(new) // len(request.rows)  # beam search: its best beams
            prompts = [row for row in request.rows for _ in range(per_row)]
            generated = text_stream.texts(self.tokenizer, new, prompts)
            generated = [inputs.cut_at_stop(text, request.stops) for text in generated]
        if request.prefixes:
            generated = [
                p + g for p, g in zip(request.prefixes, generated, strict=True)
            ]
        n = request.num_return_sequences
        if n > 1:
            generated = [generated[i : i + n] for i in range(0, len(generated), n)]
        return generated[0] if request.single else generated

    @positional_deprecated("max_new_tokens", "sampler", "seed", "stop", "stream")
    def chat(
        self, messages, *, max_new_tokens=256, sampler=None,
        seed=None, stop=None, stream=False, **options,
    ):  # fmt: skip
        """The assistant's reply to a conversation.

        The conversation is rendered with the tokenizer's chat template
        (`tokenizer.tokenize_chat(messages, add_generation_prompt=True)`:
        the folder's Jinja template, as transformers renders it), and the
        reply ends at the task's end tokens or the tokenizer's `eos_token`
        (the template's end of a turn).

        Args:
            messages: a list of `{"role": ..., "content": ...}` dicts.
            max_new_tokens: the most tokens the reply may have; 256 by
                default, more than `generate`'s 32: a reply is a whole
                answer, not a continuation.
            sampler: as `generate`'s (default greedy, or the task's
                `generation_config` where it samples).
            seed: as `generate`'s.
            stop: as `generate`'s: strings that end the reply.
            stream: as `generate`'s: an iterator of pieces.
            **options: `generate`'s other arguments (`repetition_penalty`,
                `stream_chunk_size`, the sampler's arguments).

        Returns:
            The reply (a string), or with `stream=True` an iterator of its
            pieces.

        Raises:
            ValueError: the tokenizer has no chat template, or a message
                has no `role` or `content`.
        """
        row, ends = self.chat_prompt(messages)
        options = GenerationOptions(
            max_new_tokens=max_new_tokens,
            sampler=sampler,
            seed=seed,
            stop=stop,
            repetition_penalty=options.pop("repetition_penalty", None),
            stream=stream,
            stream_chunk_size=options.pop("stream_chunk_size", None),
            sampler_args=options,
            # The turns of a conversation reuse one compiled loop.
            min_buffer_length=CONVERSATION_BUFFER,
        )
        return self._generate(GenerationRequest.of_rows(self, row, options, ends=ends))

    def chat_prompt(self, messages, **template_options):
        """The prompt ids `(P,)` int32 of a conversation, rendered by the
        tokenizer's chat template with the assistant's turn opened, and the
        ids that end the reply (`end_ids` and the template's eos token):
        what `chat` decodes, and `kt.serving` too.

        Args:
            messages: the conversation, as `chat` takes it.
            **template_options: passed to the template (`tools=[...]`).

        Raises:
            ValueError: the tokenizer has no chat template, or a message
                has no `role` or `content`.
        """
        if getattr(self.tokenizer, "tokenize_chat", None) is None:
            raise ValueError(
                "`chat` needs a tokenizer with a chat template (a Llama, "
                "Mistral or Qwen2 folder's). Received: tokenizer="
                f"{type(self.tokenizer).__name__}"
            )
        ids = self.tokenizer.tokenize_chat(
            messages, add_generation_prompt=True, **template_options
        )
        return np.asarray(ids, "int32"), self.chat_end_ids()

    def chat_end_ids(self):
        """The ids that end a chat reply: `end_ids` and the chat template's
        eos token."""
        eos = (getattr(self.tokenizer, "special_tokens_map", None) or {}).get(
            "eos_token"
        )
        ends = self.end_ids()
        if isinstance(eos, str) and eos in self.tokenizer.get_vocabulary():
            ends = tuple(dict.fromkeys((*ends, self.tokenizer.token_to_id(eos))))
        return ends

    def end_ids(self):
        """The end ids as a tuple (empty for none)."""
        ids = self.end_token_id
        return () if ids is None else (ids,) if isinstance(ids, int) else ids

    def _pieces(self, request):
        """`text_stream.run` of a chunked decoding of the request's rows:
        yields each row's text so far and whether it is finished, after
        every chunk."""
        chunk_size = request.stream_chunk_size
        decoding = ChunkedDecoding(
            self.model,
            inputs.pad(request.rows),
            request.max_new_tokens,
            request.decoder,
            end_token_id=list(request.ends) or None,
            seed=request.seed,
            chunk_size=chunk_size or CHUNK_SIZE,
            piece_seconds=PIECE_SECONDS if chunk_size is None else None,
            min_buffer_length=request.min_buffer_length,
        )
        self._last_decoding = decoding  # for tests: the steps it ran
        yield from text_stream.run(
            decoding,
            self.tokenizer,
            request.rows,
            request.max_new_tokens,
            request.ends,
            request.stops,
        )

    def _stream(self, request, prefix):
        """The iterator of `generate(stream=True)`: the new stable text of
        the one row after each chunk (the prompt first, if `prefix`)."""
        if prefix:
            yield prefix
        sent = ""
        for found, finished in self._pieces(request):
            text = text_stream.stable(found[0], request.stops, finished[0])
            if not text.startswith(sent):
                # The text so far no longer extends what was sent: a piece
                # already out would be wrong. Never silently stop yielding.
                raise RuntimeError(
                    "A streamed text changed after it was sent: the tokenizer "
                    f"decoded {sent!r} and then {text!r}. Please report this "
                    "with the tokenizer and the prompt."
                )
            if len(text) > len(sent):
                yield text[len(sent) :]
                sent = text

    def score(self, texts, batch_size=32):
        """Log-likelihood and perplexity of each text under the model.

        Each token after the first is predicted from the ones before it
        (as Hugging Face's `labels=input_ids` loss counts them).

        Args:
            texts: a string or a list of strings, each at least 2 tokens and
                at most the model's `max_sequence_length`.
            batch_size: texts per forward pass.

        Returns:
            A dict `{"log_likelihood", "perplexity"}`: floats for a string,
            float64 numpy arrays `(N,)` for a list.
        """
        single, texts = inputs.check_texts("texts", texts)
        validation.check_positive_int("batch_size", batch_size)
        limit = self.model.max_sequence_length
        rows = inputs.tokenize(self.tokenizer, texts, "texts")
        for text, row in zip(texts, rows, strict=True):
            if not 2 <= len(row) <= limit:
                raise ValueError(
                    f"`texts` must each be 2 to {limit} tokens (the model's "
                    f"max_sequence_length); {text!r} is {len(row)}. "
                    f"Received: texts={inputs.preview(texts)}"
                )
        totals, counts = [], []
        for start in range(0, len(rows), batch_size):
            tokens = inputs.pad(rows[start : start + batch_size])  # (b, T)
            logits = np.asarray(self.model(tokens), "float64")[:, :-1]
            logits -= logits.max(-1, keepdims=True)
            log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            targets = tokens[:, 1:]
            picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
            real = targets != 0
            totals.append(np.where(real, picked, 0.0).sum(-1))
            counts.append(real.sum(-1))
        total, count = np.concatenate(totals), np.concatenate(counts)
        result = {"log_likelihood": total, "perplexity": np.exp(-total / count)}
        if single:
            return {k: float(v[0]) for k, v in result.items()}
        return result

    @positional_deprecated("batch_size", "sequence_length")
    def fit(self, x=None, y=None, *, batch_size=8, sequence_length=None, **kwargs):
        """Trains on raw text (next-token loss), or on what `keras.Model.fit`
        takes.

        Texts (a list of strings or a `tf.data.Dataset` of single strings)
        are tokenized in the graph, joined with the end token between
        documents and cut into windows of `sequence_length` (default the
        model's) by `kt.text.causal_lm_dataset`. Without an earlier
        `compile`, the task compiles with AdamW (5e-5) and the masked
        next-token loss and accuracy.

        Args:
            x: texts, or token ids / a dataset of `(ids, labels)` for
                `keras.Model.fit`.
            y: None with texts.
            batch_size: windows per batch (texts).
            sequence_length: window length (texts); the model's
                `max_sequence_length` by default.
            **kwargs: `keras.Model.fit` arguments (`epochs`, `callbacks`...).
        """
        if not self.compiled:
            self.compile(
                optimizer=keras.optimizers.AdamW(5e-5),
                loss=MaskedSparseCategoricalCrossentropy(),
                metrics=[MaskedAccuracy()],
            )
        dataset = inputs.text_dataset(x)
        if dataset is None:
            return super().fit(x, y, batch_size=batch_size, **kwargs)
        if y is not None:
            raise ValueError(f"`y` must be None when `x` is text. Received: y={y!r}")
        if self.end_token is None:
            raise ValueError("Training on text needs an `end_token`. Received: None")
        length = sequence_length or self.model.max_sequence_length
        separator = self.tokenizer.id_to_token(self.end_ids()[0])
        windows = causal_lm_dataset(
            dataset, self.tokenizer, length, batch_size, end_token=separator
        )
        return super().fit(windows, **kwargs)

    def export(self, path, **options):
        """`kt.export.export_text_generator` of this model and tokenizer,
        with this task's end token(s); `options` are its arguments
        (`max_new_tokens`, `jit_compile`, `overwrite`, ...). Served, its
        `generated_text` for a prompt is `generate(prompt, n)` (greedy, or
        sampled at the request's temperature)."""
        return export_text_generator(
            self.model, self.tokenizer, path, end_token=self.end_token, **options
        )

    def get_config(self):
        config = {**super().get_config(), "end_token": self.end_token}
        if self.generation_config:
            config["generation_config"] = dict(self.generation_config)
        return config
