"""The original encoder-decoder Transformer, for translation and summarization.

Shape legend: B batch, S source length, T target length, E hidden size,
V target vocabulary size.
"""

import keras

from keras_transformer import _validation as validation
from keras_transformer.layers import (
    LogitsBias,
    PositionalEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    exclude_padding_logit,
    quantization,
)
from keras_transformer.models.base import (
    ModelMixin,
    check_sizes,
    constructor_arguments,
    model_factory,
)
from keras_transformer.models.decoding import Seq2SeqLM


@keras.saving.register_keras_serializable(package="keras_transformer")
class Seq2Seq(ModelMixin, Seq2SeqLM):
    """The encoder-decoder of "Attention Is All You Need", built functionally.

    Post-LN blocks with ReLU; the last encoder block's output feeds the
    cross-attention of every decoder block. Token embeddings plus learned
    positions by default; `position="sinusoidal", scale_embeddings=True` is
    the paper's embedding (the `seq2seq_tiny`/`seq2seq_base` presets use it).
    Trained from scratch, the default learned as well as KerasHub's layers
    where the paper's embedding learned far worse (docs/benchmarks.md). The
    options after `tie_embeddings` cover the variants pretrained checkpoints
    use (`kt.models.from_pretrained` sets them for Marian and BART).

    Args:
        vocabulary_size: source vocabulary size (id 0 is padding).
        num_layers: number of encoder blocks and of decoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width.
        max_sequence_length: longest source and target.
        dropout: dropout rate.
        target_vocabulary_size: target vocabulary size; `None` shares the
            source vocabulary and one embedding between encoder and decoder.
        tie_embeddings: project decoder outputs to logits through the
            transposed target embedding instead of a separate Dense layer.
            `None` (the default) ties them when the vocabulary is shared, as
            in the paper, and not when the target has its own vocabulary
            (untied, translation on separate vocabularies scored ≈0.75 BLEU
            higher; see docs/models.md).
        num_decoder_layers: decoder blocks; `None` is `num_layers`
            (distilled checkpoints have fewer decoder than encoder blocks).
        activation: feed-forward activation (`"relu"`; Marian uses
            `"silu"`, which Hugging Face calls swish, and BART `"gelu"`).
        layer_norm_epsilon: LayerNorm epsilon (Hugging Face's models: 1e-5).
        position: `"learned"` positions (the default) or the paper's fixed
            `"sinusoidal"` ones.
        sinusoidal_layout: `"interleaved"` (the paper) or `"concatenated"`
            (Marian); see `kt.layers.sinusoidal_encoding`.
        position_offset: learned positions: row of position 0 (BART: 2).
        scale_embeddings: multiply token embeddings by √E (the paper,
            Marian); BART checkpoints mostly do not, nor does the default.
        embedding_layer_norm: a LayerNorm after adding the positions, in
            the encoder and in the decoder (BART's `layernorm_embedding`).
        logits_bias: add a learned bias to the logits (`final_logits_bias`).
        decoder_start_token_id: the token the decoder starts from; with it,
            `kt.generation.generate` may be given only `encoder_token_ids`.
        generation_config: a dict of `kt.generation.generate` keyword
            arguments the model is meant to be decoded with (from a
            checkpoint's `generation_config.json`), such as
            `decoder_start_token_id`, `end_token_id`, `max_new_tokens`,
            `sampler`, `num_beams`: pass `**model.generation_config` to
            `generate`; the exporters read it too. Stored in `get_config`.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: `{"encoder_token_ids": (B, S), "decoder_token_ids": (B, T)}`
            int.

    Returns:
        float32 logits `(B, T, V)`; the padding id's, `[..., 0]`, is -1e9
        (`kt.layers.exclude_padding_logit`).

    Layers (attributes): `encoder_embeddings` and `decoder_embeddings`
    (`kt.layers.PositionalEmbedding`, one object when the vocabulary is
    shared), `encoder_embeddings_layer_norm`, `decoder_embeddings_layer_norm`
    (None without `embedding_layer_norm`), `encoder_embeddings_dropout`,
    `encoder_blocks`, `decoder_embeddings_dropout`, `decoder_blocks`,
    `output_dense` (None when tied), `output_bias` (a `kt.layers.LogitsBias`,
    None without `logits_bias`).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.Seq2Seq(30, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16, max_sequence_length=10)
        >>> logits = model({"encoder_token_ids": np.array([[4, 5, 6, 0]]),
        ...                 "decoder_token_ids": np.array([[1, 7, 8]])})
        >>> tuple(logits.shape)
        (1, 3, 30)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
    """

    family = "seq2seq"

    # Defaults that changed (issue #28): a file saved without these keys was
    # built with the paper's embedding.
    EARLIER_DEFAULTS = {"position": "sinusoidal", "scale_embeddings": True}

    @classmethod
    def from_config(cls, config):
        return super().from_config({**cls.EARLIER_DEFAULTS, **config})

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=None,
        num_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        max_sequence_length=256,
        dropout=0.1,
        target_vocabulary_size=None,
        tie_embeddings=None,
        num_decoder_layers=None,
        activation="relu",
        layer_norm_epsilon=1e-6,
        position="learned",
        sinusoidal_layout="interleaved",
        position_offset=0,
        scale_embeddings=False,
        embedding_layer_norm=False,
        logits_bias=False,
        decoder_start_token_id=None,
        generation_config=None,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        check_sizes(config)
        validation.check_positive_int(
            "num_decoder_layers", num_decoder_layers, allow_none=True
        )
        for name in ("scale_embeddings", "embedding_layer_norm", "logits_bias"):
            validation.check_bool(name, config[name])
        if tie_embeddings is not None:
            validation.check_bool("tie_embeddings", tie_embeddings)
        if generation_config is not None and not isinstance(generation_config, dict):
            raise ValueError(
                "`generation_config` must be a dict of generate() arguments or "
                f"None. Received: generation_config={generation_config!r}"
            )
        target_size = target_vocabulary_size or vocabulary_size
        if decoder_start_token_id is not None:
            validation.check_token_id(
                "decoder_start_token_id", decoder_start_token_id, target_size
            )
        decoder_layers = num_decoder_layers or num_layers  # None: num_layers
        if target_vocabulary_size is not None:
            check_sizes(config, vocabulary_name="target_vocabulary_size")
        shared = target_vocabulary_size is None
        tied = shared if tie_embeddings is None else tie_embeddings

        # === Layers ===
        def embedding(size, name, token_embedding=None):
            return PositionalEmbedding(
                size, max_sequence_length, hidden_dim, position=position,
                scale_embeddings=scale_embeddings, sinusoidal_layout=sinusoidal_layout,
                position_offset=position_offset, token_embedding=token_embedding,
                name=name,
            )  # fmt: skip

        def embedding_norm(name):
            if embedding_layer_norm:
                return keras.layers.LayerNormalization(
                    epsilon=layer_norm_epsilon, name=name
                )

        block_options = dict(
            dropout=dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
        )

        if shared and position == "sinusoidal":  # one layer: nothing differs
            self.encoder_embeddings = embedding(vocabulary_size, "embeddings")
            self.decoder_embeddings = self.encoder_embeddings
        elif shared:  # one token table, a position table each
            self.encoder_embeddings = embedding(vocabulary_size, "encoder_embeddings")
            self.encoder_embeddings.build((None, None))
            self.decoder_embeddings = embedding(
                vocabulary_size,
                "decoder_embeddings",
                token_embedding=self.encoder_embeddings.token_embedding,
            )
        else:
            self.encoder_embeddings = embedding(vocabulary_size, "encoder_embeddings")
            self.decoder_embeddings = embedding(
                target_vocabulary_size, "decoder_embeddings"
            )
        self.encoder_embeddings_layer_norm = embedding_norm(
            "encoder_embeddings_layer_norm"
        )
        self.encoder_embeddings_dropout = keras.layers.Dropout(
            dropout, name="encoder_embeddings_dropout"
        )
        self.encoder_blocks = [
            TransformerEncoderBlock(
                num_heads, intermediate_dim, name=f"encoder_layer_{i}", **block_options
            )
            for i in range(num_layers)
        ]
        self.decoder_embeddings_layer_norm = embedding_norm(
            "decoder_embeddings_layer_norm"
        )
        self.decoder_embeddings_dropout = keras.layers.Dropout(
            dropout, name="decoder_embeddings_dropout"
        )
        self.decoder_blocks = [
            TransformerDecoderBlock(
                num_heads, intermediate_dim, name=f"decoder_layer_{i}", **block_options
            )
            for i in range(decoder_layers)
        ]
        self.output_dense = None
        if not tied:
            self.output_dense = quantization.Dense(
                self.decoder_embeddings.vocabulary_size, dtype="float32", name="logits"
            )
        self.output_bias = (
            LogitsBias(dtype="float32", name="logits_bias") if logits_bias else None
        )
        # === Functional model ===
        inputs = {
            name: keras.Input((None,), dtype="int32", name=name)
            for name in ("encoder_token_ids", "decoder_token_ids")
        }
        context = self.encode(inputs["encoder_token_ids"])
        logits, _ = self.decode(inputs["decoder_token_ids"], context)
        super().__init__(inputs, logits, **{"name": "seq2seq", **kwargs})
        self._set_config(**config)

    @property
    def encoder_vocabulary_size(self):
        return self.encoder_embeddings.vocabulary_size

    @property
    def decoder_vocabulary_size(self):
        return self.decoder_embeddings.vocabulary_size

    def encode(self, encoder_token_ids):
        """Encoder half of the forward pass: `(B, S)` ids -> `(B, S, E)`."""
        x = self.encoder_embeddings(encoder_token_ids)  # masked at padding
        if self.encoder_embeddings_layer_norm is not None:
            x = self.encoder_embeddings_layer_norm(x)
        x = self.encoder_embeddings_dropout(x)
        for block in self.encoder_blocks:
            x = block(x)
        return x

    def decode(
        self,
        decoder_token_ids,
        context=None,
        caches=None,
        index=None,
        cross_caches=None,
        context_padding_mask=None,
    ):
        """Decoder half, written once for the model and for cached decoding.

        The last encoder output `context` feeds every decoder block. With
        `caches` (one self-attention cache per block), `index` (the position
        of `decoder_token_ids[:, 0]`) and `cross_caches` (from
        `compute_cross_attention_cache`), it runs one cached step. Returns
        `(logits (B, T, V), caches or None)`.
        """
        return self._decode(
            decoder_token_ids,
            context,
            context_padding_mask,
            caches,
            index,
            cross_caches,
        )

    def _decode(
        self,
        decoder_token_ids,
        context,
        context_mask,
        caches=None,
        index=None,
        cross_caches=None,
    ):
        # The hook of `kt.models.Seq2SeqLM`; `decode` is its public form.
        start = 0 if index is None else index
        y = self.decoder_embeddings(decoder_token_ids, start_index=start)  # (B, T, E)
        if self.decoder_embeddings_layer_norm is not None:
            y = self.decoder_embeddings_layer_norm(y)
        y = self.decoder_embeddings_dropout(y)
        y, updated = self._decoder_blocks(
            y, context, context_mask, caches, start, cross_caches
        )
        if self.output_dense is None:  # tied weights
            logits = self.decoder_embeddings(y, reverse=True)  # (B, T, V)
        else:
            logits = self.output_dense(y)
        if self.output_bias is not None:
            logits = self.output_bias(logits)
        logits = exclude_padding_logit(logits)  # id 0 is padding, not a token
        return logits, updated


seq2seq = model_factory(
    Seq2Seq,
    "seq2seq",
    "Builds a `kt.models.Seq2Seq` encoder-decoder.",
    'A `kt.models.Seq2Seq` with inputs `{"encoder_token_ids": (B, S), '
    '"decoder_token_ids": (B, T)}` returning float32 logits `(B, T, target '
    "vocabulary size)`.",
    """
    >>> import keras_transformer as kt
    >>> model = kt.models.seq2seq(30, num_layers=1, num_heads=2, hidden_dim=8,
    ...                           intermediate_dim=16, max_sequence_length=10,
    ...                           target_vocabulary_size=20)
    >>> model.output_dense is not None  # own target vocabulary: untied
    True
    """,
)
__test__ = {"seq2seq": seq2seq}  # its example runs with the module's
