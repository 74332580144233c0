"""Seq2seq tasks: `Translator` (sentences in, translations out) and
`Summarizer` (documents in, summaries out), over a `kt.models.Seq2SeqLM`
(such as `kt.models.Seq2Seq`).

Both decode as `kt.export.export_translator` does, so a task and its
export give the same text: each text is tokenized and cut to the model's
`max_sequence_length` (`tokenizer.truncate`, which keeps `eos_token`), the
decoder starts from the model's `decoder_start_token_id` (else `[START]`),
`kt.generation.generate` runs with the model's `generation_config` (an
imported Marian's or BART's beam search) under the caller's arguments, and
the ids up to the end token are detokenized (a text that gives no tokens
gives "", as served).

Shape legend: B batch, S source length.
"""

import keras

from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import export_summarizer, export_translator
from keras_transformer.tasks.seq2seq_task import Seq2SeqTask, pairs_dataset
from keras_transformer.text import tokenizer_checks

__all__ = ["Summarizer", "Translator", "Seq2SeqTask", "pairs_dataset"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class Translator(Seq2SeqTask):
    """A seq2seq model and its tokenizers: sentences in, translations out.

    Args:
        model: a `kt.models.Seq2SeqLM` (such as `kt.models.Seq2Seq`).
        source_tokenizer: the `kt.text` tokenizer of the source language.
        target_tokenizer: the tokenizer of the target language; None: the
            source's. Without the model's `decoder_start_token_id` and
            `generation_config` it needs `[START]` and `[END]`.
        task: the entry of the model's `task_settings` (a T5's
            `task_specific_params`, such as `"translation_en_to_fr"`) whose
            prefix and generation settings to use; None: the first
            `"translation..."` entry, if any. The name is Hugging Face's
            pipelines' (`pipeline("translation_en_to_fr")`); it is chosen
            once, with the model, where `SpeechRecognizer.transcribe`'s
            `task` (transformers' Whisper `generate` name) picks
            transcribe or translate per call.
        **kwargs: base `keras.Model` arguments (`name`).

    Example:
        >>> import keras_transformer as kt
        >>> vocabulary = kt.text.build_char_vocabulary(["hello world"])
        >>> tokenizer = kt.text.CharTokenizer(vocabulary)
        >>> model = kt.models.seq2seq(len(vocabulary), num_layers=1, num_heads=2,
        ...                           hidden_dim=8, intermediate_dim=16,
        ...                           max_sequence_length=8)
        >>> translator = kt.tasks.Translator(model, tokenizer)
        >>> isinstance(translator.translate("hello", max_new_tokens=2), str)
        True
    """

    serialized_arguments = ("model", "source_tokenizer", "target_tokenizer")
    default_task = "translation"

    def __init__(
        self, model, source_tokenizer, target_tokenizer=None, task=None, **kwargs
    ):
        super().__init__(model, source_tokenizer, **kwargs)
        self._set_task(task)
        if target_tokenizer is not None:
            tokenizer_checks.check_tokenizer(
                target_tokenizer, "target_tokenizer", model.decoder_vocabulary_size
            )
        self.target_tokenizer = (
            source_tokenizer if target_tokenizer is None else target_tokenizer
        )

    @property
    def source_tokenizer(self):
        """The tokenizer of the source language (also `tokenizer`)."""
        return self.tokenizer

    @classmethod
    def _from_folder(cls, model, tokenizer, config, path):
        # A Marian folder has a (source, target) pair of tokenizers.
        pair = tokenizer if isinstance(tokenizer, tuple) else (tokenizer,)
        return cls(model, *pair)

    @positional_deprecated("max_new_tokens", "sampler", "seed")
    def translate(
        self, texts, *, max_new_tokens=None, sampler=None, seed=None, **sampler_args
    ):
        """Translates a sentence or a list of sentences.

        Args:
            texts: a string, or a non-empty list of them (an empty
                string, a blank line, is translated as transformers does).
            max_new_tokens: the longest translation in tokens; None: the
                model's `generation_config`'s, else `max_sequence_length - 1`
                (not `generate`'s fixed 32: a translation is as long as its
                source, and the end token ends it).
            sampler: a `kt.generation.generate` sampler name or instance;
                None: the `generation_config`'s (an imported Marian's beam
                search), else `"greedy"`. Naming another sampler keeps only
                the options every sampler takes from the checkpoint's.
            seed: the seed of sampling samplers.
            **sampler_args: the sampler's arguments (`num_beams`,
                `length_penalty`, `temperature`, ...), over the
                checkpoint's.

        Returns:
            The translation: a str for a str, a list of str for a list.
        """
        return self._generate(
            self._request("texts", texts, max_new_tokens, sampler, seed, sampler_args)
        )

    def export(self, path, **options):
        """`kt.export.export_translator` of this model and its tokenizers;
        served, it gives `translate`'s text (with `num_beams` and
        `length_penalty` as `translate(sampler="beam", ...)` takes them)."""
        return export_translator(
            self.model,
            self.source_tokenizer,
            self.target_tokenizer,
            path,
            **self._export_options(options),
        )

    def get_config(self):
        config = super().get_config()
        if self.target_tokenizer is self.tokenizer:
            config["target_tokenizer"] = None  # one tokenizer, saved once
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Summarizer(Seq2SeqTask):
    """A seq2seq model and its tokenizer: documents in, summaries out.

    Decodes as `Translator` does, with one tokenizer for documents and
    summaries (an imported BART's, with its beam search settings).

    Args:
        model: a `kt.models.Seq2SeqLM` (such as `kt.models.Seq2Seq`).
        tokenizer: the `kt.text` tokenizer of documents and summaries.
        task: the entry of the model's `task_settings` whose prefix and
            generation settings to use; None: `"summarization"` if the model
            has it (T5's `"summarize: "` and beam search).
        **kwargs: base `keras.Model` arguments (`name`).

    Example:
        >>> import keras_transformer as kt
        >>> vocabulary = kt.text.build_char_vocabulary(["a long document"])
        >>> tokenizer = kt.text.CharTokenizer(vocabulary)
        >>> model = kt.models.seq2seq(len(vocabulary), num_layers=1, num_heads=2,
        ...                           hidden_dim=8, intermediate_dim=16,
        ...                           max_sequence_length=8)
        >>> summarizer = kt.tasks.Summarizer(model, tokenizer)
        >>> len(summarizer.summarize(["a document", "long"], max_new_tokens=2))
        2
    """

    default_task = "summarization"

    def __init__(self, model, tokenizer, task=None, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        self._set_task(task)

    @property
    def source_tokenizer(self):
        return self.tokenizer

    @property
    def target_tokenizer(self):
        return self.tokenizer

    @positional_deprecated("max_new_tokens", "sampler", "seed")
    def summarize(
        self, texts, *, max_new_tokens=None, sampler=None, seed=None, **sampler_args
    ):
        """Summarizes a document or a list of documents.

        Args:
            texts: a string, or a non-empty list of them (an empty
                string, a blank line, is translated as transformers does).
            max_new_tokens: see `Translator.translate`.
            sampler: see `Translator.translate` (an imported BART's beam
                search by default).
            seed: the seed of sampling samplers.
            **sampler_args: see `Translator.translate`.

        Returns:
            The summary: a str for a str, a list of str for a list.
        """
        return self._generate(
            self._request("texts", texts, max_new_tokens, sampler, seed, sampler_args)
        )

    def export(self, path, **options):
        """`kt.export.export_summarizer` of this model and tokenizer; served,
        it gives `summarize`'s text."""
        return export_summarizer(
            self.model, self.tokenizer, path, **self._export_options(options)
        )
