"""nanoGPT's CPU Shakespeare-char recipe, three ways in one run: ours,
KerasHub's GPT-2 backbone and a minimal PyTorch GPT.

    python benchmarks/char_gpt.py            # needs `pip install -e ".[bench]"`
    python benchmarks/char_gpt.py --contenders ours,torch --steps 500

The recipe is nanoGPT's `train_shakespeare_char` CPU run: 4 layers, 4 heads,
128 hidden (512 feed-forward), context 64, batch 12, 2000 steps, no dropout,
AdamW (1e-3, beta2 0.99, weight decay 0.1 on matrices, global norm clip 1.0),
100 warm-up steps then cosine decay to 1e-4, a 90/10 split of Tiny
Shakespeare. The Keras contenders train through `model.fit` with XLA on and
the same optimizer, loss, batches and `steps_per_execution`; the PyTorch GPT
(written here, the same architecture with biases and tied embeddings, eager
like nanoGPT's CPU run) trains in a plain loop on the same batches.

Each contender runs in a fresh process, one after the other, so its peak RSS
is its own and no two share the two cores. Reported per contender: wall time
of the whole process (imports, data, build, compile, training and the
validation pass), the median step time after `--warmup` steps, the
validation loss (mean over `--eval-batches` fixed batches of held-out
windows, the same for every contender) and the peak RSS (`ru_maxrss`).
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

START = time.perf_counter()

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "shared", "data", "tinyshakespeare.txt")
LAYERS, HEADS, HIDDEN, INTERMEDIATE, CONTEXT, BATCH = 4, 4, 128, 512, 64, 12
PEAK_LR, FINAL_LR, WARMUP = 1e-3, 1e-4, 100
CONTENDERS = ("ours", "keras-hub", "torch")


# === Data: the same batches for every contender ===


def load_data(args):
    import numpy as np

    if os.path.exists(args.data):
        with open(args.data, encoding="utf-8") as f:
            text = f.read()
    else:  # the copy shipped with the package (the same text)
        sys.path.insert(0, os.path.join(HERE, ".."))
        from keras_transformer.cli.datasets import tiny_shakespeare

        text = tiny_shakespeare()
    chars = sorted(set(text))
    lookup = {c: i + 1 for i, c in enumerate(chars)}  # id 0 is padding
    ids = np.array([lookup[c] for c in text], dtype="int32")
    split = int(0.9 * len(ids))
    rng = np.random.default_rng(args.seed)
    train = windows(ids[:split], args.steps * BATCH, rng)
    val = windows(ids[split:], args.eval_batches * BATCH, rng)
    return len(chars) + 1, train, val


def windows(ids, count, rng):
    import numpy as np

    starts = rng.integers(0, len(ids) - CONTEXT - 1, count)
    tokens = ids[starts[:, None] + np.arange(CONTEXT + 1)]
    return tokens[:, :-1], tokens[:, 1:]


def learning_rate(step, total):
    """The schedule of `kt.training.warmup_cosine_decay(1e-3, 100, total, 1e-4)`."""
    if step < WARMUP:
        return PEAK_LR * step / WARMUP
    progress = min(1.0, (step - WARMUP) / (total - WARMUP))
    return FINAL_LR + (PEAK_LR - FINAL_LR) * 0.5 * (1 + math.cos(math.pi * progress))


def memory_mb():
    """(current RSS, peak RSS) of this process in MB, from /proc (Linux)."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f)
    except OSError:
        return None, None
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))


PHASES = {}


def mark(name):
    """Records seconds since start-up, RSS and peak RSS (MB) at `name`."""
    PHASES[name] = (round(time.perf_counter() - START, 2), *memory_mb())


# === The Keras contenders ===


def keras_model(name, vocabulary):
    import keras

    if name == "ours":
        import keras_transformer as kt

        return kt.models.gpt2(
            vocabulary,
            num_layers=LAYERS,
            num_heads=HEADS,
            hidden_dim=HIDDEN,
            intermediate_dim=INTERMEDIATE,
            max_sequence_length=CONTEXT,
            dropout=0.0,
        )
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=vocabulary,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=INTERMEDIATE,
        dropout=0.0,
        max_sequence_length=CONTEXT,
    )
    token_ids = keras.Input((None,), dtype="int32")
    hidden = backbone({"token_ids": token_ids, "padding_mask": token_ids != 0})
    logits = backbone.token_embedding(hidden, reverse=True)  # the same tied head
    return keras.Model(token_ids, logits)


