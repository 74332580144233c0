"""The README's first command, run as written in a fresh virtual environment.

(The second command is what `.ci/run` runs, in a fresh virtual environment
of its own.)
"""

import math
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_commands():
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return block.group(1).strip().splitlines()


def test_ci_runs_the_second_command_in_a_fresh_virtual_environment():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python3 -m venv --clear .venv" in ci
    assert "source .venv/bin/activate" in ci
    assert ci[-1] == readme_commands()[1]


def copy_checkout(destination):
    """The files a fresh clone has (tracked or not ignored), nothing built."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:  # not a git checkout: copy what is there
        shutil.copytree(
            ROOT,
            destination,
            ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info"),
        )
        return
    for name in listed.stdout.splitlines():
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


@pytest.mark.slow
def test_first_command_in_a_fresh_virtual_environment(tmp_path):
    checkout = tmp_path / "keras-transformer"
    copy_checkout(checkout)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    first = readme_commands()[0]
    result = subprocess.run(
        ["bash", "-c", first],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    # The main job (also the CLI's default run; its one test is this one):
    # Tiny Shakespeare, nanoGPT's CPU model, 1,000 steps; the goal is a
    # held-out loss <= 2.0 nats per character.
    assert "Tiny Shakespeare (built in)" in result.stdout
    loss = float(re.search(r"held-out loss .*: ([\d.]+)", result.stdout).group(1))
    assert loss <= 2.0, result.stdout
    perplexity = float(re.search(r"held-out perplexity: ([\d.]+)", result.stdout)[1])
    assert perplexity == pytest.approx(math.exp(loss), rel=1e-3)
    # TensorFlow's C++ log lines stay hidden (pip's own lines may name
    # absl-py, so look for the log lines themselves).
    assert not re.search(r"cudart_stub|absl::|^[IWE]\d{4} ", result.stderr, re.M)
    for name in ["model.keras", "tokenizer.json", "saved_model/saved_model.pb"]:
        assert (checkout / "model" / name).exists(), name

    generated = subprocess.run(
        ["keras-transformer", "generate", "--model", "model", "the cat "],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert generated.stdout.startswith("the cat "), generated.stdout
