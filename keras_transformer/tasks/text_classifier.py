"""Text classification: a `kt.models.BERTClassifier` and its tokenizer, texts
or text pairs in, labels and probabilities out.

Shape legend: B batch, T sequence length, C classes.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer._keywords import positional_deprecated
from keras_transformer.export import export_classifier
from keras_transformer.models import BERTClassifier
from keras_transformer.tasks import inputs
from keras_transformer.tasks.base import Task
from keras_transformer.text import classification_dataset, tokenizer_checks


@keras.saving.register_keras_serializable(package="keras_transformer")
class TextClassifier(Task):
    """Classifies texts, or text pairs, with a `kt.models.BERTClassifier`.

    Texts are tokenized and packed in the graph exactly as
    `kt.export.export_classifier` packs them: `[CLS] A [SEP]`, or
    `[CLS] A [SEP] B [SEP]` for pairs, trimmed round robin to
    `sequence_length` tokens in all.

    Args:
        model: a `kt.models.BERTClassifier`.
        tokenizer: its `kt.text` tokenizer, with `[CLS]` and `[SEP]` (its own
            `sequence_length`, if any, is ignored).
        class_names: one label string per class, or None for int labels.
        sequence_length: T, the packed length; None is the model's
            `max_sequence_length`.
        **kwargs: base `keras.Model` arguments (`name`).

    Examples:
        >>> import keras_transformer as kt
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "bad", "film"]
        >>> backbone = kt.models.BERT(7, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, max_sequence_length=8)
        >>> classifier = kt.tasks.TextClassifier(
        ...     kt.models.BERTClassifier(backbone, num_classes=2),
        ...     kt.text.WordPieceTokenizer(vocab), class_names=["neg", "pos"])
        >>> out = classifier.predict(["good film", "bad film"])
        >>> out["probabilities"].shape, out["labels"][0] in ("neg", "pos")
        ((2, 2), True)
        >>> classifier.predict("good film")["label"] in ("neg", "pos")
        True
    """

    model_classes = (BERTClassifier,)

    def __init__(
        self, model, tokenizer, class_names=None, sequence_length=None, **kwargs
    ):
        super().__init__(model, tokenizer, **kwargs)
        self.cls_id, self.sep_id = inputs.cls_sep_ids(
            tokenizer, "kt.tasks.TextClassifier"
        )
        num_classes = model.num_classes
        if class_names is not None:
            if (
                isinstance(class_names, str)
                or not hasattr(class_names, "__len__")
                or len(class_names) != num_classes
                or not all(isinstance(name, str) for name in class_names)
                or len(set(class_names)) != num_classes
            ):
                raise ValueError(
                    f"`class_names` must be a list of {num_classes} different "
                    f"strings, one per class of the model. "
                    f"Received: class_names={class_names!r}"
                )
            class_names = [str(name) for name in class_names]
        self.class_names = class_names
        self.sequence_length = validation.check_sequence_length(
            sequence_length, model.backbone.max_sequence_length, minimum=3
        )

    @classmethod
    def _from_folder(cls, model, tokenizer, config, path):
        """The folder's `id2label` become the class names."""
        id2label = config.get("id2label") or {}
        names = [id2label.get(str(i)) for i in range(model.num_classes)]
        if not all(isinstance(name, str) for name in names):
            names = None
        return cls(model, tokenizer, class_names=names)

    def predict(self, texts, batch_size=32):
        """Labels and probabilities of texts or text pairs.

        Args:
            texts: a string; a list of strings; or a list of `(text_a,
                text_b)` pairs (tuples or lists of two strings). A tuple of
                two strings is two texts, not a pair: write `[(a, b)]`.
            batch_size: texts run through the model at a time.

        Returns:
            For a list: `{"labels": list of N class names (ints without
            class_names), "probabilities": float32 (N, C)}`. For a single
            string: `{"label": a class name or int, "probabilities":
            float32 (C,)}`.

        Raises:
            ValueError: `texts` is empty, holds something other than strings
                or pairs of two strings, or mixes texts and pairs.
        """
        single, segments = inputs.check_texts_or_pairs("texts", texts)
        inputs.check_batch_size(batch_size)
        classify = self._classify_function(len(segments))
        probabilities = np.concatenate(
            inputs.in_batches(classify, segments, batch_size)
        )
        labels = probabilities.argmax(-1).tolist()
        if self.class_names is not None:
            labels = [self.class_names[label] for label in labels]
        if single:
            return {"label": labels[0], "probabilities": probabilities[0]}
        return {"labels": labels, "probabilities": probabilities}

    @positional_deprecated("batch_size", "epochs", "validation_data", "shuffle")
    def fit(
        self,
        texts,
        labels,
        *,
        batch_size=32,
        epochs=1,
        validation_data=None,
        shuffle=True,
        **kwargs,
    ):
        """Trains on raw texts (or pairs) and their labels.

        Texts are packed as `predict` packs them, through
        `kt.text.classification_dataset`. A task that was not compiled is
        compiled with Adam (learning rate 5e-5, for fine-tuning a pretrained
        backbone), `SparseCategoricalCrossentropy(from_logits=True)` and
        accuracy; compile it first for other settings.

        Args:
            texts: a list of strings or of `(text_a, text_b)` pairs, as
                `predict` takes them.
            labels: one label per text: class names from `class_names`, or
                class indices.
            batch_size: examples per step.
            epochs: passes over the data.
            validation_data: `(texts, labels)` to evaluate after each epoch.
            shuffle: reshuffle the examples every epoch.
            **kwargs: more `keras.Model.fit` arguments (`callbacks`,
                `verbose`).

        Returns:
            The `keras.callbacks.History` of `keras.Model.fit`.

        Raises:
            ValueError: bad texts, as `predict` says; labels not one per
                text; a label that is not a class name or an index in
                `[0, C)`.
        """
        inputs.check_batch_size(batch_size)
        validation.check_bool("shuffle", shuffle)
        data = self._dataset(texts, labels, "texts", "labels", shuffle)
        if validation_data is not None:
            if not isinstance(validation_data, tuple) or len(validation_data) != 2:
                raise ValueError(
                    "`validation_data` must be a tuple (texts, labels). "
                    f"Received: validation_data={validation_data!r}"
                )
            validation_data = self._dataset(
                *validation_data, "validation_data[0]", "validation_data[1]", False
            )
            validation_data = self._batches(validation_data, batch_size)
        if not getattr(self, "compiled", False):
            self.compile(
                optimizer=keras.optimizers.Adam(5e-5),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            )
        return super().fit(
            self._batches(data, batch_size),
            epochs=epochs,
            validation_data=validation_data,
            shuffle=False,  # the dataset shuffles
            **kwargs,
        )

    def export(self, path, **options):
        """Writes the string SavedModel of `kt.export.export_classifier` with
        this task's tokenizer, `class_names` and `sequence_length`; served,
        its `label` and `probabilities` are `predict`'s.

        Args:
            path: the SavedModel directory to write.
            **options: more `export_classifier` arguments (`overwrite`).

        Returns:
            The absolute path written.
        """
        options = {
            "class_names": self.class_names,
            "sequence_length": self.sequence_length,
            **options,
        }
        return export_classifier(self.model, self.tokenizer, path, **options)

    def get_config(self):
        return {
            **super().get_config(),
            "class_names": self.class_names,
            "sequence_length": self.sequence_length,
        }

    def _check_labels(self, labels, count, name):
        """Labels as class indices, one per text."""
        if isinstance(labels, str | bytes) or not hasattr(labels, "__len__"):
            raise ValueError(
                f"`{name}` must be a list of labels, one per text. "
                f"Received: {name}={labels!r}"
            )
        if len(labels) != count:
            raise ValueError(
                f"`{name}` must hold one label per text ({count}). "
                f"Received: {len(labels)} labels"
            )
        indices = []
        names = self.class_names or []
        for i, label in enumerate(labels):
            if isinstance(label, str) and label in names:
                indices.append(names.index(label))
            elif validation.is_int(label) and 0 <= label < self.model.num_classes:
                indices.append(int(label))
            else:
                raise ValueError(
                    f"`{name}` must hold class names from class_names={names} or "
                    f"class indices in [0, {self.model.num_classes}). "
                    f"Received: {name}[{i}]={label!r}"
                )
        return indices

    def _dataset(self, texts, labels, texts_name, labels_name, shuffle):
        single, segments = inputs.check_texts_or_pairs(texts_name, texts)
        if single:
            raise ValueError(
                f"`{texts_name}` must be a list of texts to train on. "
                f"Received: {texts_name}={texts!r}"
            )
        labels = self._check_labels(labels, len(segments[0]), labels_name)
        features = tuple(segments) if len(segments) == 2 else segments[0]
        data = tf.data.Dataset.from_tensor_slices((features, labels))
        if shuffle:
            data = data.shuffle(len(labels), reshuffle_each_iteration=True)
        return data

    def _batches(self, data, batch_size):
        return classification_dataset(
            data, self.tokenizer, self.sequence_length, batch_size
        )

    def _classify_function(self, num_segments):
        """Strings `(B,)` per segment -> float32 probabilities `(B, C)`,
        compiled once per number of segments."""

        def build():
            tokenizer = tokenizer_checks.without_sequence_length(self.tokenizer)
            specs = [tf.TensorSpec([None], tf.string)] * num_segments

            @tf.function(input_signature=specs)
            def classify(*texts):
                packed = inputs.pack_texts(
                    tokenizer, texts, self.sequence_length, self.cls_id, self.sep_id
                )
                logits = self.model(packed, training=False)  # (B, C)
                return tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)

            return classify

        return self._compiled(("classify", num_segments), build)
