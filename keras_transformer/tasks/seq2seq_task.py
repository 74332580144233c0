"""What the encoder-decoder tasks share (`Seq2SeqTask`: `Translator`,
`Summarizer`, `Text2Text`): decoding texts as `kt.export.export_translator`
does, a model's `task_settings` entry (a T5's prefix and settings), and
`fit` on text pairs.

Shape legend: B batch, S source length.
"""

import inspect

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.generation import Sampler, generate
from keras_transformer.generation.options import NOT_SAMPLER_OPTIONS
from keras_transformer.models import Seq2SeqLM
from keras_transformer.tasks import inputs
from keras_transformer.tasks.base import Task
from keras_transformer.tasks.generation_request import Seq2SeqRequest
from keras_transformer.text import (
    checks,
    pack_seq2seq,
    tokenizer_checks,
    translation_dataset,
)
from keras_transformer.training import MaskedSparseCategoricalCrossentropy

# The options every sampler takes (`kt.generation.Sampler`'s keyword-only
# arguments): a checkpoint's settings keep only these when the caller names
# another sampler than the checkpoint's.
SHARED_OPTIONS = tuple(
    name
    for name, parameter in inspect.signature(Sampler.__init__).parameters.items()
    if parameter.kind is parameter.KEYWORD_ONLY
)


