"""Whisper: the speech-to-text encoder-decoder.

The encoder reads log-mel frames (`kt.layers.LogMelSpectrogram`: 3,000
frames of 10 ms for 30 s of audio): two convolutions of kernel 3 with GELU
(the second of stride 2, halving the frames to 1,500), fixed sinusoidal
positions, pre-LN blocks and a final LayerNorm. The decoder is GPT-2-like:
tokens plus learned positions (448), pre-LN blocks with cross-attention, a
final LayerNorm and the token table as output projection. The key
projections have no bias.

Shape legend: B batch, F log-mel frames (3,000), M mel bins, S encoder
positions (F / 2), T target length, E hidden size, V vocabulary size
(ours: the checkpoint's + 1, id 0 being padding).
"""

import math

import keras
import numpy as np
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers import (
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    exclude_padding_logit,
    products,
    quantization,
)
from keras_transformer.models.base import (
    ModelMixin,
    constructor_arguments,
    model_factory,
)
from keras_transformer.models.decoding import Seq2SeqLM
from keras_transformer.models.initializers import initializer, normal_initializer


def exact_gelu(x):
    """The erf GELU of Whisper's stem."""
    return keras.activations.gelu(x, approximate=False)


def check_config(config):
    """Raises a ValueError naming the first impossible value of a
    `Whisper`'s constructor arguments `config`."""
    vocabulary_size = config["vocabulary_size"]
    if not validation.is_int(vocabulary_size) or vocabulary_size < 3:
        raise ValueError(
            "`vocabulary_size` must be an integer >= 3 (id 0 is padding). "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    for name in ["num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                 "num_mel_bins", "max_source_positions",
                 "max_sequence_length"]:  # fmt: skip
        validation.check_positive_int(name, config[name])
    validation.check_positive_int(
        "num_decoder_layers", config["num_decoder_layers"], allow_none=True
    )
    if config["hidden_dim"] % config["num_heads"]:
        raise ValueError(
            "`hidden_dim` must be divisible by `num_heads`. Received: "
            f"hidden_dim={config['hidden_dim']}, num_heads={config['num_heads']}"
        )
    validation.check_positive_number("layer_norm_epsilon", config["layer_norm_epsilon"])
    validation.check_rate("dropout", config["dropout"])
    validation.check_token_id(
        "decoder_start_token_id", config["decoder_start_token_id"], vocabulary_size
    )
    for name in ("generation_config", "speech_settings"):
        if config[name] is not None and not isinstance(config[name], dict):
            raise ValueError(
                f"`{name}` must be a dict or None. Received: {name}={config[name]!r}"
            )


def sinusoids(length, channels):
    """Whisper's encoder positions `(length, channels)`: sines then cosines
    of `length` positions at `channels / 2` timescales from 1 to 10,000."""
    increment = math.log(10000) / (channels // 2 - 1)
    timescales = np.exp(-increment * np.arange(channels // 2))
    angles = np.arange(length)[:, None] * timescales[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype("float32")


class AddedPositions(keras.layers.Layer):
    """Adds the rows `start .. start + T - 1` of a `(length, E)` table
    (`embeddings`) to `(B, T, E)` inputs."""

    def __init__(self, length, embeddings_initializer, **kwargs):
        super().__init__(**kwargs)
        self.length = length
        self.embeddings_initializer = embeddings_initializer

    def build(self, inputs_shape):
        self.embeddings = self.add_weight(
            shape=(self.length, inputs_shape[-1]),
            initializer=self.embeddings_initializer,
            trainable=self.trainable,
            name="embeddings",
        )

    def call(self, inputs, start=0):
        rows = ops.slice(
            self.embeddings, [start, 0], [ops.shape(inputs)[1], inputs.shape[-1]]
        )
        return inputs + ops.cast(rows, inputs.dtype)[None]


@keras.saving.register_keras_serializable(package="keras_transformer")
class Whisper(ModelMixin, Seq2SeqLM):
    """Whisper (tiny ... large-v3), the speech-to-text encoder-decoder,
    built functionally.

    Its source is log-mel frames `(B, F, M)`, frames first, as
    `kt.layers.LogMelSpectrogram` computes them from 16 kHz audio
    (F = 3,000 for 30 s); `kt.tasks.SpeechRecognizer` goes from audio to
    text. Token id 0 is padding; id `i > 0` is the checkpoint's id `i - 1`,
    so the weights hold exactly the checkpoint's rows and `count_params()`
    equals transformers' count. `kt.models.from_pretrained` loads
    `WhisperForConditionalGeneration` folders.

    Args:
        vocabulary_size: number of token ids: the checkpoint's + 1.
        num_layers: encoder blocks.
        num_heads: attention heads per block (encoder and decoder).
        hidden_dim: hidden size E (`d_model`).
        intermediate_dim: feed-forward width (`encoder_ffn_dim`).
        num_mel_bins: M, the log-mel bins of a frame (80; 128 for
            large-v3).
        num_decoder_layers: decoder blocks; None: `num_layers`.
        max_source_positions: encoder positions (1,500: 30 s); the encoder
            reads at most twice as many frames.
        max_sequence_length: decoder positions (448).
        layer_norm_epsilon: epsilon of every LayerNorm.
        dropout: dropout rate.
        decoder_start_token_id: the decoder's first token
            (`<|startoftranscript|>`, in our ids).
        generation_config: a dict of `kt.generation.generate` keyword
            arguments the model is meant to be decoded with (from a
            checkpoint's `generation_config.json`: end token, suppressed
            ids ...).
        speech_settings: Whisper's own decoding settings, in our ids:
            `lang_to_id`, `task_to_id`, `no_timestamps_token_id`,
            `max_initial_timestamp_index` ... (see `kt.tasks.SpeechRecognizer`).
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: `{"encoder_features": (B, F, M)` float log-mel frames,
            `"decoder_token_ids": (B, T)` int, 0-padded on the right`}`.

    Returns:
        float32 logits `(B, T, vocabulary_size)`; the padding id's,
        `[..., 0]`, is -1e9 (`kt.layers.exclude_padding_logit`).

    Layers (attributes): `conv1`, `conv2` (`keras.layers.Conv1D`),
    `encoder_position_embedding` (the fixed sinusoids, not trained),
    `encoder_blocks`, `encoder_norm`, `token_embedding` (`vocabulary_size -
    1` rows, read at `ids - 1`, also the output projection),
    `decoder_position_embedding`, `decoder_blocks`, `decoder_norm`.

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.Whisper(60, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, num_mel_bins=4,
        ...                           max_source_positions=10,
        ...                           decoder_start_token_id=1)
        >>> logits = model({"encoder_features": np.zeros((1, 20, 4), "float32"),
        ...                 "decoder_token_ids": np.array([[1, 9]])})
        >>> tuple(logits.shape)
        (1, 2, 60)
        >>> kt.models.Whisper.parameter_count(
        ...     **kt.models.PRESETS["whisper_tiny"]["config"])
        37760640

    References:
        Radford et al., "Robust Speech Recognition via Large-Scale Weak
        Supervision", 2022.
    """

    family = "whisper"
    source_name = "encoder_features"

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=None,
        num_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        num_mel_bins=80,
        num_decoder_layers=None,
        max_source_positions=1500,
        max_sequence_length=448,
        layer_norm_epsilon=1e-5,
        dropout=0.0,
        decoder_start_token_id=1,
        generation_config=None,
        speech_settings=None,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        check_config(config)
        # === Layers ===
        kernels = normal_initializer(0.02)
        self.conv1 = products.Conv1D(
            hidden_dim, 3, padding="same", kernel_initializer=kernels, name="conv1"
        )
        # torch pads one frame on each side; Keras' "same" would pad the
        # right only at stride 2: pad by hand, then "valid".
        self.conv2 = products.Conv1D(
            hidden_dim, 3, strides=2, kernel_initializer=kernels, name="conv2"
        )
        self.encoder_position_embedding = AddedPositions(
            max_source_positions,
            initializer(
                keras.initializers.Constant(sinusoids(max_source_positions, hidden_dim))
            ),
            trainable=False,
            name="encoder_position_embedding",
        )
        block_options = dict(
            dropout=dropout,
            activation="gelu",  # the exact (erf) GELU
            normalize_first=True,
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=kernels,
            key_bias=False,
        )
        self.encoder_blocks = [
            TransformerEncoderBlock(
                num_heads, intermediate_dim, name=f"encoder_layer_{i}", **block_options
            )
            for i in range(num_layers)
        ]
        self.encoder_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="encoder_norm"
        )
        self.token_embedding = quantization.TiedEmbedding(
            vocabulary_size - 1,
            hidden_dim,
            embeddings_initializer=kernels,
            name="token_embedding",
        )
        self.decoder_position_embedding = AddedPositions(
            max_sequence_length, kernels, name="decoder_position_embedding"
        )
        self.decoder_blocks = [
            TransformerDecoderBlock(
                num_heads, intermediate_dim, name=f"decoder_layer_{i}", **block_options
            )
            for i in range(num_decoder_layers or num_layers)
        ]
        self.decoder_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="decoder_norm"
        )
        self.dropout_layer = keras.layers.Dropout(dropout, name="dropout")
        # === Functional model ===
        inputs = {
            "encoder_features": keras.Input(
                (None, num_mel_bins), dtype="float32", name="encoder_features"
            ),
            "decoder_token_ids": keras.Input(
                (None,), dtype="int32", name="decoder_token_ids"
            ),
        }
        context = self.encode(inputs["encoder_features"])
        logits, _ = self._decode(inputs["decoder_token_ids"], context, None)
        super().__init__(inputs, logits, **{"name": "whisper", **kwargs})
        self._set_config(**config)

    @property
    def decoder_vocabulary_size(self):
        return self.vocabulary_size

    @property
    def num_frames(self):
        """The log-mel frames of 30 s, which the encoder reads:
        `2 * max_source_positions`."""
        return 2 * self.max_source_positions

    def encode(self, encoder_features):
        """Encoder half of the forward pass: `(B, F, M)` log-mel frames ->
        `(B, F / 2, E)`."""
        x = ops.cast(encoder_features, self.conv1.compute_dtype)
        x = products.activate(exact_gelu, self.conv1(x))
        x = ops.pad(x, [[0, 0], [1, 1], [0, 0]])
        x = products.activate(exact_gelu, self.conv2(x))  # (B, S, E)
        x = self.dropout_layer(self.encoder_position_embedding(x))
        for block in self.encoder_blocks:
            x = block(x)
        return self.encoder_norm(x)

    def check_source(self, source):
        """The log-mel frames of a `generate` call, checked: float `(B, F,
        M)` with F = `num_frames` (30 s, what Whisper reads) and no NaN or
        infinity."""
        name = f"inputs[{self.source_name!r}]"
        frames = np.asarray(source)
        expected = (self.num_frames, self.num_mel_bins)
        if (
            frames.ndim != 3
            or frames.shape[1:] != expected
            or not np.issubdtype(frames.dtype, np.floating)
        ):
            raise ValueError(
                f"`{name}` must be float log-mel frames of shape (batch, "
                f"{expected[0]}, {expected[1]}) (`kt.layers.LogMelSpectrogram` "
                f"of 30 s). Received: dtype {frames.dtype}, shape {frames.shape}"
            )
        if not np.isfinite(frames).all():
            raise ValueError(
                f"`{name}` holds NaN or infinite values. Received: {name} with "
                f"{int((~np.isfinite(frames)).sum())} non-finite value(s)"
            )
        return frames.astype("float32")

    def pad_source(self, source, length):
        """Log-mel frames need no padding: always `num_frames` long."""
        return ops.convert_to_tensor(source, "float32")

    def source_mask(self, source):
        """Every encoder position may be attended to: `(B, S)` True."""
        batch = ops.shape(source)[0]
        return ops.ones((batch, self.max_source_positions), "bool")

    def _decode(
        self,
        decoder_token_ids,
        context,
        context_mask,
        caches=None,
        index=None,
        cross_caches=None,
    ):
        # The hook of `kt.models.Seq2SeqLM`: the full decoder over
        # `context`, or with `caches` one cached pass from position `index`.
        start = 0 if index is None else index
        padding_mask = ops.not_equal(decoder_token_ids, 0)  # (B, T)
        # Our id i is the checkpoint's row i - 1; padding reads row 0, masked.
        y = self.token_embedding(ops.maximum(decoder_token_ids - 1, 0))
        y = self.dropout_layer(self.decoder_position_embedding(y, start=start))
        y, updated = self._decoder_blocks(
            y, context, context_mask, caches, start, cross_caches,
            padding_mask=padding_mask,
        )  # fmt: skip
        y = self.decoder_norm(y)
        logits = self.token_embedding(y, reverse=True)
        logits = ops.pad(ops.cast(logits, "float32"), [[0, 0], [0, 0], [1, 0]])
        logits = exclude_padding_logit(logits)  # (B, T, V): id 0 is no token
        return logits, updated

    @classmethod
    def parameter_count(
        cls,
        vocabulary_size,
        *,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        num_mel_bins=80,
        num_decoder_layers=None,
        max_source_positions=1500,
        max_sequence_length=448,
        **other_arguments,
    ):
        """What `count_params()` of the model with these constructor
        arguments gives, from the sizes alone (no weight is made)."""
        e, f = hidden_dim, intermediate_dim
        attention = 4 * e * e + 3 * e  # no key bias
        feedforward = 2 * e * f + f + e
        encoder = num_layers * (attention + feedforward + 4 * e)
        decoder = (num_decoder_layers or num_layers) * (
            2 * attention + feedforward + 6 * e
        )
        convolutions = 3 * num_mel_bins * e + e + 3 * e * e + e
        positions = (max_source_positions + max_sequence_length) * e
        table = (vocabulary_size - 1) * e
        return table + positions + convolutions + encoder + decoder + 4 * e


whisper = model_factory(
    Whisper,
    "whisper",
    "Builds a `kt.models.Whisper` speech-to-text encoder-decoder.",
    'A `kt.models.Whisper` with inputs `{"encoder_features": (B, F, M), '
    '"decoder_token_ids": (B, T)}` returning float32 logits `(B, T, '
    "vocabulary_size)`.",
    """
    >>> import keras_transformer as kt
    >>> model = kt.models.whisper(60, num_layers=1, num_heads=2, hidden_dim=8,
    ...                           intermediate_dim=16, num_mel_bins=4,
    ...                           max_source_positions=10)
    >>> model.num_frames  # the encoder reads 20 frames
    20
    """,
)
__test__ = {"whisper": whisper}  # its example runs with the module's
