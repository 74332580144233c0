"""What every task shares: a `kt.models` model and its tokenizer(s) as one
Keras object that saves to one `.keras` file, loads back, and comes from a
Hugging Face folder.

A task class sets `model_classes` (the models it wraps) and `reads_text`
(False: a folder of images has no tokenizer), reads more of a folder in
`_from_folder`, and implements its text methods and `export`. The Hugging
Face architectures it serves are in the families' `Family` records
(`pretrained/registry.py`). Its constructor arguments that are Keras
objects (the model, tokenizers) are listed in `serialized_arguments`:
`get_config` nests them and `from_config` rebuilds them, so the tokenizer
travels inside the `.keras` file.
"""

import os
import uuid

import keras

from keras_transformer import _validation as validation
from keras_transformer.generation.compiled import CompiledFunctions
from keras_transformer.models import from_pretrained as model_from_pretrained
from keras_transformer.pretrained import checkpoint, registry
from keras_transformer.text import tokenizer_checks, tokenizer_from_pretrained
from keras_transformer.training.fit import FitMixin

# The tasks' compiled text functions, per task until its variables change.
_COMPILED = CompiledFunctions()


class Task(FitMixin, keras.Model):
    """Base class of the tasks: a model and its tokenizer, text in, text out.

    Calling a task calls its model (ids in, the model's outputs out), so
    `compile` and `fit` on already-tokenized data work as on the model;
    each task adds the text methods of its job.

    Args:
        model: the `kt.models` model, of one of `model_classes`.
        tokenizer: the `kt.text` tokenizer whose ids the model takes (None
            for a model of images).
        **kwargs: base `keras.Model` arguments (`name`).
    """

    model_classes = ()
    reads_text = True  # from_pretrained loads the folder's tokenizer
    serialized_arguments = ("model", "tokenizer")

    def __init__(self, model, tokenizer=None, **kwargs):
        task = type(self).__name__
        validation.check_model(model, self.model_classes, f"kt.tasks.{task}")
        if tokenizer is not None:  # None: a task of images
            # A head (BERTClassifier, BERTMaskedLM) has its backbone's ids;
            # an encoder-decoder's tokenizer gives its encoder's.
            source = getattr(model, "backbone", model)
            vocabulary_size = getattr(source, "encoder_vocabulary_size", None)
            if vocabulary_size is None:
                vocabulary_size = source.vocabulary_size
            tokenizer_checks.check_tokenizer(tokenizer, "tokenizer", vocabulary_size)
        super().__init__(**kwargs)
        self.model = model
        self.tokenizer = tokenizer
        self.built = True  # the model was built when it was made

    def call(self, inputs, training=None):
        return self.model(inputs, training=training)

    @classmethod
    @validation.reads_once
    def from_pretrained(cls, path, dtype=None):
        """The task of a Hugging Face checkpoint folder: the model with its
        weights (`kt.models.from_pretrained`, with its `dtype` argument) and
        the folder's tokenizer (`kt.text.tokenizer_from_pretrained`).

        Raises:
            FileNotFoundError: `path` has no `config.json`.
            ValueError: the folder's `architectures` is not one this task
                serves (see `kt.tasks.from_pretrained` for the right task),
                before any weight is read.
        """
        path = checkpoint.check_folder(path)
        config = checkpoint.read_config(path)
        check_architecture(cls, config, path)
        model = model_from_pretrained(path, dtype=dtype)
        tokenizer = tokenizer_from_pretrained(path) if cls.reads_text else None
        return cls._from_folder(model, tokenizer, config, path)

    @classmethod
    def _from_folder(cls, model, tokenizer, config, path):
        """The task of a loaded folder: its model, tokenizer (None for a
        task of images), `config.json` and `path` (subclasses read
        more of `config`, or other files of the folder)."""
        return cls(model, tokenizer)

    def quantize(self, mode=None, **kwargs):
        """Quantizes the task's model: `self.model.quantize(mode)` (int8
        weights; see `kt.models`). The tokenizer is left as it is, and the
        task's methods then compute with the int8 weights, also those
        called before.

        Raises:
            ValueError: as `model.quantize` does (an unsupported `mode`, a
                model already quantized, or one with LoRA enabled).
        """
        self.model.quantize(mode, **kwargs)

    def _compiled(self, key, build):
        """The function `build()` makes, kept under `key`: built once, and
        again after `quantize` or LoRA changed the model's variables."""
        functions = _COMPILED.of(self)
        if key not in functions:
            functions[key] = build()
        return functions[key]

    def save(self, path, overwrite=True):
        """Writes the task, its model and tokenizer(s) as one `.keras` file.

        The file is written beside `path` and moved into place once it is
        complete, so a failed save leaves no file behind (and an earlier
        file at `path` unchanged).

        Args:
            path: a file path ending in `.keras`.
            overwrite: replace an existing file at `path`.
        """
        path = check_keras_path(path)
        validation.check_bool("overwrite", overwrite)
        if os.path.exists(path) and not overwrite:
            raise ValueError(
                "`path` exists; pass overwrite=True to replace it. "
                f"Received: path={path!r}"
            )
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        partial = os.path.join(folder, f".{uuid.uuid4().hex}.partial.keras")
        try:
            keras.saving.save_model(self, partial)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
        return path

    def export(self, path, **options):
        """Writes the string-in SavedModel of this task (the one `kt.export`
        writes for its model and tokenizer); served, it gives what the
        task's Python method gives."""
        raise NotImplementedError

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for argument in self.serialized_arguments:
            value = getattr(self, argument)
            config[argument] = keras.saving.serialize_keras_object(value)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for argument in cls.serialized_arguments:
            config[argument] = keras.saving.deserialize_keras_object(config[argument])
        return cls(**config)


def check_keras_path(path):
    """`path` as an absolute string ending in `.keras`, or a ValueError."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path).endswith(
        ".keras"
    ):
        raise ValueError(
            f"`path` must be a file path ending in .keras. Received: path={path!r}"
        )
    return os.path.abspath(os.fspath(path))


def check_architecture(task_class, config, path):
    """Raises a ValueError unless the folder's first `architectures` entry
    is one `task_class` serves (a null one: its `model_type`'s usual one)."""
    architecture = registry.architecture(config)
    served = registry.architectures_of(task_class)
    if architecture not in served:
        raise ValueError(
            f"kt.tasks.{task_class.__name__} serves the architectures "
            f"{list(served)}. Received: a folder whose "
            f"architectures={config.get('architectures')!r} (path={path!r})"
        )
