"""T5 and FLAN-T5: the text-to-text encoder-decoder with relative
position biases.

Pre-norm blocks with RMS normalization and no biases, attention scores
without the `1/sqrt(D)` scale, and a learned bias per head and bucket of
relative distance (`kt.layers.RelativePositionBias`) that the first block
of each stack computes and every block of that stack adds; cross-attention
has none.

Shape legend: B batch, S source length, T target length, E hidden size,
V vocabulary size (ours: the checkpoint's + 1, id 0 being padding).
"""

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers import (
    RelativePositionBias,
    RMSNormalization,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    exclude_padding_logit,
    gelu_approximate,
    quantization,
)
from keras_transformer.layers.float32_residual import (
    Float32ResidualDecoderBlock,
    Float32ResidualEncoderBlock,
)
from keras_transformer.models.base import (
    ModelMixin,
    constructor_arguments,
    model_factory,
)
from keras_transformer.models.decoding import Seq2SeqLM
from keras_transformer.models.initializers import initializer, normal_initializer

FEEDFORWARDS = ("relu", "gated-gelu")


def check_config(config):
    """Raises a ValueError naming the first impossible value of a `T5`'s
    constructor arguments `config`."""
    vocabulary_size = config["vocabulary_size"]
    if not validation.is_int(vocabulary_size) or vocabulary_size < 3:
        raise ValueError(
            "`vocabulary_size` must be an integer >= 3 (id 0 is padding, 1 the "
            f"checkpoint's pad and start token). Received: "
            f"vocabulary_size={vocabulary_size!r}"
        )
    for name in ["num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                 "max_sequence_length"]:  # fmt: skip
        validation.check_positive_int(name, config[name])
    for name in ("key_dim", "num_decoder_layers"):
        validation.check_positive_int(name, config[name], allow_none=True)
    if config["key_dim"] is None and config["hidden_dim"] % config["num_heads"]:
        raise ValueError(
            "`hidden_dim` must be divisible by `num_heads` when `key_dim` is not "
            f"given. Received: hidden_dim={config['hidden_dim']}, "
            f"num_heads={config['num_heads']}"
        )
    validation.check_choice("feedforward", config["feedforward"], FEEDFORWARDS)
    validation.check_bool("tie_embeddings", config["tie_embeddings"])
    validation.check_positive_number("layer_norm_epsilon", config["layer_norm_epsilon"])
    validation.check_rate("dropout", config["dropout"])
    validation.check_token_id(
        "decoder_start_token_id", config["decoder_start_token_id"], vocabulary_size
    )
    for name in ("generation_config", "task_settings"):
        if config[name] is not None and not isinstance(config[name], dict):
            raise ValueError(
                f"`{name}` must be a dict or None. Received: {name}={config[name]!r}"
            )


def fan_in_normal():
    """N(0, 1 / fan-in) weights (zeros inside `placeholder_weights()`)."""
    return initializer(
        keras.initializers.VarianceScaling(1.0, "fan_in", "untruncated_normal")
    )


@keras.saving.register_keras_serializable(package="keras_transformer")
class T5(ModelMixin, Seq2SeqLM):
    """T5 (v1.0: ReLU, tied head) and T5 v1.1 / FLAN-T5 (gated GELU,
    untied head), built functionally.

    One token table feeds the encoder and the decoder. Each stack is pre-norm
    blocks (RMS normalization without mean or bias, attention and
    feed-forward without biases, scores unscaled) and a final RMS
    normalization; the first block's `kt.layers.RelativePositionBias`
    (bidirectional in the encoder, causal in the decoder) is added to the
    self-attention scores of every block of its stack. The logits are the
    decoder output times `hidden_dim ** -0.5` through the transposed token
    table (`tie_embeddings=True`, T5 v1.0), or through `lm_head`. Token id
    0 is padding; id `i > 0` is the checkpoint's id `i - 1` (T5's pad, its
    decoder start, is our 1), so the weights hold exactly the checkpoint's
    rows and `count_params()` equals transformers' count.
    `kt.models.from_pretrained` loads `T5ForConditionalGeneration` folders.

    Args:
        vocabulary_size: number of token ids: the checkpoint's + 1.
        num_layers: encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E (`d_model`).
        intermediate_dim: feed-forward width (`d_ff`).
        key_dim: size of each head (`d_kv`); `key_dim * num_heads` need not
            be `hidden_dim`. None: `hidden_dim // num_heads`.
        num_decoder_layers: decoder blocks; None: `num_layers`.
        feedforward: `"relu"` (two dense layers, T5 v1.0) or `"gated-gelu"`
            (`kt.layers.GatedFeedForward` with the tanh GELU, T5 v1.1 and
            FLAN-T5): Hugging Face's `feed_forward_proj`.
        num_buckets: relative position buckets (both directions).
        max_distance: the distance from which positions share a bucket.
        tie_embeddings: logits through the rescaled, transposed token table
            instead of `lm_head`.
        layer_norm_epsilon: epsilon of every RMS normalization.
        dropout: dropout rate (0.1 in the checkpoints' configs).
        max_sequence_length: the longest source and target generation pads
            to (relative positions have no limit of their own).
        decoder_start_token_id: the token the decoder starts from (T5's pad:
            our 1); `kt.generation.generate` may be given only
            `encoder_token_ids`.
        generation_config: a dict of `kt.generation.generate` keyword
            arguments the model is meant to be decoded with (from a
            checkpoint's `generation_config.json`); see `kt.models.Seq2Seq`.
        task_settings: task name (`"summarization"`,
            `"translation_en_to_de"` ...) -> `{"prefix": str, generate
            keyword arguments}`: a checkpoint's `task_specific_params`,
            which `kt.tasks.Summarizer` and `kt.tasks.Translator` read.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: `{"encoder_token_ids": (B, S), "decoder_token_ids": (B, T)}`
            int, 0-padded on the right.

    Returns:
        float32 logits `(B, T, vocabulary_size)`; the padding id's,
        `[..., 0]`, is -1e9 (`kt.layers.exclude_padding_logit`).

    Layers (attributes): `token_embedding` (`vocabulary_size - 1` rows,
    read at `ids - 1`), `encoder_position_bias` and `decoder_position_bias`
    (`kt.layers.RelativePositionBias`), `encoder_blocks`
    (`kt.layers.TransformerEncoderBlock`), `encoder_norm`, `decoder_blocks`
    (`kt.layers.TransformerDecoderBlock`), `decoder_norm`
    (`kt.layers.RMSNormalization`), `lm_head` (None when tied).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.T5(40, num_layers=1, num_heads=2, hidden_dim=8,
        ...                      intermediate_dim=16, key_dim=6,
        ...                      feedforward="gated-gelu", tie_embeddings=False)
        >>> logits = model({"encoder_token_ids": np.array([[5, 6, 7, 2]]),
        ...                 "decoder_token_ids": np.array([[1, 9]])})
        >>> tuple(logits.shape)
        (1, 2, 40)
        >>> kt.models.T5.parameter_count(**kt.models.PRESETS["t5_small"]["config"])
        60506624

    References:
        Raffel et al., "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", 2020. Chung et al., "Scaling
        Instruction-Finetuned Language Models", 2022.
    """

    family = "t5"

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=None,
        num_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        key_dim=None,
        num_decoder_layers=None,
        feedforward="relu",
        num_buckets=32,
        max_distance=128,
        tie_embeddings=True,
        layer_norm_epsilon=1e-6,
        dropout=0.1,
        max_sequence_length=512,
        decoder_start_token_id=1,
        generation_config=None,
        task_settings=None,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        check_config(config)
        # === Layers ===
        self.token_embedding = quantization.TiedEmbedding(
            vocabulary_size - 1,
            hidden_dim,
            embeddings_initializer=normal_initializer(1.0),
            name="token_embedding",
        )
        block_options = dict(
            dropout=dropout,
            normalize_first=True,
            layer_norm_epsilon=layer_norm_epsilon,
            key_dim=key_dim or hidden_dim // num_heads,
            # T5's: each projection N(0, 1 / fan-in), which keeps the
            # unscaled scores and the residual stream of order one.
            kernel_initializer=fan_in_normal(),
            norm="rms",
            use_bias=False,
            scale=1.0,
            **(
                dict(feedforward="gated", activation=gelu_approximate)
                if feedforward == "gated-gelu"
                else dict(activation="relu")
            ),
        )
        # In float16, transformers keeps `wo` in float32 and so the residual
        # stream from there (layers/float32_residual.py).
        float16 = keras.config.dtype_policy().compute_dtype == "float16"
        encoder_block, decoder_block = (
            (Float32ResidualEncoderBlock, Float32ResidualDecoderBlock)
            if float16
            else (TransformerEncoderBlock, TransformerDecoderBlock)
        )
        norm_options = dict(autocast=False) if float16 else {}
        self.encoder_position_bias = RelativePositionBias(
            num_heads, num_buckets, max_distance, True, name="encoder_position_bias"
        )
        self.encoder_blocks = [
            encoder_block(
                num_heads, intermediate_dim, name=f"encoder_layer_{i}", **block_options
            )
            for i in range(num_layers)
        ]
        self.encoder_norm = RMSNormalization(
            layer_norm_epsilon, name="encoder_norm", **norm_options
        )
        self.decoder_position_bias = RelativePositionBias(
            num_heads, num_buckets, max_distance, False, name="decoder_position_bias"
        )
        self.decoder_blocks = [
            decoder_block(
                num_heads,
                intermediate_dim,
                positions="bias",
                name=f"decoder_layer_{i}",
                **block_options,
            )
            for i in range(num_decoder_layers or num_layers)
        ]
        self.decoder_norm = RMSNormalization(
            layer_norm_epsilon, name="decoder_norm", **norm_options
        )
        self.dropout_layer = keras.layers.Dropout(dropout, name="dropout")
        self._head_scale = hidden_dim**-0.5  # T5's d_model ** -0.5, tied
        self.lm_head = None
        if not tie_embeddings:
            self.lm_head = quantization.Dense(
                vocabulary_size - 1,
                use_bias=False,
                kernel_initializer=fan_in_normal(),
                name="lm_head",
            )
        # === Functional model ===
        inputs = {
            name: keras.Input((None,), dtype="int32", name=name)
            for name in ("encoder_token_ids", "decoder_token_ids")
        }
        context = self.encode(inputs["encoder_token_ids"])
        context_mask = ops.not_equal(inputs["encoder_token_ids"], 0)
        logits, _ = self._decode(inputs["decoder_token_ids"], context, context_mask)
        super().__init__(inputs, logits, **{"name": "t5", **kwargs})
        self._set_config(**config)

    @property
    def encoder_vocabulary_size(self):
        return self.vocabulary_size

    @property
    def decoder_vocabulary_size(self):
        return self.vocabulary_size

    def _embed(self, token_ids):
        # Our id i is the checkpoint's row i - 1; padding reads row 0, masked.
        x = self.token_embedding(ops.maximum(token_ids - 1, 0))
        return self.dropout_layer(x)

    def encode(self, encoder_token_ids):
        """Encoder half of the forward pass: `(B, S)` ids -> `(B, S, E)`."""
        padding_mask = ops.not_equal(encoder_token_ids, 0)  # (B, S)
        x = self._embed(encoder_token_ids)
        bias = self.encoder_position_bias(x)  # (1, H, S, S)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=padding_mask, position_bias=bias)
        norm = self.encoder_norm  # float32 out in float16 (autocast=False)
        x = ops.cast(norm(x), norm.compute_dtype)
        return self.dropout_layer(x)

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
        y = self._embed(decoder_token_ids)
        if caches is None:
            bias = self.decoder_position_bias(y)  # (1, H, T, T)
        else:  # the step's queries against every cached position
            length = ops.shape(caches[0])[2]
            bias = self.decoder_position_bias(y, key_length=length, query_start=start)
        y, updated = self._decoder_blocks(
            y, context, context_mask, caches, start, cross_caches,
            padding_mask=padding_mask, position_bias=bias,
        )  # fmt: skip
        y = ops.cast(self.decoder_norm(y), self.decoder_norm.compute_dtype)
        y = self.dropout_layer(y)
        if self.lm_head is None:  # tied: rescaled, then the table transposed
            y = y * ops.cast(self._head_scale, y.dtype)
            logits = self.token_embedding(y, reverse=True)
        else:
            logits = self.lm_head(y)
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
        key_dim=None,
        num_decoder_layers=None,
        feedforward="relu",
        num_buckets=32,
        tie_embeddings=True,
        **other_arguments,
    ):
        """What `count_params()` of the model with these constructor
        arguments gives, from the sizes alone (no weight is made)."""
        e, f = hidden_dim, intermediate_dim
        inner = num_heads * (key_dim or hidden_dim // num_heads)
        attention = 4 * e * inner
        feedforward_size = (3 if feedforward == "gated-gelu" else 2) * e * f
        encoder = num_layers * (attention + feedforward_size + 2 * e)
        decoders = num_decoder_layers or num_layers
        decoder = decoders * (2 * attention + feedforward_size + 3 * e)
        table = (vocabulary_size - 1) * e
        head = 0 if tie_embeddings else table
        biases = 2 * num_buckets * num_heads
        return table + head + encoder + decoder + biases + 2 * e


t5 = model_factory(
    T5,
    "t5",
    "Builds a `kt.models.T5` text-to-text encoder-decoder (T5, FLAN-T5).",
    'A `kt.models.T5` with inputs `{"encoder_token_ids": (B, S), '
    '"decoder_token_ids": (B, T)}` returning float32 logits `(B, T, '
    "vocabulary_size)`.",
    """
    >>> import keras_transformer as kt
    >>> model = kt.models.t5(40, num_layers=1, num_heads=2, hidden_dim=8,
    ...                      intermediate_dim=16)
    >>> model.lm_head is None  # T5 v1.0: the head is the token table
    True
    """,
)
__test__ = {"t5": t5}  # its example runs with the module's