def run_keras(name, args):
    import keras

    import keras_transformer as kt

    mark("import")
    keras.utils.set_random_seed(args.seed)
    vocabulary, (x, y), (vx, vy) = load_data(args)
    mark("data")
    model = keras_model(name, vocabulary)
    mark("build")
    model.compile(
        optimizer=kt.training.AdamW(
            kt.training.warmup_cosine_decay(PEAK_LR, WARMUP, args.steps, FINAL_LR),
            weight_decay=0.1,
            beta_1=0.9,
            beta_2=0.99,
            global_clipnorm=1.0,
        ),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        jit_compile=True,
        steps_per_execution=args.steps_per_execution,
    )
    ends = []

    def batch_end(batch, logs):
        ends.append(time.perf_counter())
        if len(ends) == 1:
            mark("first call")  # tracing, compiling and the first execution

    timer = keras.callbacks.LambdaCallback(on_train_batch_end=batch_end)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[timer])  # fmt: skip
    mark("fit")
    loss = model.evaluate(vx, vy, batch_size=BATCH, verbose=0)
    mark("evaluate")
    per_call = [ends[i + 1] - ends[i] for i in range(len(ends) - 1)]
    skip = max(1, args.warmup // args.steps_per_execution)
    return per_call[skip:], args.steps_per_execution, float(loss)


# === The PyTorch contender ===


def run_torch(args):
    import numpy as np
    import torch
    from torch import nn
    from torch.nn import functional as F

    mark("import")
    torch.manual_seed(args.seed)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(HIDDEN, eps=1e-5)
            self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
            self.proj = nn.Linear(HIDDEN, HIDDEN)
            self.ln_2 = nn.LayerNorm(HIDDEN, eps=1e-5)
            self.fc = nn.Linear(HIDDEN, INTERMEDIATE)
            self.fc_out = nn.Linear(INTERMEDIATE, HIDDEN)

        def forward(self, x):
            b, t, e = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(e, dim=2)
            q, k, v = (
                z.view(b, t, HEADS, e // HEADS).transpose(1, 2) for z in (q, k, v)
            )
            h = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(h.transpose(1, 2).reshape(b, t, e))
            return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, vocabulary):
            super().__init__()
            self.token = nn.Embedding(vocabulary, HIDDEN)
            self.position = nn.Embedding(CONTEXT, HIDDEN)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(HIDDEN, eps=1e-5)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids):
            x = self.token(ids) + self.position(torch.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.ln_f(x) @ self.token.weight.T  # tied head

    vocabulary, (x, y), (vx, vy) = load_data(args)
    mark("data")
    model = GPT(vocabulary)
    mark("build")
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=PEAK_LR,
        betas=(0.9, 0.99),
    )
    x, y = torch.from_numpy(x).long(), torch.from_numpy(y).long()
    ends = []
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps)
        rows = slice(step * BATCH, (step + 1) * BATCH)
        logits = model(x[rows])
        loss = F.cross_entropy(logits.flatten(0, 1), y[rows].flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ends.append(time.perf_counter())
        if step == 0:
            mark("first call")
    mark("fit")
    model.eval()
    losses = []
    with torch.no_grad():
        for i in range(0, len(vx), BATCH):
            logits = model(torch.from_numpy(vx[i : i + BATCH]).long())
            target = torch.from_numpy(vy[i : i + BATCH]).long()
            losses.append(
                float(F.cross_entropy(logits.flatten(0, 1), target.flatten()))
            )
    mark("evaluate")
    per_step = np.diff(ends).tolist()
    return per_step[args.warmup :], 1, float(np.mean(losses))


# === Driver ===


def child(args):
    if args.run == "torch":
        times, steps_per_call, loss = run_torch(args)
    else:
        times, steps_per_call, loss = run_keras(args.run, args)
    times = sorted(times)
    result = {
        "name": args.run,
        "ms_per_step": 1000 * times[len(times) // 2] / steps_per_call,
        "val_loss": loss,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "process_s": time.perf_counter() - START,
        "phases": PHASES,
    }
    print("RESULT " + json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--steps-per-execution", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--eval-batches", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--run", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        return child(args)
    names = args.contenders.split(",")
    for name in names:
        if name not in CONTENDERS:
            parser.error(f"--contenders: unknown {name!r}; choose from {CONTENDERS}")
    results = {}
    forwarded = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                 if k not in ("contenders", "run")]  # fmt: skip
    for name in names:
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, f"--run={name}", *forwarded],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - began
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if done.returncode or not lines:
            sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
        results[name] = {**json.loads(lines[-1][7:]), "wall_s": wall}
        print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
    print(
        f"\nnanoGPT shakespeare-char CPU recipe: {args.steps} steps, batch {BATCH}, "
        f"context {CONTEXT}, steps_per_execution {args.steps_per_execution} "
        f"(Keras), median step after {args.warmup} warm-up steps\n"
    )
    print("| contender | wall s | ms/step | val loss | peak RSS MB |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['wall_s']:.1f} | {r['ms_per_step']:.1f} | "
              f"{r['val_loss']:.4f} | {r['peak_rss_mb']:,.0f} |")  # fmt: skip
    print("\nSeconds since start-up / RSS MB / peak RSS MB at the end of each phase:\n")
    phases = list(next(iter(results.values()))["phases"])
    print("| contender | " + " | ".join(phases) + " |")
    print("|---" * (len(phases) + 1) + "|")
    for name, r in results.items():
        cells = ["{:.1f} s / {:,.0f} / {:,.0f}".format(*r["phases"][p]) for p in phases]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if "ours" in results:
        for other in [n for n in results if n != "ours"]:
            a, b = results["ours"], results[other]
            print(
                f"ours / {other}: wall {a['wall_s'] / b['wall_s']:.2f}x, "
                f"step {a['ms_per_step'] / b['ms_per_step']:.2f}x, "
                f"val loss {a['val_loss'] - b['val_loss']:+.3f}"
            )


if __name__ == "__main__":
    main()
