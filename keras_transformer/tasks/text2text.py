"""`Text2Text`: instructions in, answers out, over a text-to-text
encoder-decoder (FLAN-T5, T5): `task("Answer the question: ...")`.

It decodes as `Summarizer` does (the same tokenizer both ways, the model's
generation settings under the caller's), without a task's prefix unless
one is named.
"""

import keras

from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import export_text2text
from keras_transformer.tasks.seq2seq_task import Seq2SeqTask


@keras.saving.register_keras_serializable(package="keras_transformer")
class Text2Text(Seq2SeqTask):
    """An encoder-decoder and its tokenizer: any text in, text out.

    `kt.tasks.from_pretrained` gives it for `T5ForConditionalGeneration`
    folders. Calling it on a string (or a list of them) generates, as
    `generate` does; calling it on token ids calls the model.

    Args:
        model: a `kt.models.Seq2SeqLM` (such as `kt.models.T5`).
        tokenizer: the `kt.text` tokenizer of inputs and outputs.
        task: an entry of the model's `task_settings` (a T5's
            `task_specific_params`) whose prefix and generation settings
            to use; None: the texts as given, with the model's
            `generation_config`.
        **kwargs: base `keras.Model` arguments (`name`).

    Example:
        >>> import keras_transformer as kt
        >>> proto = kt.text.train_sentencepiece(
        ...     ["what is one plus one", "two"] * 10, 290, model_type="unigram",
        ...     reserved_tokens=["[PAD]", "[UNK]", "</s>"])
        >>> tokenizer = kt.text.T5Tokenizer(proto, extra_ids=2)
        >>> model = kt.models.t5(tokenizer.vocabulary_size(), num_layers=1,
        ...                      num_heads=2, hidden_dim=8, intermediate_dim=16)
        >>> task = kt.tasks.Text2Text(model, tokenizer)
        >>> isinstance(task("what is one plus one", max_new_tokens=3), str)
        True
    """

    def __init__(self, model, tokenizer, task=None, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        self._set_task(task)

    @property
    def source_tokenizer(self):
        return self.tokenizer

    @property
    def target_tokenizer(self):
        return self.tokenizer

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, str) or (
            isinstance(inputs, list | tuple)
            and inputs
            and all(isinstance(text, str) for text in inputs)
        ):
            return self.generate(inputs, *args, **kwargs)
        return super().__call__(inputs, *args, **kwargs)

    @positional_deprecated("max_new_tokens", "sampler", "seed")
    def generate(
        self, texts, *, max_new_tokens=None, sampler=None, seed=None, **sampler_args
    ):
        """The model's answer to a text or to each of a list of texts.

        Args:
            texts: a string, or a non-empty list of them.
            max_new_tokens: the longest answer in tokens; None: the
                model's `generation_config`'s, else `max_sequence_length - 1`.
            sampler: a `kt.generation.generate` sampler name or instance;
                None: the `generation_config`'s, else `"greedy"`.
            seed: the seed of sampling samplers.
            **sampler_args: the sampler's arguments (`num_beams`,
                `temperature`, ...), over the checkpoint's.

        Returns:
            The answer: a str for a str, a list of str for a list.
        """
        return self._generate(
            self._request("texts", texts, max_new_tokens, sampler, seed, sampler_args)
        )

    def export(self, path, **options):
        """`kt.export.export_text2text` of this model and tokenizer; served,
        it gives `generate`'s text."""
        return export_text2text(
            self.model, self.tokenizer, path, **self._export_options(options)
        )
