"""What a second worker costs: GPT training through `model.fit` on 2 workers
with 1 core each (MultiWorkerMirroredStrategy over 127.0.0.1) against 1
worker with 2 cores, at the same global batch.

    python benchmarks/multi_worker.py            # about 4 minutes on 2 cores
    python benchmarks/multi_worker.py --smoke    # a tiny model, for the tests

The model is 4 layers, 256 hidden, 4 heads, 1024 feed-forward, vocabulary
8192, context 128, global batch 16, float32, no XLA in both (XLA has no
collective operations on CPUs). Each worker is a fresh process pinned with
`taskset` to its cores, with as many TensorFlow threads. The two set-ups
alternate for `--rounds` rounds, so machine drift hits both; a step's time
is the median interval between consecutive batch ends after `--warmup`
untimed steps.

The all-reduce share: each of the 2 workers also times, after training, the
all-reduce of a gradient-sized list of tensors alone (the sum the optimizer
does every step), median of `--steps` runs, as a fraction of its step time.
This is a communication cost on one machine's loopback, not a goal.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

LAYERS, HIDDEN, HEADS, INTERMEDIATE, VOCABULARY, LENGTH, BATCH = (
    4,
    256,
    4,
    1024,
    8192,
    128,
    16,
)
SMOKE = dict(
    layers=1, hidden=32, heads=2, intermediate=64, vocabulary=64, length=16, batch=4
)


def sizes(smoke):
    if smoke:
        return SMOKE
    return dict(
        layers=LAYERS,
        hidden=HIDDEN,
        heads=HEADS,
        intermediate=INTERMEDIATE,
        vocabulary=VOCABULARY,
        length=LENGTH,
        batch=BATCH,
    )


def worker(args):
    """One worker: trains, times its steps (and its all-reduce), prints JSON."""
    import keras
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras_transformer as kt

    s = sizes(args.smoke)
    distributed = "TF_CONFIG" in os.environ
    strategy = (
        kt.training.multi_worker_strategy()
        if distributed
        else tf.distribute.get_strategy()
    )
    steps = args.warmup + args.steps
    rng = np.random.default_rng(0)
    ids = rng.integers(1, s["vocabulary"], (steps * s["batch"], s["length"] + 1))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = kt.models.gpt2(
            s["vocabulary"],
            num_layers=s["layers"],
            num_heads=s["heads"],
            hidden_dim=s["hidden"],
            intermediate_dim=s["intermediate"],
            max_sequence_length=s["length"],
            dropout=0.1,
        )
        model.compile(
            optimizer=kt.training.AdamW(1e-4, weight_decay=0.01),
            loss=kt.training.MaskedSparseCategoricalCrossentropy(),
            jit_compile=False,
        )
    ends = []
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: ends.append(time.perf_counter())
    )
    model.fit(
        ids[:, :-1].astype("int32"),
        ids[:, 1:].astype("int32"),
        batch_size=s["batch"],
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[clock],
    )
    step = statistics.median(np.diff(ends[args.warmup :]))
    result = {"step_s": step, "tokens_per_s": s["batch"] * s["length"] / step}
    if distributed:
        gradients = [tf.zeros(v.shape, v.dtype) for v in model.trainable_variables]

        @tf.function
        def all_reduce():
            def replica():
                context = tf.distribute.get_replica_context()
                return context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)

            return strategy.run(replica)

        all_reduce()  # traces
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), all_reduce())
            times.append(time.perf_counter() - start)
        result["all_reduce_s"] = statistics.median(times)
        result["gradient_mb"] = sum(int(np.prod(g.shape)) * 4 for g in gradients) / 1e6
    print(json.dumps(result), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, workers):
    """Runs one set-up: `workers` processes sharing the machine's cores."""
    cores = os.cpu_count() or 2
    per = max(1, cores // workers)
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(workers)]
    processes = []
    for index in range(workers):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        if workers > 1:
            env["TF_CONFIG"] = json.dumps(
                {
                    "cluster": {"worker": addresses},
                    "task": {"type": "worker", "index": index},
                }
            )
        pinned = ",".join(str(c) for c in range(index * per, (index + 1) * per))
        command = [
            "taskset",
            "-c",
            pinned,
            sys.executable,
            __file__,
            "--worker",
            "--threads",
            str(per),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
        ] + (["--smoke"] if args.smoke else [])
        processes.append(
            subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        results = []
        for process in processes:
            stdout, stderr = process.communicate(timeout=1200)
            if process.returncode:
                raise SystemExit(stderr[-3000:])
            results.append(json.loads(stdout.strip().splitlines()[-1]))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    s = sizes(args.smoke)
    print(
        f"GPT {s['layers']} layers, hidden {s['hidden']}, vocabulary "
        f"{s['vocabulary']}, context {s['length']}, global batch {s['batch']}, "
        f"float32, no XLA; {os.cpu_count()} cores"
    )
    one, two = [], []
    for _ in range(args.rounds):
        one.append(launch(args, 1)[0]["tokens_per_s"])
        two.append(launch(args, 2))
    single = statistics.median(one)
    double = statistics.median([r[0]["tokens_per_s"] for r in two])
    step = statistics.median([r[0]["step_s"] for r in two])
    reduce = statistics.median([w["all_reduce_s"] for r in two for w in r])
    print(f"1 worker x {os.cpu_count()} cores: {single:.0f} tokens/s")
    print(f"2 workers x 1 core: {double:.0f} tokens/s")
    print(f"ratio (2 workers / 1 worker): {double / single:.2f}")
    print(
        f"all-reduce of the gradients ({two[0][0]['gradient_mb']:.1f} MB): "
        f"{reduce * 1e3:.1f} ms = {reduce / step:.0%} of a 2-worker step "
        f"({step * 1e3:.0f} ms)"
    )


if __name__ == "__main__":
    main()
