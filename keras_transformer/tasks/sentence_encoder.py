"""Sentence embeddings: a `kt.models.BERT` backbone and its tokenizer, texts
in, one vector per text out (MiniLM / sentence-transformers style).

Shape legend: B batch, T sequence length, D hidden size.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import export_encoder
from keras_transformer.models import BERT, BERTFeatureExtractor
from keras_transformer.tasks import inputs
from keras_transformer.tasks.base import Task
from keras_transformer.text import tokenizer_checks

# The sentence-transformers settings file of a checkpoint folder.
SENTENCE_CONFIG = "sentence_bert_config.json"
# Each pooling and the `kt.models.BERTFeatureExtractor` output (and so the
# `kt.export.export_encoder` output) that gives it.
POOLINGS = {"mean": "mean_pooled_output", "pooled": "pooled_output"}


@keras.saving.register_keras_serializable(package="keras_transformer")
class SentenceEncoder(Task):
    """Embeds texts with a `kt.models.BERT` backbone.

    Texts are tokenized and packed in the graph as
    `kt.export.export_encoder` packs them (`[CLS] text [SEP]`, the first
    `sequence_length - 2` tokens kept), and pooled as its outputs are:
    `"mean"` averages the last hidden states over the real tokens (`[CLS]`
    and `[SEP]` included), as sentence-transformers' all-MiniLM-L6-v2 does;
    `"pooled"` is BERT's tanh-pooled `[CLS]` vector.

    Args:
        model: a `kt.models.BERT` backbone.
        tokenizer: its `kt.text` tokenizer, with `[CLS]` and `[SEP]` (its own
            `sequence_length`, if any, is ignored).
        pooling: `"mean"` or `"pooled"`.
        sequence_length: T, the packed length; None is the model's
            `max_sequence_length`.
        **kwargs: base `keras.Model` arguments (`name`).

    Examples:
        >>> import keras_transformer as kt
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "cat", "dog", "sat"]
        >>> backbone = kt.models.BERT(8, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, max_sequence_length=8)
        >>> encoder = kt.tasks.SentenceEncoder(backbone,
        ...                                    kt.text.WordPieceTokenizer(vocab))
        >>> encoder.encode(["a cat sat", "a dog sat"]).shape
        (2, 8)
        >>> encoder.similarity("a cat", ["a cat", "a dog"]).shape
        (1, 2)
    """

    model_classes = (BERT,)

    def __init__(
        self, model, tokenizer, pooling="mean", sequence_length=None, **kwargs
    ):
        super().__init__(model, tokenizer, **kwargs)
        self.cls_id, self.sep_id = inputs.cls_sep_ids(
            tokenizer, "kt.tasks.SentenceEncoder"
        )
        validation.check_choice("pooling", pooling, tuple(POOLINGS))
        self.pooling = pooling
        self.sequence_length = validation.check_sequence_length(
            sequence_length, model.max_sequence_length, minimum=2
        )

    @classmethod
    def _from_folder(cls, model, tokenizer, config, path):
        """A sentence-transformers folder's `sentence_bert_config.json` gives
        `sequence_length` (its `max_seq_length`, `[CLS]` and `[SEP]`
        included, as sentence-transformers truncates)."""
        file = os.path.join(path, SENTENCE_CONFIG)
        settings = validation.read_json(file, missing_ok=True) or {}
        if not isinstance(settings, dict):
            raise ValueError(
                f"{file!r} must hold a JSON object. Received: {settings!r}"
            )
        length = settings.get("max_seq_length")
        limit = model.max_sequence_length
        if length is not None and (
            not validation.is_int(length) or not 2 <= length <= limit
        ):
            raise ValueError(
                f"{file!r}: `max_seq_length` must be an integer in [2, {limit}] "
                f"(the model's max_sequence_length). Received: "
                f"max_seq_length={length!r}"
            )
        # sentence-transformers lower-cases the text first; a tokenizer that
        # does not would give other ids.
        if settings.get("do_lower_case") and not getattr(tokenizer, "lowercase", False):
            raise ValueError(
                f"{file!r} lower-cases texts (do_lower_case=true) but the "
                "folder's tokenizer keeps case; kt.tasks.SentenceEncoder "
                "cannot encode them as sentence-transformers does. Received: "
                f"do_lower_case={settings['do_lower_case']!r}"
            )
        return cls(model, tokenizer, sequence_length=length)

    def encode(self, texts, normalize=True, batch_size=32):
        """One embedding per text.

        Args:
            texts: a string or a list of strings.
            normalize: scale each embedding to unit length (L2), so that dot
                products are cosine similarities.
            batch_size: texts run through the model at a time.

        Returns:
            float32 `(N, D)` for a list of N texts, `(D,)` for a string.

        Raises:
            ValueError: `texts` is empty or holds a non-string.
        """
        single, texts = inputs.check_texts("texts", texts, allow_empty=True)
        validation.check_bool("normalize", normalize)
        inputs.check_batch_size(batch_size)
        embeddings = np.concatenate(
            inputs.in_batches(self._encoder(), [texts], batch_size)
        )
        if normalize:
            embeddings = normalized(embeddings)
        return embeddings[0] if single else embeddings

    def similarity(self, a, b, batch_size=32):
        """Cosine similarities of every embedding of `a` with every one of `b`.

        Args:
            a: a string, a list of strings, or embeddings float `(N_a, D)`
                (as `encode` gives them; normalized here).
            b: the same, for `N_b` texts or embeddings.
            batch_size: texts run through the model at a time.

        Returns:
            float32 `(N_a, N_b)` (a string counts as one text).

        Raises:
            ValueError: `a` or `b` is neither texts nor embeddings of the
                model's hidden size.
        """
        a = self._embeddings(a, "a", batch_size)
        b = self._embeddings(b, "b", batch_size)
        return normalized(a) @ normalized(b).T

    def export(self, path, **options):
        """Writes the string SavedModel of `kt.export.export_encoder` with
        this task's tokenizer and `sequence_length`; served, its output of
        this task's pooling (`mean_pooled_output` or `pooled_output`) is
        `encode(texts, normalize=False)`.

        Args:
            path: the SavedModel directory to write.
            **options: more `export_encoder` arguments (`overwrite`).

        Returns:
            The absolute path written.
        """
        options = {"sequence_length": self.sequence_length, **options}
        return export_encoder(self.model, self.tokenizer, path, **options)

    def get_config(self):
        return {
            **super().get_config(),
            "pooling": self.pooling,
            "sequence_length": self.sequence_length,
        }

    def _embeddings(self, value, name, batch_size):
        """Embeddings `(N, D)` of texts, or the embeddings `value` given."""
        if isinstance(value, np.ndarray | tf.Tensor):
            array = np.asarray(value)
            hidden_dim = self.model.hidden_dim
            if (
                array.dtype.kind != "f"
                or array.ndim not in (1, 2)
                or array.shape[-1] != hidden_dim
                or array.size == 0
            ):
                raise ValueError(
                    f"`{name}` must be texts or float embeddings (N, "
                    f"{hidden_dim}). Received: {name} with dtype {array.dtype} "
                    f"and shape {array.shape}"
                )
            return array.reshape(-1, hidden_dim).astype("float32")
        _, texts = inputs.check_texts(name, value, allow_empty=True)
        return self.encode(texts, normalize=False, batch_size=batch_size)

    def _encoder(self):
        """Strings `(B,)` -> float32 embeddings `(B, D)`, compiled once."""

        def build():
            tokenizer = tokenizer_checks.without_sequence_length(self.tokenizer)
            # Not an attribute: the backbone's weights are saved once.
            extractor = BERTFeatureExtractor(self.model)
            output = POOLINGS[self.pooling]

            @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
            def encode(texts):
                packed = inputs.pack_texts(
                    tokenizer, [texts], self.sequence_length, self.cls_id, self.sep_id
                )
                outputs = extractor(packed, training=False)
                return tf.cast(outputs[output], tf.float32)  # (B, D)

            return encode

        return self._compiled("encode", build)


def normalized(embeddings):
    """Embeddings `(..., D)` scaled to unit L2 norm (zero vectors stay 0)."""
    norms = np.linalg.norm(embeddings, axis=-1, keepdims=True)
    return (embeddings / np.maximum(norms, 1e-12)).astype("float32")
