"""Llama: the decoder-only family of Llama, Mistral and Qwen2 checkpoints.

Rotary positions, RMS normalization, SwiGLU feed-forwards, grouped-query
attention, and optionally a sliding window (Mistral) and q/k/v biases
(Qwen2), in pre-norm decoder blocks (`kt.layers.RotaryDecoderBlock`).

Shape legend: B batch, T sequence length, E hidden size, V vocabulary size
(ours: the checkpoint's + 1, id 0 being padding).
"""

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers import (
    RMSNormalization,
    RotaryDecoderBlock,
    exclude_padding_logit,
    quantization,
)
from keras_transformer.layers.rotary_attention import check_rotary_attention_arguments
from keras_transformer.models.base import (
    ModelMixin,
    constructor_arguments,
    model_factory,
)
from keras_transformer.models.decoding import CausalLM
from keras_transformer.models.initializers import normal_initializer


def check_config(config):
    """Raises a ValueError naming the first impossible value of a `Llama`'s
    constructor arguments `config`."""
    vocabulary_size = config["vocabulary_size"]
    if not validation.is_int(vocabulary_size) or vocabulary_size < 2:
        raise ValueError(
            "`vocabulary_size` must be an integer >= 2 (id 0 is padding). "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    for name in ["num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                 "max_sequence_length"]:  # fmt: skip
        validation.check_positive_int(name, config[name])
    validation.check_positive_int("head_dim", config["head_dim"], allow_none=True)
    if config["head_dim"] is None and config["hidden_dim"] % config["num_heads"]:
        raise ValueError(
            "`hidden_dim` must be divisible by `num_heads` when `head_dim` is not "
            f"given. Received: hidden_dim={config['hidden_dim']}, "
            f"num_heads={config['num_heads']}"
        )
    check_rotary_attention_arguments(
        config["num_heads"],
        config["num_key_value_heads"],
        config["rope_theta"],
        config["rope_scaling"],
        config["sliding_window"],
        config["attention_bias"],
    )
    validation.check_bool("tie_word_embeddings", config["tie_word_embeddings"])
    validation.check_positive_number("layer_norm_epsilon", config["layer_norm_epsilon"])
    validation.check_rate("dropout", config["dropout"])


@keras.saving.register_keras_serializable(package="keras_transformer")
class Llama(ModelMixin, CausalLM):
    """A Llama-family causal language model (Llama, Mistral, Qwen2), built
    functionally.

    Token embedding, pre-norm rotary decoder blocks
    (`kt.layers.RotaryDecoderBlock`), a final RMS normalization and an
    output projection (`lm_head`, or the token embedding transposed when
    `tie_word_embeddings`). Token id 0 is padding; id `i > 0` is the
    checkpoint's id `i - 1`, so the weights hold exactly the checkpoint's
    `vocabulary_size - 1` rows and `count_params()` equals transformers'
    count. `kt.models.from_pretrained` loads `LlamaForCausalLM`,
    `MistralForCausalLM` and `Qwen2ForCausalLM` folders.

    Args:
        vocabulary_size: number of token ids: the checkpoint's + 1.
        num_layers: number of decoder blocks.
        num_heads: query heads per block.
        num_key_value_heads: key/value heads per block (dividing
            `num_heads`; fewer is grouped-query attention); None =
            `num_heads`.
        hidden_dim: hidden size E.
        intermediate_dim: width of the SwiGLU feed-forward.
        head_dim: size of each head; defaults to `hidden_dim // num_heads`.
        max_sequence_length: the context length generation may fill.
        rope_theta: the rotary base.
        rope_scaling: None or a Hugging Face rope scaling dict (`"linear"`,
            `"llama3"`; see `kt.layers.RotaryEmbedding`).
        sliding_window: None, or how many positions (itself included) each
            token attends to (Mistral).
        attention_bias: False (Llama, Mistral), True (biases on q, k, v and
            o) or `"qkv"` (Qwen2).
        tie_word_embeddings: logits through the transposed token embedding
            instead of a separate `lm_head`.
        layer_norm_epsilon: epsilon of every RMS normalization.
        dropout: dropout rate on attention probabilities and sub-block
            outputs (0 in the checkpoints).
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        token_ids: int `(B, T)`, 0-padded on the right.

    Returns:
        float32 logits `(B, T, vocabulary_size)`; position t predicts token
        t + 1. The padding id's logit, `[..., 0]`, is -1e9
        (`kt.layers.exclude_padding_logit`).

    Layers (attributes): `token_embedding` (`keras.layers.Embedding` of
    `vocabulary_size - 1` rows, read at `token_ids - 1`), `blocks` (a list of
    `kt.layers.RotaryDecoderBlock` named `transformer_layer_{i}`),
    `final_norm` (`kt.layers.RMSNormalization`), `lm_head`
    (`keras.layers.Dense(vocabulary_size - 1, use_bias=False)`, None when
    `tie_word_embeddings`).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.Llama(50, num_layers=1, num_heads=4,
        ...                         num_key_value_heads=2, hidden_dim=16,
        ...                         intermediate_dim=32)
        >>> tuple(model(np.array([[5, 6, 7]])).shape)
        (1, 3, 50)
        >>> config = kt.models.PRESETS["smollm2_135m"]["config"]
        >>> kt.models.Llama.parameter_count(**config)
        134515008

    References:
        Touvron et al., "LLaMA: Open and Efficient Foundation Language
        Models", 2023. Jiang et al., "Mistral 7B", 2023. Qwen Team, "Qwen2
        Technical Report", 2024.
    """

    family = "llama"

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=None,
        num_heads=None,
        num_key_value_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        head_dim=None,
        max_sequence_length=2048,
        rope_theta=10000.0,
        rope_scaling=None,
        sliding_window=None,
        attention_bias=False,
        tie_word_embeddings=False,
        layer_norm_epsilon=1e-6,
        dropout=0.0,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        check_config(config)
        # === Layers ===
        self.token_embedding = quantization.TiedEmbedding(
            vocabulary_size - 1,
            hidden_dim,
            embeddings_initializer=normal_initializer(),
            name="token_embedding",
        )
        self.blocks = [
            RotaryDecoderBlock(
                num_heads,
                intermediate_dim,
                num_key_value_heads=num_key_value_heads,
                head_dim=head_dim,
                rope_theta=rope_theta,
                rope_scaling=rope_scaling,
                sliding_window=sliding_window,
                attention_bias=attention_bias,
                layer_norm_epsilon=layer_norm_epsilon,
                dropout=dropout,
                kernel_initializer=normal_initializer(),
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = RMSNormalization(layer_norm_epsilon, name="final_norm")
        self.lm_head = None
        if not tie_word_embeddings:
            self.lm_head = quantization.Dense(
                vocabulary_size - 1,
                use_bias=False,
                kernel_initializer=normal_initializer(),
                name="lm_head",
            )
        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        logits, _ = self._forward(token_ids)
        super().__init__(token_ids, logits, **{"name": "llama", **kwargs})
        self._set_config(**config)

    def _forward(self, token_ids, caches=None, index=None):
        """The forward pass, written once: it builds the functional model and,
        with `caches` (one `(B, 2, S_max, K, D)` per block) and `index` (the
        position of `token_ids[:, 0]`), runs one cached decoding step on the
        same layers. Returns `(logits (B, T, V), caches or None)`."""
        start = 0 if index is None else index
        padding_mask = ops.not_equal(token_ids, 0)  # (B, T)
        # Our id i is the checkpoint's row i - 1; padding reads row 0, masked.
        x = self.token_embedding(ops.maximum(token_ids - 1, 0))  # (B, T, E)
        updated = []
        for i, block in enumerate(self.blocks):
            if caches is None:
                x = block(x, padding_mask=padding_mask)
            else:
                x, cache = block(
                    x,
                    self_attention_cache=caches[i],
                    self_attention_cache_update_index=start,
                )
                updated.append(cache)
        x = self.final_norm(x)
        if self.lm_head is None:  # tied: the token embedding, transposed
            logits = self.token_embedding(x, reverse=True)
        else:
            logits = self.lm_head(x)
        logits = ops.pad(ops.cast(logits, "float32"), [[0, 0], [0, 0], [1, 0]])
        logits = exclude_padding_logit(logits)  # (B, T, V): id 0 is no token
        return logits, (updated if caches is not None else None)

    @classmethod
    def parameter_count(
        cls,
        vocabulary_size,
        *,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        num_key_value_heads=None,
        head_dim=None,
        attention_bias=False,
        tie_word_embeddings=False,
        **other_arguments,
    ):
        """What `count_params()` of the model with these constructor
        arguments gives, computed from the sizes alone (no weight is made):
        a 7B model's count without its 29 GB. The other arguments do not
        change the count."""
        e, f = hidden_dim, intermediate_dim
        d = head_dim or hidden_dim // num_heads
        q, kv = num_heads * d, (num_key_value_heads or num_heads) * d
        attention = e * (q + 2 * kv) + q * e  # q, k, v and o kernels
        if attention_bias:
            attention += q + 2 * kv + (e if attention_bias is True else 0)
        block = attention + 3 * e * f + 2 * e  # + SwiGLU + two RMS scales
        embeddings = (vocabulary_size - 1) * e * (1 if tie_word_embeddings else 2)
        return embeddings + num_layers * block + e  # + the final RMS scale


llama = model_factory(
    Llama,
    "llama",
    "Builds a `kt.models.Llama` causal language model (Llama, Mistral, Qwen2).",
    "A `kt.models.Llama` mapping int `token_ids` `(B, T)` to float32 logits "
    "`(B, T, vocabulary_size)`.",
    """
    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.llama(50, num_layers=1, num_heads=4,
    ...                         num_key_value_heads=1, hidden_dim=16,
    ...                         intermediate_dim=32, attention_bias="qkv")
    >>> tuple(model(np.array([[5, 6, 7]])).shape)
    (1, 3, 50)
    """,
)
__test__ = {"llama": llama}  # its example runs with the module's
