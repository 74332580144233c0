"""Several tokens per step: speculative and prompt-lookup decoding next to
plain cached greedy decoding, in one run (and KerasHub's SpeculativeSampler).

Two character-level GPTs are trained on Tiny Shakespeare through `model.fit`
(or loaded from the `.keras` files an earlier run wrote to `--cache`):

- the target: 6 layers, 256 hidden, 4 heads, 1024 feed-forward;
- the draft: 2 layers, 128 hidden, 2 heads, 512 feed-forward.

Both have a 384-character context and are trained on random 384-character
windows of the first 90% of the text. Then, at batch 1, greedy, `--new` new
tokens (200 by default):

- plain: `kt.generation.generate(target, prompt, 200)`, the XLA-compiled
  KV-cache loop, one token per step;
- speculative: the same call with `draft_model=draft,
  num_speculative_tokens=K` on a held-out Shakespeare prompt;
- prompt lookup: `prompt_lookup_num_tokens=K` (no draft) on a prompt that
  quotes a held-out passage, then starts it again, so the continuation is
  in the prompt; plain greedy runs on that prompt too.

Every contender runs once to compile (reported apart), then `--repeats` times
in turn, interleaved so drift hits all alike; the figures are medians of new
tokens per second, and speedups are ratios to plain greedy on the same
prompt. Outputs are checked to be identical to plain greedy's. The
acceptance rate is the share of proposed tokens kept, from the decode
loop's own counts (`compiled_speculative_fn`).

With KerasHub installed (`pip install -e ".[bench]"`) and a
`keras_hub.samplers.SpeculativeSampler` in it, the same trained weights are
loaded into `keras_hub.models.GPT2CausalLM` (through our
`save_pretrained` folders) and its plain greedy `generate` is compared with
its SpeculativeSampler driven by the GPT-2 cache functions, verifying K + 1
positions in one pass. KerasHub wires that sampler into `generate` for
Gemma 4 only, so the script calls it the way Gemma4CausalLM does.

    python benchmarks/speculative.py              # trains once (~25 min on 2 cores)
    python benchmarks/speculative.py --smoke      # a tiny, fast check
"""

import argparse
import json
import os
import pathlib
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.generation.decode import compiled_speculative_fn

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
CONTEXT = 384
TARGET = dict(num_layers=6, num_heads=4, hidden_dim=256, intermediate_dim=1024)
DRAFT = dict(num_layers=2, num_heads=2, hidden_dim=128, intermediate_dim=512)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DATA), help="a UTF-8 text")
    parser.add_argument(
        "--cache",
        default=os.path.expanduser("~/.cache/keras_transformer/speculative"),
        help="where the trained models are written and found again",
    )
    parser.add_argument("--target-steps", type=int, default=800)
    parser.add_argument("--draft-steps", type=int, default=1600)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--new", type=int, default=200, help="new tokens")
    parser.add_argument("--k", type=int, default=4, help="speculative tokens")
    parser.add_argument("--lookup-k", type=int, default=4, help="lookup tokens")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="a tiny, fast run")
    args = parser.parse_args()
    if args.smoke:
        args.target_steps = args.draft_steps = 4
        args.new, args.repeats = 24, 1
        args.cache = os.path.join(args.cache, "smoke")
    return args


def read_text(path):
    text = pathlib.Path(path).read_text(encoding="utf-8")
    chars = sorted(set(text))
    lookup = {c: i + 1 for i, c in enumerate(chars)}  # id 0 is padding
    return text, chars, np.array([lookup[c] for c in text], "int32")


