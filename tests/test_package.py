import os
import shutil
import subprocess
import sys

import pytest

import keras_transformer as kt

PUBLIC_LAYERS = {
    "MultiHeadAttention",
    "PositionalEmbedding",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
    "DecoderBlock",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
}


def test_version_and_public_api():
    assert kt.__version__.count(".") == 2
    assert PUBLIC_LAYERS <= set(kt.layers.__all__)
    for name in kt.layers.__all__:
        assert getattr(kt.layers, name) is not None


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff(args):
    # Beside this Python first: a virtual environment's tools are there
    # whether or not it was activated.
    beside = os.path.join(os.path.dirname(sys.executable), "ruff")
    ruff = beside if os.access(beside, os.X_OK) else shutil.which("ruff")
    assert ruff, "ruff is part of the test extra"
    result = subprocess.run(
        [ruff, *args], capture_output=True, text=True, cwd=kt.__path__[0] + "/.."
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cli_rejects_bad_steps():
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "demo", "--steps", "0"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    # (`python -m keras_transformer` imports TensorFlow, whose start-up lines
    # come first; the `keras-transformer` script itself shows none.)
    assert result.stderr.strip().splitlines()[-1] == (
        "keras-transformer demo: error: argument --steps: must be >= 1, got 0"
    )


def test_import_leaves_tensorflow_text_until_a_tokenizer_needs_it():
    # tensorflow-text costs about 120 MB of RSS; only tokenizers, packing and
    # masked-LM corruption need it, and they import it on first use.
    code = (
        "import sys, keras_transformer as kt\n"
        "assert 'tensorflow_text' not in sys.modules, 'imported eagerly'\n"
        "t = kt.text.WordPieceTokenizer([*kt.text.RESERVED_TOKENS, 'a', 'b'])\n"
        "print(t.tokenize(['a b']).to_list())\n"
        "assert 'tensorflow_text' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    first = len(kt.text.RESERVED_TOKENS)
    assert result.stdout.strip().endswith(f"[[{first}, {first + 1}]]")
