"""The samplers by name: `SAMPLERS` and `get_sampler`.

`generate`, the exporters and the tasks take a sampler as a name and its
arguments, or as an instance; this is the one table that maps the names.
It sits above the sampler modules, so none of them imports it.
"""

from keras_transformer.generation.beam import BeamSampler
from keras_transformer.generation.samplers import (
    GreedySampler,
    Sampler,
    TemperatureSampler,
    TopKSampler,
    TopPSampler,
)

SAMPLERS = {
    "greedy": GreedySampler,
    "temperature": TemperatureSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "beam": BeamSampler,
}


def get_sampler(sampler, **sampler_args):
    """A sampler instance from a name (and its arguments) or an instance."""
    if isinstance(sampler, Sampler):
        if sampler_args:
            raise ValueError(
                f"Sampler arguments {sampler_args} were given with a Sampler "
                f"instance ({type(sampler).__name__}); set them on the instance. "
                f"Received: sampler={sampler!r}, sampler_args={sampler_args!r}"
            )
        return sampler
    if sampler not in SAMPLERS:
        raise ValueError(
            f"Unknown `sampler`: {sampler!r}. Valid samplers: {', '.join(SAMPLERS)}. "
            f"Received: sampler={sampler!r}"
        )
    try:
        return SAMPLERS[sampler](**sampler_args)
    except TypeError as error:
        raise ValueError(
            f"Invalid arguments for sampler {sampler!r}: {sampler_args}. ({error}) "
            f"Received: sampler={sampler!r}, sampler_args={sampler_args!r}"
        ) from None
