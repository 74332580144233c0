"""Autoregressive generation with a compiled KV cache, and its samplers.

Modules: `processors` (the logits processors: the rules that change the
scores before a token is chosen), `samplers` (the one-token loop, greedy
and sampling),
`beam` and `beam_transformers` (beam search), `registry` (samplers by
name), `loop` (graph helpers the loops share), `decode` (`generate` and the
compiled decode loops), `speculative` (speculative and prompt-lookup
decoding).
"""

from keras_transformer.generation import processors
from keras_transformer.generation.beam import BeamSampler
from keras_transformer.generation.compiled import enable_compile_cache
from keras_transformer.generation.decode import (
    compiled_decode_fn,
    compiled_speculative_fn,
    decode_function,
    generate,
)
from keras_transformer.generation.processors import LogitsProcessor
from keras_transformer.generation.registry import get_sampler
from keras_transformer.generation.row_sampler import RowSampler
from keras_transformer.generation.samplers import (
    GreedySampler,
    Sampler,
    TemperatureSampler,
    TopKSampler,
    TopPSampler,
)
from keras_transformer.generation.speculative import speculative_decode_function

__all__ = [
    "BeamSampler",
    "GreedySampler",
    "LogitsProcessor",
    "RowSampler",
    "Sampler",
    "TemperatureSampler",
    "TopKSampler",
    "TopPSampler",
    "compiled_decode_fn",
    "compiled_speculative_fn",
    "decode_function",
    "enable_compile_cache",
    "generate",
    "get_sampler",
    "processors",
    "speculative_decode_function",
]
