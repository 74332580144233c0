"""The compiled-function cache of generation and the tasks.

Compiled functions kept per model, and forgotten when its variables
change.

A `tf.function` traced on a model reads the variables the model had when
it was traced. `quantize`, `enable_lora`, `merge_lora` and `load_lora`
replace or add variables, so a function traced before them would keep
computing with the old ones: float weights after `quantize`, no adapter
after `enable_lora`. Each lookup therefore compares the model's variables
(which ones, not their values) with those the functions were traced on.
"""


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
        >>> from keras_transformer.generation.compiled import CompiledFunctions
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
