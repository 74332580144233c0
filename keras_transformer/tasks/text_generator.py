"""TextGenerator: a causal language model and its tokenizer; prompts in,
text out.

Shape legend: B prompts (times `num_return_sequences`), P the longest
prompt, N new tokens, L the model's max_sequence_length.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import export_text_generator, savedmodel
from keras_transformer.generation import generate
from keras_transformer.models import CausalLM
from keras_transformer.tasks import inputs
from keras_transformer.tasks.base import Task
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
        end_token: the token that ends a generation (and separates
            documents in `fit`); `"auto"` takes `<|endoftext|>` or `[END]`,
            whichever the vocabulary has (None if neither); None never ends
            early.
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
    architectures = ("GPT2LMHeadModel",)

    def __init__(self, model, tokenizer, end_token="auto", **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        if end_token == "auto":
            vocabulary = set(tokenizer.get_vocabulary())
            end_token = next((t for t in END_TOKENS if t in vocabulary), None)
        self.end_token = end_token
        self.end_token_id = savedmodel.token_id(
            tokenizer, "end_token", end_token, allow_none=True
        )

    def generate(
        self,
        prompts,
        max_new_tokens=32,
        sampler="greedy",
        seed=None,
        stop=None,
        num_return_sequences=1,
        repetition_penalty=None,
        return_full_text=False,
        stream=False,
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
            prompts: a non-empty string, or a list of them.
            max_new_tokens: the most new tokens per text, in
                `[1, max_sequence_length - 1]`.
            sampler: `"greedy"`, `"temperature"`, `"top_k"`, `"top_p"`,
                `"beam"`, or a `kt.generation.Sampler` (see
                `kt.generation.generate`).
            seed: int seed for the samplers that draw.
            stop: a string or a list of strings; the text is cut before
                the first occurrence of any of them in the generated text
                (one spanning several tokens, or ending inside one,
                included).
            num_return_sequences: texts per prompt (sampling samplers: each
                an independent draw; as Hugging Face, greedy decoding gives
                one).
            repetition_penalty: > 1 discourages ids already in the text
                (Hugging Face's `repetition_penalty`); None is off.
            return_full_text: prefix each text with its prompt.
            stream: not implemented yet (a ValueError).
            **sampler_args: the sampler's arguments (`temperature`, `top_k`,
                `top_p`, `num_beams`, ...) and options
                (`no_repeat_ngram_size`, `min_new_tokens`, ...).

        Returns:
            A string for a string prompt, a list of strings for a list; with
            `num_return_sequences > 1`, a list of that many strings per
            prompt instead of each string.
        """
        single, texts = inputs.check_texts("prompts", prompts)
        stops = inputs.check_stop(stop)
        limit = self.model.max_sequence_length
        max_new_tokens = validation.check_max_new_tokens(max_new_tokens)
        if max_new_tokens >= limit:
            raise ValueError(
                f"`max_new_tokens` must be below the model's max_sequence_length "
                f"({limit}). Received: max_new_tokens={max_new_tokens!r}"
            )
        validation.check_positive_int("num_return_sequences", num_return_sequences)
        validation.check_bool("return_full_text", return_full_text)
        validation.check_bool("stream", stream)
        if stream:
            raise ValueError(
                "`stream=True` is not implemented yet. Received: stream=True"
            )
        if num_return_sequences > 1 and sampler in ("greedy", "beam"):
            raise ValueError(
                f"`num_return_sequences` > 1 needs a sampler that draws; "
                f"{sampler} decoding gives one text per prompt. Received: "
                f"num_return_sequences={num_return_sequences!r} with sampler="
                f"{sampler!r}"
            )
        if repetition_penalty is not None:
            sampler_args["repetition_penalty"] = repetition_penalty
        rows = inputs.tokenize(self.tokenizer, texts, "prompts", limit - max_new_tokens)
        rows = [row for row in rows for _ in range(num_return_sequences)]
        tokens = inputs.pad(rows)  # (B, P)
        out = generate(
            self.model,
            tokens,
            max_new_tokens,
            sampler,
            end_token_id=self.end_token_id,
            seed=seed,
            **sampler_args,
        )  # (B, P + N)
        new = [
            out[i, len(row) : len(row) + max_new_tokens] for i, row in enumerate(rows)
        ]
        generated = [self._text(ids, stops) for ids in new]
        if return_full_text:
            repeated = [t for t in texts for _ in range(num_return_sequences)]
            generated = [p + g for p, g in zip(repeated, generated, strict=True)]
        if num_return_sequences > 1:
            n = num_return_sequences
            generated = [generated[i : i + n] for i in range(0, len(generated), n)]
        return generated[0] if single else generated

    def _text(self, ids, stops):
        """The text of generated `ids` `(N,)`: up to the end token, then cut
        before the first stop string."""
        ids = np.asarray(ids)
        if self.end_token_id is not None:
            ends = np.flatnonzero(ids == self.end_token_id)
            if ends.size:
                ids = ids[: ends[0]]
        ids = ids[ids != 0]
        text = self.tokenizer.detokenize(tf.constant(ids[None], tf.int32))
        return inputs.cut_at_stop(text.numpy()[0].decode("utf-8"), stops)

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

    def fit(self, x=None, y=None, batch_size=8, sequence_length=None, **kwargs):
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
        windows = causal_lm_dataset(
            dataset, self.tokenizer, length, batch_size, end_token=self.end_token
        )
        return super().fit(windows, **kwargs)

    def export(self, path, **options):
        """`kt.export.export_text_generator` of this model and tokenizer,
        with this task's end token; `options` are its arguments
        (`max_new_tokens`, `jit_compile`, `overwrite`, ...). Served, its
        `generated_text` for a prompt is `generate(prompt, n)` (greedy, or
        sampled at the request's temperature)."""
        return export_text_generator(
            self.model, self.tokenizer, path, end_token=self.end_token, **options
        )

    def get_config(self):
        return {**super().get_config(), "end_token": self.end_token}
