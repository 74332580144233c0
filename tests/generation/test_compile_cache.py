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


def cached_files(folder):
    """`{name: (mtime, bytes)}` of the compiled code in `folder`."""
    found = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            found[name] = (os.stat(path).st_mtime_ns, f.read())
    return found


def test_a_second_process_reads_the_compiled_code_the_first_wrote(tmp_path):
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_XLA_FLAGS": ""}
    folder = tmp_path / tf.__version__
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path)],
            env=environment,
            check=True,
            timeout=300,
        )
        if _ == 0:
            written = cached_files(folder)
    assert written  # the first process compiled and kept its code
    assert cached_files(folder) == written  # the second read it, wrote nothing


def test_bad_directories_are_refused(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("")
    with pytest.raises(ValueError, match="must be a folder, not a file"):
        kt.generation.enable_compile_cache(str(a_file))
    with pytest.raises(ValueError, match=r"directory=3"):
        kt.generation.enable_compile_cache(3)
