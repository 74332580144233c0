import os
import subprocess
import sys

import pytest
import tensorflow as tf

import keras_transformer as kt

# A process that decodes a tiny GPT-2 with the cache in argv[1].
SCRIPT = """
import sys
import numpy as np
import keras_transformer as kt
kt.generation.enable_compile_cache(sys.argv[1])
model = kt.models.gpt2(20, num_layers=1, num_heads=2, hidden_dim=8,
                       intermediate_dim=16, max_sequence_length=16)
kt.generation.generate(model, np.array([[3, 4]]), max_new_tokens=2)
"""


# TensorFlow's own report of its persistent XLA cache, at VLOG level 1 of
# tensorflow/compiler/jit/device_executable_persistor.h: one line per entry
# it compiles and writes, one per entry it reads back and loads instead of
# compiling. A disabled cache writes neither ("Not persisting executable").
LOGGING = {
    "TF_CPP_MIN_LOG_LEVEL": "0",
    "TF_CPP_VMODULE": "device_executable_persistor=1",
}
SAVED = "Serializing and saving cache entry: "
LOADED = "Loading cached entry for: "


def cached_files(folder):
    """`{name: (mtime, bytes)}` of the compiled code in `folder`."""
    found = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            found[name] = (os.stat(path).st_mtime_ns, f.read())
    return found


def decode_in_a_new_process(directory):
    """`(entries saved, entries loaded)`, as TensorFlow logs them."""
    environment = {**os.environ, **LOGGING, "TF_XLA_FLAGS": ""}
    log = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory)],
        env=environment,
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    ).stderr
    return log.count(SAVED), log.count(LOADED)


def test_a_second_process_loads_the_compiled_code_the_first_wrote(tmp_path):
    folder = tmp_path / tf.__version__
    saved, loaded = decode_in_a_new_process(tmp_path)
    written = cached_files(folder)
    # The first process compiled each function and kept it, one file each.
    assert (saved, loaded) == (len(written), 0) and saved > 0
    # The second loaded every entry from the folder and compiled none.
    assert decode_in_a_new_process(tmp_path) == (0, saved)
    assert cached_files(folder) == written


def test_bad_directories_are_refused(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("")
    with pytest.raises(ValueError, match="must be a folder, not a file"):
        kt.generation.enable_compile_cache(str(a_file))
    with pytest.raises(ValueError, match=r"directory=3"):
        kt.generation.enable_compile_cache(3)
