"""What every model class shares: size checks, the initializer, its config
and presets.

A model class derives from `ModelMixin`, sets `family` (the presets' name
for it, e.g. `"gpt2"`) and gets `get_config` (with the dtype policy its
layers were built under), `from_config` and `from_preset`;
`preset_factory` turns a thin factory function into one that also accepts
a preset name.
"""

import contextlib
import functools
import threading

import keras

from keras_transformer import _validation as validation
from keras_transformer.models.lora import LoRAMixin
from keras_transformer.models.presets import PRESETS
from keras_transformer.models.quantize import QuantizeMixin
from keras_transformer.training import distribute, multi_worker


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


_PLACEHOLDERS = threading.local()


def initializer(identifier):
    """The Keras initializer `identifier`; zeros inside
    `placeholder_weights()`, where `from_pretrained` assigns every weight
    afterwards."""
    if getattr(_PLACEHOLDERS, "active", False):
        return keras.initializers.Zeros()
    return keras.initializers.get(identifier)


def normal_initializer(stddev=0.02):
    """BERT/GPT-2 initialize weights from N(0, 0.02²); zeros inside
    `placeholder_weights()`."""
    return initializer(keras.initializers.TruncatedNormal(stddev=stddev))


@contextlib.contextmanager
def placeholder_weights():
    """Models built inside start from zeros, not from random draws.

    For `from_pretrained`, which overwrites every weight it builds: drawing
    a GPT-2 small's 124M truncated-normal numbers takes about two seconds on
    two CPU cores, zeros almost nothing. Weights a checkpoint lacks must be
    drawn afterwards with `normal_initializer()`.
    """
    before = getattr(_PLACEHOLDERS, "active", False)
    _PLACEHOLDERS.active = True
    try:
        yield
    finally:
        _PLACEHOLDERS.active = before


@contextlib.contextmanager
def global_dtype_policy(name):
    """Sets Keras' global dtype policy to `name` inside (None: unchanged).

    Our models' layers take the global policy when they are built (none is
    given one but the float32 heads), so a model rebuilt from its config
    must be built under the policy it was built under, not the one that
    happens to be global when a `.keras` file is loaded.
    """
    before = keras.config.dtype_policy()
    if name is not None:
        keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


class FitMixin:
    """`fit` that builds the optimizer's variables before the first step,
    checks the global batch, and works under MultiWorkerMirroredStrategy.

    Without a distribution strategy, Keras builds the optimizer inside the
    first traced training step; TensorFlow then traces that step twice,
    because the first trace creates variables. Building it first, as Keras
    itself does under a strategy, makes it one trace: about 6 of the 20
    seconds before the first step of the 4-layer character GPT on a 2-core
    CPU (`docs/benchmarks.md`). The variables and updates are the same.

    Under a `tf.distribute.MultiWorkerMirroredStrategy` with two or more
    workers, Keras 3's own `fit` fails (keras-team/keras#20585); the
    workaround lives here, in `_maybe_symbolic_build`, `train_step` and
    `test_step`, and is on only while `multi_worker.fit_needs_workaround()`
    finds the bug in the installed Keras (see `kt.training.multi_worker`).
    """

    def fit(self, *args, **kwargs):
        batch_size = kwargs.get("batch_size", args[2] if len(args) > 2 else None)
        if batch_size is not None:
            distribute.check_global_batch(batch_size, self.distribute_strategy)
        optimizer = getattr(self, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)
        return super().fit(*args, **kwargs)

    def _multi_worker_workaround(self):
        strategy = self._distribute_strategy
        return (
            strategy is not None
            and multi_worker.in_multi_worker_mode(strategy)
            and multi_worker.fit_needs_workaround()
        )

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None and self._multi_worker_workaround():
            for _, _, batches in iterator:
                data_batch = multi_worker.first_replica_batch(
                    next(batches), self._distribute_strategy
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def train_step(self, data):
        logs = super().train_step(data)
        if self._multi_worker_workaround():
            return multi_worker.logs_as_vectors(logs)
        return logs

    def test_step(self, data):
        logs = super().test_step(data)
        if self._multi_worker_workaround():
            return multi_worker.logs_as_vectors(logs)
        return logs


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
            return cls(**config)._requantize(mode, block_size, float_layers)

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
                f"Known presets: {', '.join(known)}"
            )
        return cls(**{**PRESETS[name]["config"], **overrides})


def preset_factory(model_class):
    """Lets a factory take a preset name as its first argument.

    `factory("gpt2_tiny", dropout=0.0)` is `model_class.from_preset(...)`
    with exactly the keyword arguments the caller wrote, so a factory's own
    defaults never overwrite a preset's values.
    """

    def decorate(factory):
        @functools.wraps(factory)
        def wrapper(*args, **kwargs):
            first = args[0] if args else kwargs.get("vocabulary_size")
            if isinstance(first, str):
                if not args:
                    kwargs.pop("vocabulary_size")
                return model_class.from_preset(first, *args[1:], **kwargs)
            return factory(*args, **kwargs)

        return wrapper

    return decorate


# Compiled functions kept per model, and forgotten when its variables
# change.
#
# A `tf.function` traced on a model reads the variables the model had when
# it was traced. `quantize`, `enable_lora`, `merge_lora` and `load_lora`
# replace or add variables, so a function traced before them would keep
# computing with the old ones: float weights after `quantize`, no adapter
# after `enable_lora`. Each lookup therefore compares the model's variables
# (which ones, not their values) with those the functions were traced on.


def variables_signature(model):
    """Which variables `model` has: identity, dtype and shape of each."""
    return tuple((id(v), str(v.dtype), tuple(v.shape)) for v in model.weights)


class CompiledFunctions:
    """Dicts of compiled functions, one per owner (a model or a task),
    emptied when the owner's variables have changed.

    Each owner's dict is kept on the owner itself (an attribute Keras does
    not track), so it lives and dies with the owner. (A weak-keyed table
    did not free them: its values, functions closing over their owner, held
    the keys alive, and every model ever decoded stayed in memory.)

    Example:
        >>> import keras
        >>> from keras_transformer.models.base import CompiledFunctions
        >>> cache = CompiledFunctions()
        >>> model = keras.Sequential([keras.layers.Dense(2)])
        >>> model.build((None, 3))
        >>> cache.of(model)["f"] = "traced"
        >>> cache.of(model)
        {'f': 'traced'}
        >>> model.layers[0].enable_lora(1)  # adds two variables
        >>> cache.of(model)
        {}
    """

    def __init__(self):
        self._attribute = f"_kt_compiled_functions_{id(self)}"

    def of(self, owner):
        """`owner`'s dict of functions (a new one if its variables changed)."""
        signature = variables_signature(owner)
        entry = owner.__dict__.get(self._attribute)
        if entry is None or entry[0] != signature:
            entry = (signature, {})
            object.__setattr__(owner, self._attribute, entry)  # untracked
        return entry[1]
