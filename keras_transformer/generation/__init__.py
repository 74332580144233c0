"""Autoregressive generation with a compiled KV cache, and its samplers."""

from keras_transformer.generation.decode import (
    compiled_decode_fn,
    compiled_speculative_fn,
    decode_function,
    generate,
)
from keras_transformer.generation.samplers import (
    BeamSampler,
    GreedySampler,
    Sampler,
    TemperatureSampler,
    TopKSampler,
    TopPSampler,
    get_sampler,
)
from keras_transformer.generation.speculative import speculative_decode_function

__all__ = [
    "BeamSampler",
    "GreedySampler",
    "Sampler",
    "TemperatureSampler",
    "TopKSampler",
    "TopPSampler",
    "compiled_decode_fn",
    "compiled_speculative_fn",
    "decode_function",
    "generate",
    "get_sampler",
    "speculative_decode_function",
]
