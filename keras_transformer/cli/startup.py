"""Starting TensorFlow for a command: its C++ start-up log lines hidden
unless `--verbose`. Standard library only at the top: `main.py` loads this
file by its path, before the package (which imports TensorFlow)."""

import contextlib
import os
import sys


@contextlib.contextmanager
def _quiet_native_stderr():
    """Sends file descriptor 2 to a temporary file while TensorFlow starts.

    TensorFlow's C++ start-up lines (absl's preamble, CUDA probing, oneDNN
    and CPU-feature notices) are written straight to file descriptor 2, some
    before `TF_CPP_MIN_LOG_LEVEL` is read, so only redirecting it hides them
    all. Should the import fail, what was written is shown after all.
    """
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def start_tensorflow(verbose):
    """Imports TensorFlow, its C++ start-up lines hidden unless `verbose`."""
    if verbose:
        import tensorflow as tf  # noqa: F401

        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with _quiet_native_stderr():
        import tensorflow as tf

        tf.config.list_physical_devices()  # the CUDA probe logs here, once
    import absl.logging

    absl.logging.set_verbosity(absl.logging.ERROR)
