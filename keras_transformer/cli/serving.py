"""The exported SavedModel of a folder written by `train`, served."""

import os

import tensorflow as tf

from keras_transformer.cli.errors import CommandError


def load_export(directory, signature):
    """The `signature` function of `directory`'s `saved_model/`."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    path = os.path.join(directory, "saved_model")
    if not os.path.isdir(path):
        raise CommandError(f"no exported model in {directory} (expected {path})")
    loaded = tf.saved_model.load(path)
    if signature not in loaded.signatures:
        raise CommandError(
            f"{path} cannot {signature}: it serves {', '.join(loaded.signatures)}"
        )
    return loaded.signatures[signature]


def translate_all(path, sentences, batch_size=64):
    """Translations of `sentences` by the SavedModel at `path`."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    translate = tf.saved_model.load(path).signatures["translate"]
    out = []
    for i in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[i : i + batch_size])
        out.extend(
            t.decode("utf-8", "replace")
            for t in translate(sentences=batch)["translation"].numpy()
        )
    return out