class Seq2SeqTask(Task):
    """What `Translator` and `Summarizer` share: decoding texts, `fit` on
    text pairs. Subclasses provide `source_tokenizer` and `target_tokenizer`.
    """

    model_classes = (Seq2SeqLM,)
    # The model's `task_settings` entry read when `task` is None: the first
    # whose name starts with this (None: none).
    default_task = None

    def _set_task(self, task):
        """Checks and sets `task`: the name of the model's `task_settings`
        entry (a T5's `task_specific_params`) whose prefix and generation
        settings this task uses, or None."""
        settings = getattr(self.model, "task_settings", None) or {}
        if task is None and self.default_task is not None:
            task = next((t for t in settings if t.startswith(self.default_task)), None)
        elif task is not None and task not in settings:
            raise ValueError(
                f"`task` must name an entry of the model's task_settings "
                f"({sorted(settings)}). Received: task={task!r}"
            )
        self.task = task

    def _task_settings(self):
        """The `task_settings` entry in use: `{"prefix": ..., generate
        arguments}`, or {}."""
        if getattr(self, "task", None) is None:
            return {}
        return dict(self.model.task_settings[self.task])

    @property
    def prefix(self):
        """The text put before every input (`"summarize: "`), from the
        model's `task_settings` entry `task`; "" without one."""
        return self._task_settings().get("prefix", "")

    def _generation_config(self):
        """The model's `generation_config` under its `task` entry's."""
        settings = dict(getattr(self.model, "generation_config", None) or {})
        task = self._task_settings()
        task.pop("prefix", None)
        return {**settings, **task}

    def _request(self, name, texts, max_new_tokens, sampler, seed, sampler_args):
        """The checked `Seq2SeqRequest` of a call on `texts` (the argument
        `name`): every argument checked before the texts are tokenized."""
        # A blank line is translated, as transformers translates it.
        single, strings = inputs.check_texts(name, texts, allow_empty=True)
        if self.prefix:
            strings = [self.prefix + text for text in strings]
        options = self._decoding_options(max_new_tokens, sampler, sampler_args)
        limit = self.model.max_sequence_length
        source = tokenizer_checks.without_sequence_length(self.source_tokenizer)
        rows = source.truncate(source.tokenize(strings), limit).to_list()
        empty = np.array([not row for row in rows])
        return Seq2SeqRequest(single, strings, rows, empty, options, seed)

    def _generate(self, request):
        """The decoded texts of a `Seq2SeqRequest`: a str for a str, a list
        of str for a list."""
        single, rows, empty = request.single, request.rows, request.empty
        if empty.all():
            return "" if single else [""] * len(rows)
        start = np.full((len(rows), 1), self._start_id(), "int32")
        ids = {self.model.source_name: inputs.pad(rows), "decoder_token_ids": start}
        tokens = generate(self.model, ids, seed=request.seed, **request.options)
        tokens = tokens[:, 1:]
        ends = np.reshape(request.options["end_token_id"], [-1])  # one or several
        tokens = np.where(np.isin(tokens, ends), 0, tokens)
        tokens[empty] = 0
        texts = self.target_tokenizer.detokenize(
            tokens, skip_special_tokens=True
        ).numpy()
        texts = [text.decode("utf-8", errors="replace") for text in texts]
        return texts[0] if single else texts

    def _decoding_options(self, max_new_tokens, sampler, sampler_args):
        """`generate`'s keyword arguments: the model's `generation_config`,
        overridden by the caller's (as the exporters read it)."""
        settings = self._generation_config()
        limit = self.model.max_sequence_length
        if max_new_tokens is None:
            max_new_tokens = min(settings.get("max_new_tokens", limit - 1), limit - 1)
        max_new_tokens = validation.check_max_new_tokens_fit(
            max_new_tokens, limit, "the start token"
        )
        end_id = settings.get("end_token_id")
        eos = self.target_tokenizer.eos_token
        if (
            end_id is None
            and eos is not None
            and getattr(self.model, "decoder_start_token_id", None) is not None
        ):  # a checkpoint's layout (T5's): its eos_token ends
            end_id = self.target_tokenizer.token_to_id(eos)
        if end_id is None:
            end_id = checks.special_token_id(
                self.target_tokenizer, checks.END, f"kt.tasks.{type(self).__name__}"
            )
        options = {k: v for k, v in settings.items() if k not in NOT_SAMPLER_OPTIONS}
        own = settings.get("sampler", "greedy")
        if sampler is None:
            sampler = own
        elif isinstance(sampler, Sampler):
            options = {}  # the instance carries its options
        elif sampler != own:
            options = {k: v for k, v in options.items() if k in SHARED_OPTIONS}
        return {
            "max_new_tokens": max_new_tokens,
            "sampler": sampler,
            "end_token_id": end_id,
            **options,
            **sampler_args,
        }

    def _start_id(self):
        start = getattr(self.model, "decoder_start_token_id", None)
        if start is not None:
            return int(start)
        return checks.special_token_id(
            self.target_tokenizer, checks.START, f"kt.tasks.{type(self).__name__}"
        )

    def _export_options(self, options):
        """The exporter's options: the task's prefix and settings, under
        the caller's."""
        settings = self._generation_config()
        if "end_token_id" not in settings:  # as `_decoding_options` picks it
            settings["end_token_id"] = self._decoding_options(1, None, {})[
                "end_token_id"
            ]
        return {"prefix": self.prefix, "generation_config": settings, **options}

    def get_config(self):
        config = super().get_config()
        if getattr(self, "task", None) is not None:
            config["task"] = self.task
        return config

    @positional_deprecated("batch_size", "epochs")
    def fit(self, pairs, *, batch_size=32, epochs=1, **kwargs):
        """Trains on `(source, target)` strings, batched by
        `kt.text.translation_dataset` (decoder inputs `[START] y`, labels
        `y [END]`, both the model's `max_sequence_length`). An imported
        checkpoint (a model with a `decoder_start_token_id`, a target
        tokenizer with an `eos_token`) trains as `transformers` fine-tunes
        it: labels are the target's ids with their `</s>`, decoder inputs
        the decoder start token and the labels but the last.

        An uncompiled task is first compiled with Adam (learning rate 1e-3)
        and `kt.training.MaskedSparseCategoricalCrossentropy`; compile it
        yourself for other settings.

        Args:
            pairs: a non-empty list of `(source, target)` string pairs, or a
                `tf.data.Dataset` of single `(source, target)` strings.
            batch_size: pairs per batch.
            epochs: passes over `pairs`.
            **kwargs: `keras.Model.fit` arguments (`verbose`, `callbacks`).

        Returns:
            The `keras.callbacks.History` of `fit`.
        """
        dataset = pairs_dataset(pairs)
        validation.check_positive_int("batch_size", batch_size)
        start = getattr(self.model, "decoder_start_token_id", None)
        if start is None or self.target_tokenizer.eos_token is None:
            data = translation_dataset(
                dataset,
                self.source_tokenizer,
                self.model.max_sequence_length,
                batch_size,
                target_tokenizer=self.target_tokenizer,
            )
        else:
            data = self._checkpoint_batches(dataset, batch_size, start)
        if not self.compiled:
            self.compile(
                optimizer=keras.optimizers.Adam(1e-3),
                loss=MaskedSparseCategoricalCrossentropy(),
            )
        return super().fit(data, epochs=epochs, **kwargs)

    def _checkpoint_batches(self, dataset, batch_size, start_id):
        """`(inputs, labels)` batches in the layout of `transformers`: both
        sides cut to the model's length by `truncate` (which keeps `</s>`)."""
        spec = dataset.element_spec
        if not (
            isinstance(spec, tuple)
            and len(spec) == 2
            and all(map(checks.is_string_spec, spec))
        ):
            raise ValueError(
                "`pairs` must be a tf.data.Dataset of (source, target) strings. "
                f"Received: element_spec={spec}"
            )
        limit = self.model.max_sequence_length
        source = tokenizer_checks.without_sequence_length(self.source_tokenizer)
        target = tokenizer_checks.without_sequence_length(self.target_tokenizer)
        end_id = target.token_to_id(target.eos_token)

        def prepare(sources, targets):
            source_ids = source.truncate(source.tokenize(sources), limit)
            target_ids = target.truncate(target.tokenize(targets), limit)
            # The labels without their </s>: pack_seq2seq puts it back.
            return pack_seq2seq(
                source_ids, target_ids[:, :-1], limit, limit, start_id, end_id
            )

        return (
            dataset.batch(batch_size)
            .map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )


def pairs_dataset(pairs):
    """A `tf.data.Dataset` of `(source, target)` strings from `pairs`."""
    if isinstance(pairs, tf.data.Dataset):
        return pairs  # translation_dataset checks its elements
    if not isinstance(pairs, list | tuple) or not pairs:
        raise ValueError(
            "`pairs` must be a non-empty list of (source, target) strings or a "
            f"tf.data.Dataset of them. Received: pairs={validation.describe(pairs)}"
        )
    for i, pair in enumerate(pairs):
        if (
            not isinstance(pair, list | tuple)
            or len(pair) != 2
            or not all(isinstance(text, str) for text in pair)
        ):
            raise ValueError(
                "`pairs` must hold (source, target) pairs of strings. "
                f"Received: pairs[{i}]={pair!r}"
            )
    sources, targets = zip(*pairs, strict=True)
    return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
