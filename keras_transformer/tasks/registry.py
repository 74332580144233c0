"""Which task serves a Hugging Face folder, and loading a saved task.

The families' `Family` records say which task serves each architecture
(`pretrained/registry.task_for`), by name; `TASKS` maps each name to its
class.
"""

import os

import keras

from keras_transformer import _gguf
from keras_transformer import _validation as validation
from keras_transformer.models import from_pretrained as model_from_pretrained
from keras_transformer.pretrained import checkpoint, gguf, registry
from keras_transformer.tasks.base import Task, check_keras_path
from keras_transformer.tasks.fill_mask import FillMask
from keras_transformer.tasks.image_classifier import ImageClassifier
from keras_transformer.tasks.sentence_encoder import SentenceEncoder
from keras_transformer.tasks.speech_recognizer import SpeechRecognizer
from keras_transformer.tasks.text2text import Text2Text
from keras_transformer.tasks.text_classifier import TextClassifier
from keras_transformer.tasks.text_generator import TextGenerator
from keras_transformer.tasks.translator import Summarizer, Translator
from keras_transformer.text import tokenizer_from_pretrained

# Every task a family record may name, by name.
TASKS = {
    cls.__name__: cls
    for cls in (
        FillMask, ImageClassifier, SentenceEncoder, SpeechRecognizer, Summarizer,
        Text2Text, TextClassifier, TextGenerator, Translator,
    )
}  # fmt: skip


def task_class(architecture):
    """The task class serving the Hugging Face `architecture` (or a
    `model_type`'s usual architecture), or None."""
    return TASKS.get(registry.task_for(architecture))


@validation.reads_once
def from_pretrained(path, dtype=None):
    """The task of a Hugging Face checkpoint folder, its class chosen from
    the config's `architectures` (e.g. `GPT2LMHeadModel` -> `TextGenerator`,
    `BertForSequenceClassification` -> `TextClassifier`); a config whose
    `architectures` is null is read by its `model_type`, as transformers
    reads it (`llama` -> `LlamaForCausalLM`, `bert` -> `BertModel`).

    Args:
        path: a local checkpoint folder (`config.json`, weights, tokenizer
            files), or a `.gguf` file (a `TextGenerator` of its model and
            tokenizer, ending at the file's end-of-text token).
        dtype: None (float32), or `"bfloat16"`/`"float16"`/`"float32"` for
            Llama, Mistral and Qwen2 folders (see `kt.models.from_pretrained`).

    Returns:
        The task, with the checkpoint's weights and the folder's tokenizer.

    Raises:
        FileNotFoundError: `path` has no `config.json`.
        ValueError: no task serves the folder's `architectures` (the error
            lists those served), before any weight is read.
    """
    if _gguf.is_gguf(path):
        return _from_gguf(path, dtype)
    path = checkpoint.check_folder(path)
    config = checkpoint.read_config(path)
    cls = task_class(registry.architecture(config))
    if cls is None:
        served = registry.served_architectures()
        raise ValueError(
            f"No task serves this folder's architecture (served: {served}). "
            f"Received: architectures={config.get('architectures')!r} "
            f"(path={path!r})"
        )
    return cls.from_pretrained(path, dtype=dtype)


def _from_gguf(path, dtype):
    """The task of a GGUF file: its architecture's class, its model and
    tokenizer, the `config.json` of its metadata (`eos_token_id` the
    file's), and no `generation_config.json`."""
    config = gguf.read_config(path)
    cls = task_class(registry.architecture(config))
    model = model_from_pretrained(path, dtype=dtype)
    return cls._from_folder(model, tokenizer_from_pretrained(path), config, path)


def load(path):
    """A task saved with `task.save(path)` (a `.keras` file).

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: `path` does not end in `.keras`, or holds something
            other than a task.
    """
    path = check_keras_path(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No saved task at `path`. Received: path={path!r}")
    task = keras.saving.load_model(path)
    if not isinstance(task, Task):
        raise ValueError(
            "`path` holds a model, not a task; load it with "
            f"keras.saving.load_model. Received: path={path!r}"
        )
    return task
