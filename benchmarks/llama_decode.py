"""Greedy decoding at real size: ours, transformers and KerasHub side by
side, against this machine's memory-bandwidth ceiling.

For each size (random weights shaped like SmolLM2-135M and Qwen2.5-0.5B,
or GPT-2 small with `--sizes gpt2_small`, float32; or a real checkpoint's
folder with `--folder`), in one run:

- ours: `kt.models.llama(preset)` with random weights, decoded by
  `kt.generation.generate` (the XLA-compiled KV-cache loop);
- transformers: `AutoModelForCausalLM.from_pretrained` of the folder that
  `kt.models.save_pretrained` wrote from ours (the same weights), decoded by
  `generate(do_sample=False)` with the end token off, so that both decode
  every token; PyTorch on the CPU;
- KerasHub: `LlamaCausalLM` / `QwenCausalLM` over a `LlamaBackbone` /
  `QwenBackbone` of the same shapes (its own random weights: greedy decoding
  without an end token does the same work whatever the values), compiled
  with `sampler="greedy"`;
- the ceiling: one matrix-vector product with every weight matrix of the
  model (batch 1), the bytes it reads over its time, at the best speed any
  library reaches here (XLA's `x @ W` over `(in, out)` matrices, XLA's
  `matvec` and PyTorch's `linear` over `(out, in)` copies): the most
  new tokens per second a batch-1 decoder can reach, since each new token
  reads every weight once. It runs in turn with the decoders (one pass per
  new token), and each batch-1 rate is given as a fraction of it.

Each contender decodes a 16-token prompt to `--new` new tokens at batch 1
and 8; the first call (compiles) is timed apart, then the contenders run in
turn `--repeats` times and the median is reported. `--load` also measures
loading a bfloat16 checkpoint of the Qwen2.5-0.5B shape (time and peak
memory, each loader in a fresh process).

    pip install -e ".[bench]" && pip install torch==2.13.0 transformers
    python benchmarks/llama_decode.py [--sizes smollm2_135m qwen2_5_0_5b]
        [--new 64] [--repeats 3] [--load]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt

PROMPT = 16


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ceiling(model, repeats=20):
    """`(bytes, seconds, one_pass, passes)`: the bytes of `model`'s weight
    matrices; the median time of the fastest of three matrix-vector passes
    over all of them (XLA's `x @ W` over `(in, out)` matrices, XLA's
    `matvec` over `(out, in)` copies, and PyTorch's `linear` over `(out,
    in)` copies, its own layout); that fastest pass as a function (timed
    again beside the decoders, so that the fraction compares times of the
    same minutes); and each pass's GB/s."""
    import torch

    arrays = []
    for weight in model.weights:
        array = keras.ops.convert_to_numpy(weight)
        if array.ndim >= 2:
            arrays.append(array.reshape(array.shape[0], -1))
    size = sum(a.size * 4 for a in arrays)
    in_out = [tf.constant(a) for a in arrays]
    out_in = [tf.constant(np.ascontiguousarray(a.T)) for a in arrays]
    vectors = [tf.ones((1, a.shape[0])) for a in arrays]
    torch_out_in = [torch.from_numpy(np.ascontiguousarray(a.T)) for a in arrays]
    torch_vectors = [torch.ones((1, a.shape[0])) for a in arrays]

    @tf.function(jit_compile=True)
    def xla_in_out(vectors):
        return tf.add_n(
            [tf.reduce_sum(v @ m) for v, m in zip(vectors, in_out, strict=True)]
        )

    @tf.function(jit_compile=True)
    def xla_out_in(vectors):
        return tf.add_n(
            [
                tf.reduce_sum(tf.linalg.matvec(m, v[0]))
                for v, m in zip(vectors, out_in, strict=True)
            ]
        )

    def torch_pass():
        with torch.inference_mode():
            return sum(
                float(torch.nn.functional.linear(v, m).sum())
                for v, m in zip(torch_vectors, torch_out_in, strict=True)
            )

    candidates = {
        "XLA x @ W (in, out)": lambda: xla_in_out(vectors).numpy(),
        "XLA matvec (out, in)": lambda: xla_out_in(vectors).numpy(),
        "torch linear (out, in)": torch_pass,
    }
    medians = {}
    for name, one_pass in candidates.items():
        one_pass()
        medians[name] = statistics.median(timed(one_pass) for _ in range(repeats))
    best = min(medians, key=medians.get)
    passes = {name: size / seconds / 1e9 for name, seconds in medians.items()}
    return size, medians[best], candidates[best], passes


def keras_hub_model(name, config):
    import keras_hub

    if name.startswith("gpt2"):
        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=config["vocabulary_size"] - 1,
            num_layers=config["num_layers"],
            num_heads=config["num_heads"],
            hidden_dim=config["hidden_dim"],
            intermediate_dim=config["intermediate_dim"],
            max_sequence_length=config["max_sequence_length"],
            dropout=0.0,
        )
        model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
        model.compile(sampler="greedy")
        return model
    shared = dict(
        vocabulary_size=config["vocabulary_size"] - 1,
        num_layers=config["num_layers"],
        num_query_heads=config["num_heads"],
        num_key_value_heads=config["num_key_value_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        rope_max_wavelength=config["rope_theta"],
        layer_norm_epsilon=config["layer_norm_epsilon"],
        tie_word_embeddings=config["tie_word_embeddings"],
    )
    if config.get("attention_bias"):  # Qwen2
        backbone = keras_hub.models.QwenBackbone(**shared)
        model = keras_hub.models.QwenCausalLM(backbone=backbone, preprocessor=None)
    else:
        backbone = keras_hub.models.LlamaBackbone(**shared)
        model = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
    model.compile(sampler="greedy")
    return model


def decode_contenders(name, new, batches, repeats, folder=None):
    """Decodes a random model of preset `name`'s shape, or the checkpoint
    in `folder` (real weights), with each contender."""
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    keras.utils.set_random_seed(0)
    if folder:
        ours = kt.models.from_pretrained(folder)
        config = ours.get_config()
        name = f"{name} (real weights: {folder})"
    elif name.startswith("gpt2"):  # GPT-2's learned positions: its own length
        config = dict(kt.models.PRESETS[name]["config"], dropout=0.0)
        ours = kt.models.gpt2(**config)
    else:
        config = dict(kt.models.PRESETS[name]["config"])
        config["max_sequence_length"] = PROMPT + new
        ours = kt.models.llama(**config)
    size, seconds, one_pass, passes = ceiling(ours)
    with tempfile.TemporaryDirectory() as saved:
        kt.models.save_pretrained(ours, saved)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(
            folder or saved, dtype=torch.float32
        ).eval()
    theirs.generation_config.eos_token_id = None
    theirs.generation_config.pad_token_id = 0
    hub = keras_hub_model(name, ours.get_config())  # every argument
    print(
        f"\n{name}: {ours.count_params():,} parameters, float32; the ceiling: "
        f"{size / 1e9:.2f} GB of weights read in {seconds * 1e3:.1f} ms "
        f"({size / seconds / 1e9:.1f} GB/s) = {1 / seconds:.1f} tokens/s at batch 1"
        " (the fastest of: "
        + ", ".join(f"{k} {v:.1f} GB/s" for k, v in passes.items())
        + ")"
    )
    print(
        "\n| batch | contender | compile + first run s | new tokens/s "
        "| ours / it | of the ceiling |"
    )
    print("|---|---|---|---|---|---|")
    rows = []
    for batch in batches:
        rng = np.random.default_rng(batch)
        prompt = rng.integers(1, config["vocabulary_size"] - 1, (batch, PROMPT))
        total = PROMPT + new
        hub_inputs = {
            "token_ids": np.pad(prompt - 1, ((0, 0), (0, new))).astype("int32"),
            "padding_mask": np.arange(total)[None].repeat(batch, 0) < PROMPT,
        }
        outputs = {}

        def run_ours(p=prompt, outputs=outputs):
            outputs["ours"] = kt.generation.generate(ours, p, new)

        def run_theirs(p=prompt, outputs=outputs):
            with torch.inference_mode():
                outputs["transformers"] = theirs.generate(
                    torch.tensor(p - 1),
                    attention_mask=torch.ones(p.shape, dtype=torch.long),
                    max_new_tokens=new,
                    min_new_tokens=new,
                    do_sample=False,
                ).numpy()

        def run_hub(x=hub_inputs, total=total):
            hub.generate(x, max_length=total, stop_token_ids=None)

        contenders = {
            "ours": run_ours,
            "transformers": run_theirs,
            "keras-hub": run_hub,
        }
        if batch == 1:  # the ceiling: one pass over the weights per new token
            contenders["ceiling"] = lambda: [one_pass() for _ in range(new)]
        first = {k: timed(fn) for k, fn in contenders.items()}
        times = {k: [] for k in contenders}
        for _ in range(repeats):
            for k, fn in contenders.items():
                times[k].append(timed(fn))
        rate = {k: batch * new / statistics.median(t) for k, t in times.items()}
        same = np.array_equal(outputs["ours"] - 1, outputs["transformers"])
        for k in contenders:
            fraction = rate[k] / rate["ceiling"] if batch == 1 else None
            print(
                f"| {batch} | {k} | {first[k]:.1f} | {rate[k]:,.1f} | "
                f"{rate['ours'] / rate[k]:.2f}x | "
                f"{'' if fraction is None else f'{fraction:.0%}'} |"
            )
            rows.append(dict(size=name, batch=batch, contender=k, rate=rate[k]))
        print(f"| {batch} | ours' tokens == transformers' | {same} | | | |")
    return rows


PEAK = """
def peak(key="VmHWM"):  # GB: peak (VmHWM, new at exec) or now (VmRSS) resident
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 2**20
"""

LOAD_OURS = (
    PEAK
    + """
import sys, time
import keras_transformer as kt
base = peak()
start = time.perf_counter()
model = kt.models.from_pretrained(sys.argv[1], dtype=sys.argv[2] or None)
print(time.perf_counter() - start, base, peak(), peak("VmRSS"))
"""
)

LOAD_THEIRS = (
    PEAK
    + """
import sys, time
import torch, transformers
base = peak()
start = time.perf_counter()
dtype = {"bfloat16": torch.bfloat16, "": torch.float32}[sys.argv[2]]
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=dtype)
seconds = time.perf_counter() - start
with torch.inference_mode():  # touches every weight: its pages are then resident
    model(torch.tensor([[1, 2, 3]]))
print(seconds, base, peak(), peak("VmRSS"))
"""
)


def load_contenders():
    """Load time and peak memory of a bfloat16 Qwen2.5-0.5B-shaped folder."""
    import torch
    import transformers

    keras.utils.set_random_seed(0)
    config = dict(kt.models.PRESETS["qwen2_5_0_5b"]["config"])
    with tempfile.TemporaryDirectory() as work:
        ours = kt.models.llama(**config)
        kt.models.save_pretrained(ours, os.path.join(work, "f32"))
        del ours
        model = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(work, "f32"), dtype=torch.bfloat16
        )
        model.save_pretrained(os.path.join(work, "bf16"))
        del model
        size = sum(
            os.path.getsize(os.path.join(work, "bf16", f))
            for f in os.listdir(os.path.join(work, "bf16"))
        )
        print(
            f"\nLoading a bfloat16 Qwen2.5-0.5B-shaped folder ({size / 1e9:.2f} GB "
            "on disk), each in a fresh process; peak resident memory, GB:\n"
        )
        print(
            "| loader | load s | peak after import | peak after loading "
            "| resident after loading | peak added |"
        )
        print("|---|---|---|---|---|---|")
        for label, script, dtype in [
            ("ours, dtype='bfloat16'", LOAD_OURS, "bfloat16"),
            ("ours, float32 (default)", LOAD_OURS, ""),
            ("transformers, dtype=torch.bfloat16", LOAD_THEIRS, "bfloat16"),
        ]:
            out = subprocess.run(
                [sys.executable, "-c", script, os.path.join(work, "bf16"), dtype],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            seconds, base, peak, resident = (float(v) for v in out[-4:])
            print(
                f"| {label} | {seconds:.1f} | {base:.2f} | {peak:.2f} | "
                f"{resident:.2f} | {peak - base:.2f} |"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="*", default=["smollm2_135m", "qwen2_5_0_5b"])
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", action="store_true")
    parser.add_argument(
        "--folder", help="a Hugging Face Llama-family folder decoded instead of --sizes"
    )
    parser.add_argument("--results", help="JSON-lines file the rates append to")
    args = parser.parse_args()
    print(
        f"greedy, {PROMPT}-token prompt + {args.new} new tokens, median of "
        f"{args.repeats} runs after a compiling one, {os.cpu_count()} CPU cores"
    )
    sizes = ["checkpoint"] if args.folder else args.sizes
    for name in sizes:
        rows = decode_contenders(name, args.new, args.batch, args.repeats, args.folder)
        if args.results:
            with open(args.results, "a") as f:
                f.writelines(json.dumps(row) + "\n" for row in rows)
    if args.load:
        load_contenders()


if __name__ == "__main__":
    main()
