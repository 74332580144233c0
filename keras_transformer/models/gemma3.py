"""Gemma 3: the decoder-only family of Google's Gemma 3 text checkpoints.

What differs from `kt.models.Llama`: token embeddings scaled by √E (the
factor rounded to the model's dtype, as transformers rounds it), blocks
with a norm before and after each sub-block and RMS-normalized query and
key heads (`kt.layers.Gemma3DecoderBlock`), zero-centred RMS scales
(`1 + scale`), a tanh-GELU gated feed-forward, the attention scale of
`query_pre_attn_scalar`, and local (sliding-window) blocks with their own
rotary base between global ones, in the checkpoint's `layer_types`. The
head is always the token embedding, transposed.

Shape legend: B batch, T sequence length, E hidden size, V vocabulary size
(ours: the checkpoint's + 1, id 0 being padding).
"""

import math

import keras
from keras import ops

from keras_transformer import _validation as validation
from keras_transformer.layers import (
    Gemma3DecoderBlock,
    GemmaRMSNormalization,
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

LOCAL, GLOBAL = "sliding_attention", "full_attention"


def default_layer_types(num_layers, pattern=6):
    """transformers' layer types of a config without `layer_types`: every
    `pattern`-th layer global, the others local."""
    return [GLOBAL if (i + 1) % pattern == 0 else LOCAL for i in range(num_layers)]


def check_config(config):
    """Raises a ValueError naming the first impossible value of a `Gemma3`'s
    constructor arguments `config`."""
    vocabulary_size = config["vocabulary_size"]
    if not validation.is_int(vocabulary_size) or vocabulary_size < 2:
        raise ValueError(
            "`vocabulary_size` must be an integer >= 2 (id 0 is padding). "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    for name in ["num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                 "head_dim", "max_sequence_length", "sliding_window"]:  # fmt: skip
        validation.check_positive_int(name, config[name])
    # Local blocks: their base and the window; global ones: rope scaling.
    check_rotary_attention_arguments(
        config["num_heads"], config["num_key_value_heads"],
        config["local_rope_theta"], None, config["sliding_window"], False,
    )  # fmt: skip
    check_rotary_attention_arguments(
        config["num_heads"], config["num_key_value_heads"], config["rope_theta"],
        config["rope_scaling"], None, False,
    )  # fmt: skip
    layer_types = config["layer_types"]
    if layer_types is not None and (
        not isinstance(layer_types, list | tuple)
        or len(layer_types) != config["num_layers"]
        or not set(layer_types) <= {LOCAL, GLOBAL}
    ):
        raise ValueError(
            f"`layer_types` must be None or a list of {config['num_layers']} "
            f"(num_layers) entries, each {LOCAL!r} or {GLOBAL!r}. "
            f"Received: layer_types={layer_types!r}"
        )
    validation.check_positive_number(
        "query_pre_attn_scalar", config["query_pre_attn_scalar"]
    )
    validation.check_positive_number("layer_norm_epsilon", config["layer_norm_epsilon"])
    validation.check_rate("dropout", config["dropout"])


@keras.saving.register_keras_serializable(package="keras_transformer")
class Gemma3(ModelMixin, CausalLM):
    """A Gemma 3 causal language model (the text model of Gemma 3
    checkpoints), built functionally.

    Token embedding scaled by √E, Gemma 3 decoder blocks
    (`kt.layers.Gemma3DecoderBlock`), local ones with a sliding window and
    the rotary base `local_rope_theta`, global ones attending to every
    earlier position with `rope_theta` (and `rope_scaling`), a final
    `kt.layers.GemmaRMSNormalization` and the token embedding transposed
    as the output projection. Token id 0 is padding; id `i > 0` is the
    checkpoint's id `i - 1`, so the weights hold exactly the checkpoint's
    `vocabulary_size - 1` rows and `count_params()` equals transformers'
    count. `kt.models.from_pretrained` loads `Gemma3ForCausalLM` folders
    (`model_type: gemma3_text`) and `gemma3` GGUF files.

    Args:
        vocabulary_size: number of token ids: the checkpoint's + 1.
        num_layers: number of decoder blocks.
        num_heads: query heads per block.
        num_key_value_heads: key/value heads per block (dividing
            `num_heads`); None = `num_heads`.
        hidden_dim: hidden size E.
        intermediate_dim: width of the gated feed-forward.
        head_dim: size of each head (Gemma's is not `hidden_dim //
            num_heads`).
        max_sequence_length: the context length generation may fill.
        rope_theta: the rotary base of the global blocks.
        local_rope_theta: the rotary base of the local blocks.
        rope_scaling: None or a Hugging Face rope scaling dict of the
            global blocks (`"linear"`: the larger Gemma 3 models).
        sliding_window: how many positions (itself included) a local
            block's tokens attend to.
        layer_types: each block's kind, `"sliding_attention"` (local) or
            `"full_attention"` (global); None: every sixth block global,
            transformers' default.
        query_pre_attn_scalar: attention scores are scaled by
            `query_pre_attn_scalar ** -0.5`.
        layer_norm_epsilon: epsilon of every RMS normalization.
        dropout: dropout rate on attention probabilities and sub-block
            outputs (0 in the checkpoints).
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        token_ids: int `(B, T)`, 0-padded on the right.

    Returns:
        float32 logits `(B, T, vocabulary_size)`; position t predicts token
        t + 1. The padding id's logit, `[..., 0]`, is -1e9.

    Layers (attributes): `token_embedding` (`vocabulary_size - 1` rows,
    read at `token_ids - 1`), `blocks` (a list of
    `kt.layers.Gemma3DecoderBlock` named `transformer_layer_{i}`),
    `final_norm` (`kt.layers.GemmaRMSNormalization`).

    Examples:
        >>> import numpy as np
        >>> import keras_transformer as kt
        >>> model = kt.models.Gemma3(50, num_layers=2, num_heads=4,
        ...                          num_key_value_heads=1, hidden_dim=16,
        ...                          intermediate_dim=32, head_dim=8,
        ...                          sliding_window=4)
        >>> tuple(model(np.array([[5, 6, 7]])).shape)
        (1, 3, 50)
        >>> config = kt.models.PRESETS["gemma3_270m"]["config"]
        >>> kt.models.Gemma3.parameter_count(**config)
        268098176

    References:
        Gemma Team, "Gemma 3 Technical Report", 2025.
    """

    family = "gemma3"

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=None,
        num_heads=None,
        num_key_value_heads=None,
        hidden_dim=None,
        intermediate_dim=None,
        head_dim=256,
        max_sequence_length=32768,
        rope_theta=1_000_000.0,
        local_rope_theta=10_000.0,
        rope_scaling=None,
        sliding_window=512,
        layer_types=None,
        query_pre_attn_scalar=256,
        layer_norm_epsilon=1e-6,
        dropout=0.0,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        check_config(config)
        kinds = layer_types or default_layer_types(num_layers)
        # === Layers ===
        self.token_embedding = quantization.TiedEmbedding(
            vocabulary_size - 1,
            hidden_dim,
            embeddings_initializer=normal_initializer(),
            name="token_embedding",
        )
        self.blocks = [
            Gemma3DecoderBlock(
                num_heads,
                intermediate_dim,
                num_key_value_heads=num_key_value_heads,
                head_dim=head_dim,
                rope_theta=local_rope_theta if kind == LOCAL else rope_theta,
                rope_scaling=None if kind == LOCAL else rope_scaling,
                sliding_window=sliding_window if kind == LOCAL else None,
                query_pre_attn_scalar=query_pre_attn_scalar,
                layer_norm_epsilon=layer_norm_epsilon,
                dropout=dropout,
                kernel_initializer=normal_initializer(),
                name=f"transformer_layer_{i}",
            )
            for i, kind in enumerate(kinds)
        ]
        self.final_norm = GemmaRMSNormalization(layer_norm_epsilon, name="final_norm")
        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        logits, _ = self._forward(token_ids)
        super().__init__(token_ids, logits, **{"name": "gemma3", **kwargs})
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
        # transformers multiplies by √E rounded to the weights' dtype.
        hidden_dim = self.token_embedding.output_dim
        x = x * ops.cast(math.sqrt(hidden_dim), x.dtype)
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
        logits = self.token_embedding(self.final_norm(x), reverse=True)
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
        head_dim=256,
        **other_arguments,
    ):
        """What `count_params()` of the model with these constructor
        arguments gives, computed from the sizes alone (no weight is made).
        The other arguments do not change the count."""
        e, f, d = hidden_dim, intermediate_dim, head_dim
        q, kv = num_heads * d, (num_key_value_heads or num_heads) * d
        attention = e * (q + 2 * kv) + q * e + 2 * d  # + the query, key norms
        block = attention + 3 * e * f + 4 * e  # + the gated MLP, four norms
        return (vocabulary_size - 1) * e + num_layers * block + e  # + final norm


gemma3 = model_factory(
    Gemma3,
    "gemma3",
    "Builds a `kt.models.Gemma3` causal language model (Gemma 3 text).",
    "A `kt.models.Gemma3` mapping int `token_ids` `(B, T)` to float32 logits "
    "`(B, T, vocabulary_size)`.",
    """
    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.gemma3(50, num_layers=2, num_heads=2, hidden_dim=16,
    ...                          intermediate_dim=32, head_dim=8,
    ...                          sliding_window=2, layer_types=[
    ...                              "sliding_attention", "full_attention"])
    >>> tuple(model(np.array([[5, 6, 7]])).shape)
    (1, 3, 50)
    """,
)
__test__ = {"gemma3": gemma3}  # its example runs with the module's
