"""Token embeddings plus sinusoidal or learned position vectors.

Shape legend: B batch, T sequence length, E hidden size.
"""

import keras
import numpy as np
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers import masking, quantization

LAYOUTS = ("interleaved", "concatenated")


def sinusoidal_encoding(length, depth, layout="interleaved"):
    """The original paper's sinusoidal position encoding.

    `"interleaved"` (the paper's formula):
    `PE[p, 2i] = sin(p / 10000^(2i/depth))` and
    `PE[p, 2i+1] = cos(p / 10000^(2i/depth))`. `"concatenated"` puts the
    same sines in the first half and the cosines in the second,
    `PE[p, i] = sin(...)`, `PE[p, ceil(depth/2) + i] = cos(...)`, as Marian
    (and so Hugging Face's `MarianMTModel`), fairseq and tensor2tensor do.

    Args:
        length: number of positions.
        depth: encoding size; may be odd (the last column is then a sine).
        layout: `"interleaved"` or `"concatenated"`.

    Returns:
        A float32 numpy array of shape `(length, depth)`.

    Examples:
        >>> import keras_transformer as kt
        >>> kt.layers.sinusoidal_encoding(50, 16).shape
        (50, 16)
    """
    validation.check_positive_int("length", length)
    validation.check_positive_int("depth", depth)
    validation.check_choice("layout", layout, LAYOUTS)
    positions = np.arange(length, dtype="float64")[:, None]
    even = np.arange(0, depth, 2, dtype="float64")  # the "2i" of the formula
    angles = positions / np.power(10000.0, even / depth)
    sines, cosines = np.sin(angles), np.cos(angles[:, : depth // 2])
    if layout == "concatenated":
        return np.concatenate([sines, cosines], axis=1).astype("float32")
    encoding = np.zeros((length, depth), dtype="float64")
    encoding[:, 0::2] = sines
    encoding[:, 1::2] = cosines
    return encoding.astype("float32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding plus a sinusoidal or learned position vector.

    Token id 0 is padding: with `mask_zero=True` the layer emits a Keras mask
    that downstream blocks use as their padding mask.

    Args:
        vocabulary_size: number of token ids.
        sequence_length: the longest sequence the layer accepts.
        hidden_dim: embedding size.
        position: `"sinusoidal"` (fixed, the original paper) or `"learned"`
            (BERT, GPT-2).
        mask_zero: whether token id 0 is masked as padding.
        scale_embeddings: multiply token embeddings by √hidden_dim before adding
            positions, as in the original paper.
        sinusoidal_layout: `"interleaved"` (the paper's sin/cos pairs) or
            `"concatenated"` (all sines, then all cosines: Marian's); see
            `sinusoidal_encoding`.
        position_offset: learned positions only: position `p` reads row
            `p + position_offset` of a table of `sequence_length +
            position_offset` rows (BART's learned positions have offset 2).
        token_embedding: optionally a built `keras.layers.Embedding` to use
            as the token table instead of a new one, to share it with
            another layer (BART's encoder and decoder share their tokens
            but each has its own learned positions). Not part of
            `get_config`: the model that shares it passes it again.
        embeddings_initializer: initializer of token (and learned position)
            embeddings.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: int token ids `(B, T)` with `T <= sequence_length`.
        start_index: position of `inputs[:, 0]` (used when decoding with a
            cache, one token at a time; a `(B,)` tensor: each row's own).
        reverse: if True, `inputs` are hidden states `(B, T, hidden_dim)` and
            the layer returns float32 logits `(B, T, vocabulary_size)` through
            the transposed token embedding (a tied output projection).

    Returns:
        `(B, T, hidden_dim)` embeddings, or logits with `reverse=True`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> embed = kt.layers.PositionalEmbedding(100, 16, 8, position="learned")
        >>> tuple(embed(np.array([[5, 7, 0, 0]])).shape)
        (1, 4, 8)
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        hidden_dim,
        position="sinusoidal",
        mask_zero=True,
        scale_embeddings=False,
        embeddings_initializer="uniform",
        sinusoidal_layout="interleaved",
        position_offset=0,
        token_embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if token_embedding is not None and not (
            isinstance(token_embedding, keras.layers.Embedding)
            and token_embedding.built
            and tuple(token_embedding.embeddings.shape) == (vocabulary_size, hidden_dim)
        ):
            raise ValueError(
                "`token_embedding` must be a built keras.layers.Embedding of shape "
                f"({vocabulary_size}, {hidden_dim}). Received: "
                f"token_embedding={token_embedding!r}"
            )
        self._shared_token_embedding = token_embedding
        validation.check_positive_int("vocabulary_size", vocabulary_size)
        validation.check_positive_int("sequence_length", sequence_length)
        validation.check_positive_int("hidden_dim", hidden_dim)
        validation.check_choice("position", position, ("sinusoidal", "learned"))
        validation.check_choice("sinusoidal_layout", sinusoidal_layout, LAYOUTS)
        if (
            isinstance(position_offset, bool)
            or not isinstance(position_offset, int)
            or position_offset < 0
            or (position_offset and position != "learned")
        ):
            raise ValueError(
                "`position_offset` must be an integer >= 0, and 0 unless "
                f'position="learned". Received: position_offset={position_offset!r}'
                f" with position={position!r}"
            )
        self.sinusoidal_layout = sinusoidal_layout
        self.position_offset = position_offset
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.hidden_dim = hidden_dim
        self.position = position
        self.mask_zero = mask_zero
        self.scale_embeddings = scale_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = mask_zero

    def build(self, inputs_shape):
        validation.check_rank("inputs", inputs_shape, 2)
        if self._shared_token_embedding is not None:
            self.token_embedding = self._shared_token_embedding
        else:
            self._build_token_embedding(inputs_shape)
        self._build_positions()
        self.built = True

    def _build_token_embedding(self, inputs_shape):
        self.token_embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.hidden_dim,
            embeddings_initializer=keras.initializers.get(
                keras.initializers.serialize(self.embeddings_initializer)
            ),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build(inputs_shape)

    def _build_positions(self):
        if self.position == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.sequence_length + self.position_offset, self.hidden_dim),
                initializer=keras.initializers.get(
                    keras.initializers.serialize(self.embeddings_initializer)
                ),
            )
        else:
            # A constant, not a weight: nothing to train or save.
            self.position_embeddings = sinusoidal_encoding(
                self.sequence_length, self.hidden_dim, self.sinusoidal_layout
            )

    def call(self, inputs, start_index=0, reverse=False):
        if reverse:
            # Tied output projection: hidden states (B, T, E) -> float32
            # logits (B, T, vocabulary_size) through the token embedding.
            logits = quantization.embedding_logits(inputs, self.token_embedding)
            return ops.cast(logits, "float32")
        length = inputs.shape[1]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.sequence_length:
                raise ValueError(
                    f"`inputs` is longer than `sequence_length={self.sequence_length}`."
                    f" Received: inputs with shape {tuple(inputs.shape)}"
                    + (f" at start_index={start_index}" if start_index else "")
                )
        embeddings = self.token_embedding(inputs)  # (B, T, E)
        if self.scale_embeddings:
            embeddings = embeddings * ops.cast(
                ops.sqrt(float(self.hidden_dim)), embeddings.dtype
            )
        table = ops.convert_to_tensor(self.position_embeddings)
        if ops.ndim(start_index) == 1:  # each row at its own position
            at = masking.positions(ops.shape(inputs)[1], start_index)  # (B, T)
            rows = ops.take(table, at + self.position_offset, axis=0)
            return embeddings + ops.cast(rows, embeddings.dtype)
        positions = ops.slice(
            table,
            [start_index + self.position_offset, 0],
            [ops.shape(inputs)[1], self.hidden_dim],
        )
        return embeddings + ops.cast(positions, embeddings.dtype)[None]

    def compute_mask(self, inputs, mask=None):
        # Keras calls this without `reverse`; reversed inputs are rank 3.
        if not self.mask_zero or len(inputs.shape) != 2:
            return None
        return ops.not_equal(inputs, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "sequence_length": self.sequence_length,
                "hidden_dim": self.hidden_dim,
                "position": self.position,
                "mask_zero": self.mask_zero,
                "scale_embeddings": self.scale_embeddings,
                "sinusoidal_layout": self.sinusoidal_layout,
                "position_offset": self.position_offset,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config

    def compute_output_shape(self, inputs_shape):
        if len(inputs_shape) == 3:  # reverse=True: hidden states -> logits
            return (*inputs_shape[:-1], self.vocabulary_size)
        return (*inputs_shape, self.hidden_dim)
