"""What every model class shares: size checks, its config and presets.

A model class derives from `ModelMixin`, sets `family` (the presets' name
for it, e.g. `"gpt2"`) and gets `get_config` (with the dtype policy its
layers were built under), `from_config` and `from_preset`;
`model_factory` writes its factory function from the class (the
signature, the argument docs), one that also accepts a preset name.
(Initializers: `initializers.py`; `fit`: `training/fit.py`; the
compiled-function cache: `generation/compiled.py`.)
"""

import inspect
import textwrap

import keras

from keras_transformer import _validation as validation
from keras_transformer.models.initializers import global_dtype_policy
from keras_transformer.models.lora import LoRAMixin
from keras_transformer.models.presets import PRESETS
from keras_transformer.models.quantize import QuantizeMixin
from keras_transformer.training.fit import FitMixin


def check_sizes(config, vocabulary_name="vocabulary_size"):
    """Raises a ValueError naming the first impossible size in `config` (a
    model's constructor arguments)."""
    vocabulary_size = config[vocabulary_name]
    if (
        isinstance(vocabulary_size, bool)
        or not isinstance(vocabulary_size, int)
        or (vocabulary_size < 2)
    ):
        raise ValueError(
            f"`{vocabulary_name}` must be an integer >= 2 (id 0 is padding). "
            f"Received: {vocabulary_name}={vocabulary_size!r}"
        )
    for name in [
        "num_layers",
        "num_heads",
        "hidden_dim",
        "intermediate_dim",
        "max_sequence_length",
    ]:
        validation.check_positive_int(name, config[name])
    validation.check_rate("dropout", config["dropout"])
    if config["hidden_dim"] % config["num_heads"]:
        raise ValueError(
            "`hidden_dim` must be divisible by `num_heads`. "
            f"Received: hidden_dim={config['hidden_dim']}, "
            f"num_heads={config['num_heads']}"
        )


def constructor_arguments(local_variables):
    """A constructor's arguments from its `locals()` taken first thing: the
    config, exactly the signature's names (not `self`, `kwargs`)."""
    return {
        name: value
        for name, value in local_variables.items()
        if name not in ("self", "kwargs", "__class__")
    }


class ModelMixin(LoRAMixin, QuantizeMixin, FitMixin):
    """What the model classes share: their config and their presets.

    A class calls `self._set_config(**arguments)` with its constructor's
    arguments once its graph is built; they become attributes and are
    `get_config()`. Its `family` names its presets for `from_preset`.
    """

    family = None

    def _set_config(self, **arguments):
        for name, value in arguments.items():
            setattr(self, name, value)
        self._config_names = tuple(arguments)
        self._built_policy = keras.config.dtype_policy().name

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype_policy": self._built_policy,  # e.g. "mixed_float16"
        }
        arguments = {name: getattr(self, name) for name in self._config_names}
        return {**config, **arguments, **self._quantization_config()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        mode = config.pop("quantization_mode", None)
        block_size = config.pop("quantization_block_size", None)
        float_layers = config.pop("quantization_float_layers", ())
        # Files saved before 0.2 have no policy: the global one, as then.
        with global_dtype_policy(config.pop("dtype_policy", None)):
            return cls(**config).requantize(mode, block_size, float_layers)

    @classmethod
    def presets(cls):
        """The names of this class's presets."""
        return sorted(
            name for name, preset in PRESETS.items() if preset["family"] == cls.family
        )

    @classmethod
    def from_preset(cls, name, **overrides):
        """Builds the architecture of preset `name`, with fresh random
        weights; each override replaces exactly that value.

        Unlike KerasHub's `from_preset`, nothing is downloaded and no
        pretrained weights are loaded: a preset is a size. Pretrained weights
        come from a Hugging Face folder, through `kt.models.from_pretrained`
        or a task's `from_pretrained` (`kt.tasks`).

        Args:
            name: a preset name (see `kt.models.PRESETS`).
            **overrides: constructor arguments that replace the preset's,
                e.g. `dropout=0.0` or `max_sequence_length=128`.

        Returns:
            A new, randomly initialized model of this class.
        """
        known = cls.presets()
        if name not in known:
            raise ValueError(
                f"Unknown {cls.family} preset {name!r}. "
                f"Known presets: {', '.join(known)}. Received: name={name!r}"
            )
        return cls(**{**PRESETS[name]["config"], **overrides})


def model_factory(model_class, name, summary, returns, example):
    """The factory function `name` of `model_class`, written from the class.

    Its signature is the constructor's (without `**kwargs`), and its
    docstring is `summary`, the class's own `Args` entries, `returns` and
    `example`, so nothing is written twice. Its first argument may also be
    a preset name: `factory("gpt2_tiny", dropout=0.0)` is
    `model_class.from_preset(...)` with exactly the keyword arguments the
    caller wrote, so no default overwrites a preset's values.

    Args:
        model_class: a `ModelMixin` model class with a Google-style `Args`
            section.
        name: the factory's name (`"gpt2"`).
        summary: the docstring's first line.
        returns: what the factory returns, for its `Returns` section.
        example: the docstring's example (doctest lines, unindented).

    Returns:
        The factory function; put it in its module's `__test__` so that its
        example runs with the module's docstrings.
    """
    constructor = inspect.signature(model_class.__init__)
    parameters = [
        p
        for p in list(constructor.parameters.values())[1:]  # not `self`
        if p.kind is not p.VAR_KEYWORD
    ]
    signature = constructor.replace(parameters=parameters)
    first = parameters[0].name

    def factory(*args, **kwargs):
        preset = args[0] if args else kwargs.get(first)
        if isinstance(preset, str):
            if not args:
                kwargs.pop(first)
            return model_class.from_preset(preset, *args[1:], **kwargs)
        bound = signature.bind(*args, **kwargs)  # a TypeError, as a function's
        return model_class(*bound.args, **bound.kwargs)

    factory.__signature__ = signature
    factory.__name__ = factory.__qualname__ = name
    factory.__module__ = model_class.__module__
    if model_class.__doc__ is not None:  # None under `python -OO`
        factory.__doc__ = _factory_doc(model_class, first, summary, returns, example)
    return factory


def _factory_doc(model_class, first, summary, returns, example):
    """A factory's docstring from its class's `Args` section (without
    `**kwargs`), its first argument also naming the class's presets."""
    lines = inspect.getdoc(model_class).splitlines()
    start = lines.index("Args:") + 1
    end = lines.index("", start)
    arguments, entry = [], None
    for line in lines[start:end]:
        if not line.startswith("        "):  # a new entry
            entry = line.split(":")[0].strip()
            if arguments and arguments[-1][0] == first and model_class.presets():
                names = ", ".join(f'`"{p}"`' for p in model_class.presets())
                note = (
                    f"Or a preset name ({names}); the keyword arguments given "
                    "override exactly those preset values."
                )
                wrapped = textwrap.wrap(note, 76, initial_indent=" " * 8)
                wrapped[1:] = ["        " + line for line in wrapped[1:]]
                arguments += [(first, line) for line in wrapped]
        if entry != "**kwargs":
            arguments.append((entry, line))
    text = [summary, "", "Args:", *(line for _, line in arguments), "", "Returns:"]
    text += textwrap.wrap(returns, 72, initial_indent="    ", subsequent_indent="    ")
    text += ["", "Examples:", textwrap.indent(textwrap.dedent(example).strip(), "    ")]
    return textwrap.indent("\n".join(text), "    ").strip() + "\n"
