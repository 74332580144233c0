"""tensorflow-text, imported on first use.

`import keras_transformer` does not need it: only tokenizers, packing and
masked-LM corruption call its ops. Importing it on first use keeps about
120 MB (and a few tenths of a second) off every process that only trains or
runs a model (`docs/benchmarks.md`). SavedModels exported by this library
still need `import tensorflow_text` before loading: that registers the ops.
"""

import importlib


class _LazyModule:
    """A module proxy that imports the module on the first attribute read."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attribute):
        module = importlib.import_module(self._name)
        # Later reads go straight to the module.
        self.__dict__.update(module.__dict__)
        return getattr(module, attribute)


tf_text = _LazyModule("tensorflow_text")
