"""Loading a Hugging Face checkpoint: time and memory next to safetensors alone.

A BERT-base-shaped checkpoint (12 layers, 768 hidden, 110M parameters), or
with `--model gpt2` a GPT-2-small-shaped one (12 layers, 768 hidden, 124M
parameters), random weights, is written once by `kt.models.save_pretrained`
(not committed). Then,
each in a fresh process, `--repeats` times, interleaved:

- `safetensors`: `safetensors.numpy.load_file` of the weights alone;
- `ours`: `kt.models.from_pretrained(folder)` until the model has answered
  one 16-token input (build, check, assign, first call);
- `baseline`: `import tensorflow, keras_transformer` and nothing else.

Reported: medians of wall time and peak RSS, and the issue's goals as ratios:
ours / safetensors time (goal <= 2) and (ours - baseline) peak RSS / the
checkpoint's size (goal <= 2).

    python benchmarks/pretrained.py [--model bert|gpt2] [--folder FOLDER]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
start = time.perf_counter()
kind, folder = sys.argv[1], sys.argv[2]
if kind == "safetensors":
    from safetensors.numpy import load_file
    load_file(folder + "/model.safetensors")
else:
    import numpy as np
    import tensorflow  # noqa: F401
    import keras_transformer as kt
    if kind == "ours":
        model = kt.models.from_pretrained(folder)
        ids = np.arange(1, 17)[None]
        if isinstance(model, kt.models.GPT2):
            model(ids)
        else:
            model({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids > 0})
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent.
with open("/proc/self/status") as f:
    peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
print(json.dumps({"seconds": time.perf_counter() - start, "peak_mb": peak}))
"""


def run(kind, folder):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, folder],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("bert", "gpt2"), default="bert")
    parser.add_argument("--folder", help="default: /tmp/<model>_base_random")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.folder = args.folder or f"/tmp/{args.model}_base_random"
    weights = os.path.join(args.folder, "model.safetensors")
    if not os.path.isfile(weights):
        import keras_transformer as kt

        preset = {"bert": "bert_base", "gpt2": "gpt2_small"}[args.model]
        model = getattr(kt.models, args.model)(preset)
        kt.models.save_pretrained(model, args.folder)
    size_mb = os.path.getsize(weights) / 2**20
    results = {"safetensors": [], "ours": [], "baseline": []}
    for _ in range(args.repeats):
        for kind in results:
            results[kind].append(run(kind, args.folder))
    medians = {
        kind: {
            key: statistics.median(r[key] for r in runs)
            for key in ("seconds", "peak_mb")
        }
        for kind, runs in results.items()
    }
    print(f"checkpoint: {size_mb:.0f} MB ({args.folder})")
    for kind, m in medians.items():
        print(f"{kind:12s} {m['seconds']:6.2f} s   peak RSS {m['peak_mb']:7.0f} MB")
    ours, alone, base = medians["ours"], medians["safetensors"], medians["baseline"]
    print(
        f"time: ours / safetensors = {ours['seconds'] / alone['seconds']:.2f}x; "
        f"ours minus the import alone / safetensors = "
        f"{(ours['seconds'] - base['seconds']) / alone['seconds']:.2f}x (goal <= 2)"
    )
    print(
        f"memory: (ours - baseline) / checkpoint = "
        f"{(ours['peak_mb'] - base['peak_mb']) / size_mb:.2f}x (goal <= 2)"
    )


if __name__ == "__main__":
    main()