def train(name, settings, ids, vocabulary, steps, args):
    """The model `name`, loaded from the cache or trained and saved there."""
    folder = pathlib.Path(args.cache)
    path = folder / f"{name}.keras"
    record = folder / f"{name}.json"
    recipe = {**settings, "steps": steps, "batch": args.batch_size, "data": args.data}
    if path.exists() and record.exists() and json.loads(record.read_text()) == recipe:
        print(f"{name}: loaded from {path}")
        return keras.saving.load_model(path)
    keras.utils.set_random_seed(0)
    model = kt.models.gpt2(
        vocabulary, max_sequence_length=CONTEXT, dropout=0.0, **settings
    )
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(ids) - CONTEXT - 1, steps * args.batch_size)
    windows = np.stack([ids[s : s + CONTEXT + 1] for s in starts])
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, max(steps - 50, 1), alpha=0.1, warmup_target=1e-3, warmup_steps=50
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, beta_2=0.99, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    start = time.perf_counter()
    history = model.fit(
        windows[:, :-1], windows[:, 1:], batch_size=args.batch_size, verbose=0
    )
    losses = history.history["loss"]
    print(
        f"{name}: trained {steps} steps in {time.perf_counter() - start:.0f} s, "
        f"loss {losses[-1]:.3f}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    model.save(path)
    record.write_text(json.dumps(recipe))
    return model


def held_out_loss(model, ids, count=16):
    rng = np.random.default_rng(1)
    starts = rng.integers(0, len(ids) - CONTEXT - 1, count)
    windows = np.stack([ids[s : s + CONTEXT + 1] for s in starts])
    logits = model.predict(windows[:, :-1], verbose=0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return float(loss(windows[:, 1:], logits))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def acceptance(target, prompt, new, **settings):
    """The decode loop's own counts: steps and proposals kept."""
    k = settings["num_tokens"]
    tokens = np.zeros((1, prompt.shape[1] + new + k), "int32")
    tokens[:, : prompt.shape[1]] = prompt
    decode = compiled_speculative_fn(target, kt.generation.GreedySampler(), **settings)
    start, stop = prompt.shape[1], prompt.shape[1] + new
    _, counts = decode(tokens, np.zeros((1, 1), "int32"), start, stop, -1, [0, 0])
    steps, kept = counts.numpy().tolist()
    return steps, kept, kept / max(steps * k, 1)


def pass_costs(model, sizes, steps=50):
    """Milliseconds of one cached forward pass over `T` positions, for each
    `T` of `sizes`: the model's own price of scoring K + 1 tokens at once."""
    tokens = tf.constant(np.ones((1, CONTEXT)), tf.int32)
    caches = model.start_decoding(tokens, None, True)
    costs = {}
    for size in sizes:

        @tf.function(jit_compile=True)
        def passes(caches, size=size):
            def body(i, total, caches):
                chunk = tf.slice(tokens, [0, 8 + i], [1, size])
                logits, caches = model.chunk_logits(chunk, caches, 8 + i)
                return i + 1, total + tf.reduce_sum(logits), caches

            return tf.while_loop(lambda i, *_: i < steps, body, (0, 0.0, caches))[1]

        passes(caches).numpy()  # compiles
        times = [timed(lambda: passes(caches).numpy())[0] for _ in range(5)]
        costs[size] = 1000 * statistics.median(times) / steps
    return costs


def keras_hub_contenders(target, draft, prompt, new, k, cache):
    """KerasHub's plain greedy generate and its SpeculativeSampler, on our
    trained weights; None when the installed KerasHub lacks the sampler."""
    try:
        import keras_hub
    except ImportError:
        print("keras-hub is not installed: its contenders are skipped")
        return None
    if not hasattr(keras_hub.samplers, "SpeculativeSampler"):
        print(f"keras-hub {keras_hub.__version__} has no SpeculativeSampler")
        return None
    models = []
    for name, model in [("target", target), ("draft", draft)]:
        folder = pathlib.Path(cache) / f"hf_{name}"
        kt.models.save_pretrained(model, folder)
        backbone = keras_hub.models.GPT2Backbone.from_preset(str(folder))
        models.append(keras_hub.models.GPT2CausalLM(backbone, preprocessor=None))
    hub_target, hub_draft = models
    hub_target.compile(sampler="greedy")
    total = prompt.shape[1] + new
    ids = np.pad(prompt - 1, ((0, 0), (0, new))).astype("int32")  # ids minus one
    mask = np.arange(total)[None] < prompt.shape[1]
    sampler = keras_hub.samplers.SpeculativeSampler(num_speculative_tokens=k)

    def forward(model, cache, chunk, index):
        logits, _, cache = model.call_with_cache(chunk, cache, index)
        return logits, cache

    @tf.function(jit_compile=True)
    def speculative(token_ids, padding_mask):
        _, target_cache = hub_target._build_cache(token_ids)
        _, draft_cache = hub_draft._build_cache(token_ids)
        index = prompt.shape[1]

        def next_fn(prompt_ids, cache, index):
            chunk = tf.slice(prompt_ids, [0, index - 1], [-1, 1])
            logits, cache = forward(hub_target, cache, chunk, index - 1)
            return logits[:, 0], None, cache

        def draft_next(prompt_ids, cache, index):
            chunk = tf.slice(prompt_ids, [0, index - 1], [-1, 1])
            logits, cache = forward(hub_draft, cache, chunk, index - 1)
            return logits[:, 0], None, cache

        def verify_next(prompt_ids, cache, index, k):
            chunk = tf.slice(prompt_ids, [0, index - 1], [-1, k + 1])
            return forward(hub_target, cache, chunk, index - 1)

        return sampler(
            next=next_fn,
            prompt=token_ids,
            cache=target_cache,
            index=index,
            mask=padding_mask,
            draft_next=draft_next,
            draft_cache=draft_cache,
            verify_next=verify_next,
        )

    padded = np.pad(ids, ((0, 0), (0, k + 1)))  # room for the last K + 1 chunk
    padded_mask = np.pad(mask, ((0, 0), (0, k + 1)))

    def plain():
        out = hub_target.generate(
            {"token_ids": ids, "padding_mask": mask},
            max_length=total,
            stop_token_ids=None,
        )
        return np.asarray(out["token_ids"]) + 1

    def fast():
        return speculative(padded, padded_mask).numpy()[:, :total] + 1

    return {"keras-hub plain": plain, "keras-hub speculative": fast}


def main():
    args = parse_args()
    text, chars, ids = read_text(args.data)
    split = int(0.9 * len(ids))
    vocabulary = len(chars) + 1
    target = train("target", TARGET, ids[:split], vocabulary, args.target_steps, args)
    draft = train("draft", DRAFT, ids[:split], vocabulary, args.draft_steps, args)
    print(
        f"held-out loss: target {held_out_loss(target, ids[split:]):.3f}, "
        f"draft {held_out_loss(draft, ids[split:]):.3f}"
    )
    held_out = ids[split:]
    # A held-out line start, for the draft; a quoted passage, for lookup.
    begin = text.index("\n\n", split) + 2 - split
    prompt = held_out[None, begin : begin + 32]
    passage = held_out[begin + 200 : begin + 320]
    newline = np.full([2], chars.index("\n") + 1, "int32")
    quoting = np.concatenate([passage, newline, passage[:16]])[None]
    new = args.new
    if quoting.shape[1] + new + args.lookup_k > CONTEXT:
        raise ValueError(f"the quoted prompt is too long for {new} new tokens")

    def generate(prompt, **settings):
        return lambda: kt.generation.generate(target, prompt, new, **settings)

    contenders = {
        "plain": generate(prompt),
        "speculative": generate(
            prompt, draft_model=draft, num_speculative_tokens=args.k
        ),
        "plain (quoting prompt)": generate(quoting),
        "prompt lookup": generate(quoting, prompt_lookup_num_tokens=args.lookup_k),
    }
    hub = keras_hub_contenders(target, draft, prompt, new, args.k, args.cache)
    contenders.update(hub or {})
    first, outputs = {}, {}
    for name, fn in contenders.items():
        first[name], outputs[name] = timed(fn)
    times = {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name, fn in contenders.items():
            times[name].append(timed(fn)[0])
    rate = {name: new / statistics.median(t) for name, t in times.items()}
    baseline = {
        "plain": "plain",
        "speculative": "plain",
        "plain (quoting prompt)": "plain (quoting prompt)",
        "prompt lookup": "plain (quoting prompt)",
        "keras-hub plain": "keras-hub plain",
        "keras-hub speculative": "keras-hub plain",
    }
    same = {
        "speculative": np.array_equal(outputs["speculative"], outputs["plain"]),
        "prompt lookup": np.array_equal(
            outputs["prompt lookup"], outputs["plain (quoting prompt)"]
        ),
    }
    if hub:
        same["keras-hub speculative"] = np.array_equal(
            outputs["keras-hub speculative"], outputs["keras-hub plain"]
        )
        same["keras-hub plain"] = np.array_equal(
            outputs["keras-hub plain"], outputs["plain"]
        )
    accepted = {
        "speculative": acceptance(
            target, prompt, new, num_tokens=args.k, draft_model=draft
        ),
        "prompt lookup": acceptance(target, quoting, new, num_tokens=args.lookup_k),
    }
    print(
        f"\nbatch 1, greedy, {new} new tokens; K = {args.k} (draft), "
        f"{args.lookup_k} (lookup); median of {args.repeats} runs after a "
        "compiling one\n"
    )
    print(
        "| contender | compile + first run s | new tokens/s | speedup | "
        "acceptance | identical to plain |"
    )
    print("|---|---|---|---|---|---|")
    for name in contenders:
        ratio = rate[name] / rate[baseline[name]]
        kept = accepted.get(name)
        kept = f"{kept[2]:.0%} ({kept[1]} of {kept[0]} steps × K)" if kept else ""
        print(
            f"| {name} | {first[name]:.1f} | {rate[name]:,.0f} | {ratio:.2f}× | "
            f"{kept} | {same.get(name, '')} |"
        )
    sizes = sorted({1, 2, args.k + 1, args.lookup_k + 1})
    for name, model in [("target", target), ("draft", draft)]:
        costs = pass_costs(model, sizes)
        print(
            f"\n{name}: one cached pass over T positions, ms: "
            + ", ".join(f"T={t}: {ms:.2f}" for t, ms in costs.items())
        )
    decode = np.vectorize(lambda i: chars[i - 1] if i else "")
    for name in ("speculative", "prompt lookup"):
        text_out = "".join(decode(outputs[name][0]))
        print(f"\n{name}:\n{text_out}")


if __name__ == "__main__":
    main()
