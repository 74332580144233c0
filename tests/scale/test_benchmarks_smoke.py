import pathlib
import re
import subprocess
import sys

import pytest

import keras_transformer as kt

ROOT = pathlib.Path(__file__).resolve().parents[2]


def number(pattern, text):
    match = re.search(pattern, text, re.M)
    assert match, text
    return float(match.group(1))


@pytest.mark.slow
def test_gpu_train_benchmark_smoke_prints_tokens_per_second_and_mfu():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_train.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "mixed_bfloat16, XLA" in out
    tokens_per_second = number(r"^tokens/s: ([\d.]+)$", out)
    mfu = number(r"^MFU: ([\d.e+-]+)% of 989 TFLOP/s$", out) / 100
    flops_per_token = number(r"^FLOPs/token: (\d+) ", out)
    # The smoke model: 2 layers, hidden 64, context 64, vocabulary 256.
    smoke = kt.models.gpt2(
        256,
        num_layers=2,
        num_heads=2,
        hidden_dim=64,
        intermediate_dim=256,
        max_sequence_length=64,
    )
    matmul_parameters = smoke.count_params() - 64 * 64  # without positions
    assert flops_per_token == 6 * matmul_parameters + 12 * 2 * 64 * 64
    assert tokens_per_second > 0
    assert mfu == pytest.approx(flops_per_token * tokens_per_second / 989e12, rel=1e-2)
