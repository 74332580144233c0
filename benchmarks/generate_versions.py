"""Greedy decoding tokens/s of two checkouts of the package, side by side.

The model and request of `benchmarks/generate.py` (GPT-2 shape: 4 layers,
256 hidden, vocabulary 1000, context 1024; 16-token prompt + 240 new
tokens) at batch 1 and 8, each checkout in its own process (its package
first on `PYTHONPATH`), alternating for `--rounds` rounds so drift hits
both. Each process compiles, then reports the median of 5 calls.

    git worktree add /tmp/before f0043c4^
    python benchmarks/generate_versions.py /tmp/before .
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

CHILD = """
import statistics, time, keras, numpy as np
import keras_transformer as kt
keras.utils.set_random_seed(0)
model = kt.models.gpt2(1000, num_layers=4, num_heads=4, hidden_dim=256,
                       intermediate_dim=1024, max_sequence_length=1024,
                       dropout=0.0)
for batch in (1, 8):
    prompt = np.random.default_rng(batch).integers(1, 1000, (batch, 16))
    kt.generation.generate(model, prompt, 240)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        kt.generation.generate(model, prompt, 240)
        times.append(time.perf_counter() - start)
    print(f"batch {batch}: {batch * 240 / statistics.median(times):.0f}")
"""


def rates(checkout):
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
        cwd="/", check=True,
    ).stdout  # fmt: skip
    return {int(b): float(r) for b, r in re.findall(r"batch (\d+): (\d+)", out)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs = {args.before: [], args.after: []}
    for _ in range(args.rounds):
        for checkout in runs:
            runs[checkout].append(rates(checkout))
    print("| batch | before, tokens/s | after, tokens/s | after / before |")
    print("|---|---|---|---|")
    for batch in (1, 8):
        before = [r[batch] for r in runs[args.before]]
        after = [r[batch] for r in runs[args.after]]
        ratio = statistics.median(after) / statistics.median(before)
        print(
            f"| {batch} | {', '.join(f'{r:,.0f}' for r in before)} | "
            f"{', '.join(f'{r:,.0f}' for r in after)} | {ratio:.2f}x |"
        )


if __name__ == "__main__":
    main()
