"""Reusable Transformer layers (keras.ops only, backend-portable).

`attention.py` and `masking.py` (attention and its boolean masks),
`grouped.py` (grouped-query attention), `position.py` (token + position
embeddings), `rotary.py` (rotary positions), `block.py` with `encoder.py` and
`decoder.py` (the blocks), `rotary_attention.py`, `normalization.py` (RMS),
`feedforward.py` (SwiGLU) and `rotary_block.py` (the Llama-family block),
`gemma_block.py` (Gemma 3's block: query-key norms, four norms),
`relative_position.py` (T5's relative position bias), `log_mel.py`
(Whisper's log-mel front end), `patch.py` (image patches), `heads.py`
(what sits on the logits: `LogitsBias`, `exclude_padding_logit`),
`activations.py`.
"""

from keras_transformer.layers.activations import gelu_approximate
from keras_transformer.layers.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from keras_transformer.layers.decoder import DecoderBlock, TransformerDecoderBlock
from keras_transformer.layers.encoder import TransformerEncoderBlock
from keras_transformer.layers.feedforward import GatedFeedForward
from keras_transformer.layers.gemma_block import Gemma3DecoderBlock, GemmaAttention
from keras_transformer.layers.heads import LogitsBias, exclude_padding_logit
from keras_transformer.layers.log_mel import LogMelSpectrogram
from keras_transformer.layers.masking import causal_mask
from keras_transformer.layers.normalization import (
    GemmaRMSNormalization,
    RMSNormalization,
)
from keras_transformer.layers.patch import PatchEmbedding
from keras_transformer.layers.position import PositionalEmbedding, sinusoidal_encoding
from keras_transformer.layers.relative_position import RelativePositionBias
from keras_transformer.layers.rotary import RotaryEmbedding, rotary_inverse_frequencies
from keras_transformer.layers.rotary_attention import RotaryAttention
from keras_transformer.layers.rotary_block import RotaryDecoderBlock

__all__ = [
    "DecoderBlock",
    "GatedFeedForward",
    "Gemma3DecoderBlock",
    "GemmaAttention",
    "GemmaRMSNormalization",
    "LogMelSpectrogram",
    "LogitsBias",
    "MultiHeadAttention",
    "PatchEmbedding",
    "PositionalEmbedding",
    "RMSNormalization",
    "RelativePositionBias",
    "RotaryAttention",
    "RotaryDecoderBlock",
    "RotaryEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "causal_mask",
    "exclude_padding_logit",
    "gelu_approximate",
    "rotary_inverse_frequencies",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
