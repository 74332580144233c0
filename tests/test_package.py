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
    ruff = shutil.which("ruff")
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
