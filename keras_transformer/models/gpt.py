"""GPT-2: a decoder-only Transformer language model.

Shape legend: B batch, T sequence length, E hidden size, V vocabulary size.
"""

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers import (
    PositionalEmbedding,
    TransformerDecoderBlock,
    exclude_padding_logit,
    gelu_approximate,
    quantization,
)
from keras_transformer.models.base import (
    ModelMixin,
    check_sizes,
    constructor_arguments,
    model_factory,
)
from keras_transformer.models.decoding import CausalLM
from keras_transformer.models.initializers import normal_initializer

ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": gelu_approximate}


@keras.saving.register_keras_serializable(package="keras_transformer")
class GPT2(ModelMixin, CausalLM):
    """A GPT-2 causal language model, built functionally.

    Token + learned position embeddings, pre-LN decoder blocks without
    cross-attention (GELU), a final LayerNorm, and logits through the
    transposed token embedding (tied weights; GPT-2's), or through an output
    projection of their own. Token id 0 is padding and is
    never generated. OpenAI's GPT-2 checkpoints load with
    `kt.models.from_pretrained` (their ids shifted by one, see
    `docs/pretrained.md`).

    Args:
        vocabulary_size: number of token ids.
        num_layers: number of decoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden size E.
        intermediate_dim: feed-forward width (4·E in GPT-2).
        max_sequence_length: the context length.
        dropout: dropout rate (embeddings, residuals, attention).
        activation: the feed-forward activation: `"gelu"` (exact, `x Φ(x)`)
            or `"gelu_approximate"` (the tanh approximation that OpenAI's
            GPT-2 and its checkpoints use, `kt.layers.gelu_approximate`).
        layer_norm_epsilon: epsilon of every LayerNorm (GPT-2's is 1e-5).
        tie_word_embeddings: logits through the transposed token embedding
            (True, GPT-2's) or through `lm_head`, an output projection of
            its own (False; a GGUF file whose `output.weight` differs from
            its embedding).
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        token_ids: int `(B, T)`.

    Returns:
        float32 logits `(B, T, vocabulary_size)`; position t predicts token
        t + 1. The padding id's logit, `[..., 0]`, is -1e9: padding takes no
        part in the softmax (`kt.layers.exclude_padding_logit`).

    Layers (attributes): `embeddings` (`kt.layers.PositionalEmbedding`),
    `embeddings_dropout`, `blocks` (a list of
    `kt.layers.TransformerDecoderBlock`), `final_layer_norm`, `lm_head`
    (None when tied).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.GPT2(50, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=32, max_sequence_length=16)
        >>> tuple(model(np.array([[5, 6, 7]])).shape)
        (1, 3, 50)
        >>> kt.models.GPT2.from_preset("gpt2_tiny", num_layers=1).num_layers
        1

    References:
        Radford et al., "Language Models are Unsupervised Multitask Learners",
        2019.
    """

    family = "gpt2"

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=None,
        num_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        max_sequence_length=1024,
        dropout=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        if tie_word_embeddings:  # the default, not written in configs
            del config["tie_word_embeddings"]
        validation.check_choice("activation", activation, tuple(ACTIVATIONS))
        validation.check_rate("layer_norm_epsilon", layer_norm_epsilon)
        check_sizes(config)
        # === Layers ===
        self.embeddings = PositionalEmbedding(
            vocabulary_size,
            max_sequence_length,
            hidden_dim,
            position="learned",
            embeddings_initializer=normal_initializer(),
            name="embeddings",
        )
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, name="embeddings_dropout"
        )
        self.blocks = [
            TransformerDecoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation=ACTIVATIONS[activation],
                normalize_first=True,
                layer_norm_epsilon=layer_norm_epsilon,
                cross_attention=False,
                kernel_initializer=normal_initializer(),
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="final_layer_norm"
        )
        self.lm_head = None
        if not tie_word_embeddings:  # the real tokens' logits (no padding row)
            self.lm_head = quantization.Dense(
                vocabulary_size - 1,
                use_bias=False,
                kernel_initializer=normal_initializer(),
                name="lm_head",
            )
        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        logits, _ = self._forward(token_ids)
        super().__init__(token_ids, logits, **{"name": "gpt2", **kwargs})
        self._set_config(**config)
        self.tie_word_embeddings = bool(tie_word_embeddings)

    def _forward(self, token_ids, caches=None, index=None):
        """The forward pass, written once: it builds the functional model and,
        with `caches` (one `(B, 2, S_max, H, D)` per block) and `index` (the
        position of `token_ids[:, 0]`), runs one cached decoding step on the
        same layers. Returns `(logits (B, T, V), caches or None)`."""
        start = 0 if index is None else index
        x = self.embeddings(token_ids, start_index=start)  # (B, T, E)
        x = self.embeddings_dropout(x)
        updated = []
        for i, block in enumerate(self.blocks):
            if caches is None:
                x = block(x)
            else:
                x, cache = block(
                    x,
                    self_attention_cache=caches[i],
                    self_attention_cache_update_index=start,
                )
                updated.append(cache)
        x = self.final_layer_norm(x)
        if self.lm_head is None:
            logits = self.embeddings(x, reverse=True)  # (B, T, V), tied weights
        else:  # (B, T, V - 1), then id 0's column
            logits = ops.pad(self.lm_head(x), [[0, 0], [0, 0], [1, 0]])
        logits = exclude_padding_logit(logits)  # id 0 is padding, not a token
        return logits, (updated if caches is not None else None)


gpt2 = model_factory(
    GPT2,
    "gpt2",
    "Builds a `kt.models.GPT2` causal language model.",
    "A `kt.models.GPT2` mapping int `token_ids` `(B, T)` to float32 logits "
    "`(B, T, vocabulary_size)`.",
    """
    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.gpt2(50, num_layers=1, num_heads=2, hidden_dim=8,
    ...                        intermediate_dim=32, max_sequence_length=16)
    >>> tuple(model(np.array([[5, 6, 7]])).shape)
    (1, 3, 50)
    """,
)
__test__ = {"gpt2": gpt2}  # its example runs with the module's
