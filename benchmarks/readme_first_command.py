"""The README's first command, run as written in a fresh virtual environment:
`pip install . && keras-transformer train gpt2`, 1,000 steps of the default
recipe on Tiny Shakespeare. Its goal is a held-out loss <= 2.0 nats per
character.

    python benchmarks/readme_first_command.py          # about 4 min on 2 cores
    python benchmarks/readme_first_command.py --keep   # keep the work folder

The checkout's files a fresh clone has (tracked or not ignored; nothing
built) are copied to a temporary folder, a virtual environment is made with
this interpreter, and the command runs there (pip needs the network, or a
filled cache). Printed: the install's and the training's wall times, the
held-out loss and perplexity, then `generate` from the export. Exits 1 when
the loss misses the goal or the perplexity is not exp(loss), so it can gate
a release; the test suite checks a 20-step run of the same command
(`tests/test_readme_commands.py`).
"""

import argparse
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOAL = 2.0


def readme_first_command():
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return block.group(1).strip().splitlines()[0]


def copy_checkout(destination):
    """The files a fresh clone has (tracked or not ignored), nothing built."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for name in listed.stdout.splitlines():
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="readme_first_command_"))
    checkout = work / "keras-transformer"
    copy_checkout(checkout)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    install, train = readme_first_command().split(" && ")
    timings = {}
    outputs = {}
    for name, command in [("install", install), ("train", train)]:
        start = time.perf_counter()
        result = subprocess.run(
            ["bash", "-c", command], cwd=checkout, env=env, capture_output=True,
            text=True,
        )  # fmt: skip
        timings[name] = time.perf_counter() - start
        if result.returncode != 0:
            sys.exit(f"`{command}` failed:\n{result.stderr[-4000:]}")
        outputs[name] = result
    stdout = outputs["train"].stdout
    loss = float(re.search(r"held-out loss .*: ([\d.]+)", stdout)[1])
    perplexity = float(re.search(r"held-out perplexity: ([\d.]+)", stdout)[1])
    generated = subprocess.run(
        ["keras-transformer", "generate", "--model", "model", "ROMEO:"],
        cwd=checkout, env=env, capture_output=True, text=True,
    )  # fmt: skip
    print(f"command: {readme_first_command()}")
    print(f"install: {timings['install']:.0f} s; train: {timings['train']:.0f} s")
    print(f"held-out loss: {loss:.4f} nats per character (goal <= {GOAL})")
    print(f"held-out perplexity: {perplexity:.4f}")
    print(f"generate (exit {generated.returncode}): {generated.stdout.strip()!r}")
    if args.keep:
        print(f"work folder: {work}")
    else:
        shutil.rmtree(work)
    failures = []
    if loss > GOAL:
        failures.append(f"held-out loss {loss} > {GOAL}")
    if not math.isclose(perplexity, math.exp(loss), rel_tol=1e-3):
        failures.append(f"perplexity {perplexity} is not exp({loss})")
    if generated.returncode != 0 or not generated.stdout.startswith("ROMEO:"):
        failures.append("generate failed")
    if failures:
        sys.exit("; ".join(failures))


if __name__ == "__main__":
    main()
