"""Filling in masked words: a `kt.models.BERTMaskedLM` and its tokenizer,
texts with `[MASK]` in, the likeliest tokens for each mask out.

Shape legend: B batch, T sequence length, P masks per text, K top_k,
V vocabulary size.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.export import export_fill_mask
from keras_transformer.models import BERTMaskedLM
from keras_transformer.tasks import inputs
from keras_transformer.tasks.base import Task
from keras_transformer.text import checks as text_checks
from keras_transformer.text import packing, tokenizer_checks


@keras.saving.register_keras_serializable(package="keras_transformer")
class FillMask(Task):
    """Predicts the tokens hidden by `[MASK]` with a `kt.models.BERTMaskedLM`.

    The text is split at each `[MASK]`, the pieces are tokenized and joined
    by the `[MASK]` id (as Hugging Face's tokenizers treat the mask token),
    then packed as `[CLS] text [SEP]` and trimmed to the model's
    `max_sequence_length`, as `kt.text.masked_lm_dataset` packs training
    texts.

    Args:
        model: a `kt.models.BERTMaskedLM`.
        tokenizer: its `kt.text` tokenizer, with `[CLS]`, `[SEP]` and
            `[MASK]` and no `bos_token` or `eos_token` (its own
            `sequence_length`, if any, is ignored).
        **kwargs: base `keras.Model` arguments (`name`).

    Examples:
        >>> import keras_transformer as kt
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "sky",
        ...          "is", "blue"]
        >>> backbone = kt.models.BERT(9, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, max_sequence_length=8)
        >>> fill = kt.tasks.FillMask(kt.models.BERTMaskedLM(backbone),
        ...                          kt.text.WordPieceTokenizer(vocab))
        >>> best = fill.predict("The [MASK] is blue.", top_k=2)
        >>> len(best), sorted(best[0])
        (2, ['score', 'sequence', 'token', 'token_id'])
    """

    model_classes = (BERTMaskedLM,)

    def __init__(self, model, tokenizer, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        self.cls_id, self.sep_id, self.mask_id = (
            tokenizer_checks.check_fill_mask_tokenizer(
                tokenizer, model.backbone.vocabulary_size, "kt.tasks.FillMask"
            )
        )
        self.sequence_length = model.backbone.max_sequence_length

    @property
    def mask_token(self):
        """The mask token texts write: `"[MASK]"`."""
        return text_checks.MASK

    def predict(self, texts, top_k=5, batch_size=32):
        """The `top_k` likeliest tokens at each `[MASK]` of each text.

        Args:
            texts: a string or a list of strings, each with at least one
                `[MASK]` within the model's `max_sequence_length` tokens.
            top_k: K, how many tokens to give for each mask.
            batch_size: texts run through the model at a time.

        Returns:
            As Hugging Face's fill-mask pipeline: for a text with one
            `[MASK]`, a list of K dicts, likeliest first, `{"token": str
            (the vocabulary's token, e.g. "##s"), "token_id": int, "score":
            float (its probability), "sequence": str (the text with that
            token at the mask, detokenized; other masks stay "[MASK]")}`;
            for a text with several masks, one such list per mask. A string
            gives that; a list of texts gives a list of them.

        Raises:
            ValueError: `texts` is empty or holds a non-string; a text has
                no `[MASK]`, or its masks lie past the model's length;
                `top_k` is not in `[1, V]`.
        """
        single, texts = inputs.check_texts("texts", texts, allow_empty=True)
        for i, text in enumerate(texts):
            if self.mask_token not in text:
                raise ValueError(
                    f"Each text must hold {self.mask_token}. "
                    f"Received: texts[{i}]={text!r}"
                )
        validation.check_top_k(top_k, self.model.backbone.vocabulary_size)
        inputs.check_batch_size(batch_size)
        batches = inputs.in_batches(self._packer(), [texts], batch_size)
        found = np.concatenate(
            [(packed["token_ids"] == self.mask_id).sum(1) for packed in batches]
        )
        for i, count in enumerate(found):
            if count < texts[i].count(self.mask_token):
                raise ValueError(
                    f"Each [MASK] must lie within the model's "
                    f"max_sequence_length ({self.sequence_length} tokens, "
                    f"[CLS] and [SEP] included). Received: texts[{i}]={texts[i]!r}"
                )
        fill = self._filler()
        results = []
        for packed in batches:
            probabilities, token_ids = fill(packed, tf.constant(top_k))
            results += self._candidates(
                packed, probabilities.numpy(), token_ids.numpy()
            )
        return results[0] if single else results

    def export(self, path, top_k=5, **options):
        """Writes the string SavedModel of `kt.export.export_fill_mask` with
        this task's tokenizer; served, a text's `token`, `token_id`, `score`
        and `sequence` are `predict(text, top_k)`'s at its first `[MASK]`.

        Args:
            path: the SavedModel directory to write.
            top_k: K, how many tokens the SavedModel gives for a mask.
            **options: more `export_fill_mask` arguments (`overwrite`).

        Returns:
            The absolute path written.
        """
        return export_fill_mask(
            self.model, self.tokenizer, path, top_k=top_k, **options
        )

    def _candidates(self, packed, probabilities, token_ids):
        """The result dicts of one batch (`probabilities` and `token_ids`
        `(B, P, K)`): each text's list per mask."""
        results, sequences = [], []
        for row, ids in enumerate(packed["token_ids"]):
            length = int(packed["padding_mask"][row].sum())
            text = ids[1 : length - 1]  # without [CLS] and [SEP]
            positions = np.flatnonzero(text == self.mask_id)
            masks = []
            for p, position in enumerate(positions):
                candidates = []
                for k, token_id in enumerate(token_ids[row, p].tolist()):
                    filled = text.copy()
                    filled[position] = token_id
                    sequences.append(filled.tolist())
                    candidates.append(
                        {
                            "token": self.tokenizer.id_to_token(token_id),
                            "token_id": token_id,
                            "score": float(probabilities[row, p, k]),
                        }
                    )
                masks.append(candidates)
            results.append(masks)
        decoded = iter(
            self.tokenizer.detokenize(sequences, skip_special_tokens=True).numpy()
        )
        for masks in results:
            for candidates in masks:
                for candidate in candidates:
                    candidate["sequence"] = next(decoded).decode("utf-8")
        return [masks[0] if len(masks) == 1 else masks for masks in results]

    def _packer(self):
        """Strings `(B,)` -> packed inputs `(B, T)`, masks kept as `[MASK]`."""

        def build():
            tokenizer = tokenizer_checks.without_sequence_length(self.tokenizer)

            @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
            def pack(texts):
                return packing.pack_masked_texts(
                    tokenizer,
                    texts,
                    self.sequence_length,
                    self.cls_id,
                    self.sep_id,
                    self.mask_id,
                )

            return pack

        return self._compiled("pack", build)

    def _filler(self):
        """Packed inputs `(B, T)` and K -> probabilities and ids `(B, P, K)`
        of the likeliest tokens at each mask (padded with position 0 where a
        text has fewer masks)."""

        def build():
            specs = {
                "token_ids": tf.TensorSpec([None, None], tf.int32),
                "segment_ids": tf.TensorSpec([None, None], tf.int32),
                "padding_mask": tf.TensorSpec([None, None], tf.bool),
            }

            @tf.function(input_signature=[specs, tf.TensorSpec([], tf.int32)])
            def fill(packed, top_k):
                is_mask = packed["token_ids"] == self.mask_id  # (B, T)
                positions = tf.broadcast_to(
                    tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)
                )
                positions = tf.ragged.boolean_mask(positions, is_mask).to_tensor()
                logits = self.model(
                    {**packed, "mask_positions": positions}, training=False
                )  # (B, P, V)
                probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
                return tf.math.top_k(probabilities, top_k)

            return fill

        return self._compiled("fill", build)
