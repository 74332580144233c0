"""Work-arounds of Keras and TensorFlow behaviour, each naming what it works
around and the version it was checked against."""

import contextlib
import gc


@contextlib.contextmanager
def collect_once():
    """Python's garbage collection run once on leaving, not once per
    variable deleted inside.

    Keras' `Layer.__delattr__` runs `gc.collect()` after each variable it
    removes (keras/src/layers/layer.py, checked on Keras 3.15.1): three per
    projection that `quantize` replaces, two per layer that `merge_lora`
    folds. With a model's TensorFlow objects in memory a collection takes
    0.3 to 0.6 s, so `quantize("int8")` of a 135M-parameter model took six
    minutes, nearly all of it collecting.
    """
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
    gc.collect()
