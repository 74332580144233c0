"""One `keras-transformer train gpt2` run (a tiny model, 400 steps with
held-out checks every 20) shared by the tests of what it wrote: it learned
and `generate` continues with it, `generate`'s bounds, `--resume` after a
kill gives its weights bit for bit, and a LoRA run `--from` it serves the
library's numbers through `generate` and `export`."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.cli.test_cli import load_trained, printed
from tests.cli.test_train import run, scheduled_learning_rate, weights, write_lines
from tests.helpers import run_export_test

FLAGS = (
    "--steps", "400", "--eval-every", "20", "--layers", "1", "--hidden", "16",
    "--heads", "2", "--context", "16", "--dropout", "0.1", "--samples", "0",
)  # fmt: skip


# The LoRA run's own settings.
TUNING = ("--steps", "3", "--batch-size", "4", "--context", "16", "--seed", "1")


@pytest.fixture(scope="module")
def gpt_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_gpt")
    data = write_lines(folder / "lines.txt")
    out = folder / "gpt"
    result = run("train", "gpt2", "--data", str(data), "--output", str(out), *FLAGS)
    assert result.returncode == 0, result.stderr[-2000:]
    return out, result


@pytest.mark.slow
def test_train_gpt2_learns_and_generate_continues_with_the_model(gpt_folder):
    out, result = gpt_folder
    assert {"model.keras", "tokenizer.json", "saved_model", "config.json"} <= set(
        os.listdir(out)
    )
    with open(out / "config.json") as f:
        settings = json.load(f)["settings"]
    assert (settings["layers"], settings["hidden"], settings["context"]) == (1, 16, 16)
    loss = printed(result, "held-out loss (nats per character)")
    assert loss < printed(result, "loss before training") - 0.5  # it trained
    assert printed(result, "held-out perplexity") == pytest.approx(
        math.exp(loss), rel=1e-3
    )
    answer = run(
        "generate", "--model", str(out), "--temperature", "0", "--max-new-tokens",
        "6", "the cat",
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr[-2000:]
    text = answer.stdout.rstrip("\n")
    # Greedy: exactly the model's own greedy continuation, cut at [END].
    import keras_transformer as kt

    model, tokenizer = load_trained(out)
    ids = tokenizer(["the cat"]).to_tensor().numpy()
    end = tokenizer.token_to_id("[END]")
    tokens = kt.generation.generate(model, ids, 6, end_token_id=end)
    assert (tokens[0, len("the cat") :] != 0).any()  # something was generated
    tokens = np.where(tokens == end, 0, tokens)
    expected = tokenizer.detokenize(tokens).numpy()[0].decode()
    assert text == expected
    assert text.startswith("the cat") and len(text) <= len("the cat") + 6


@pytest.mark.slow
def test_generate_bounds_and_a_model_asked_for_the_wrong_task(gpt_folder):
    out, _ = gpt_folder
    bounded = run("generate", "--model", str(out), "--max-new-tokens", "2", "the")
    assert bounded.returncode == 0, bounded.stderr[-2000:]
    text = bounded.stdout.rstrip("\n")
    # The prompt and at most two new characters.
    assert text.startswith("the") and len(text) <= len("the") + 2
    wrong = run("classify", "--model", str(out), "a text")
    assert wrong.returncode == 2
    assert "cannot classify: it serves" in wrong.stderr and "generate" in wrong.stderr


@pytest.mark.slow
def test_resume_after_a_kill_gives_the_weights_of_an_uninterrupted_run(
    gpt_folder, tmp_path
):
    whole, _ = gpt_folder
    data = whole.parent / "lines.txt"
    flags = ["--data", str(data), *FLAGS]
    with open(whole / "config.json") as f:
        assert json.load(f)["results"]["samples"] == []  # --samples 0
    out = tmp_path / "killed"
    metadata = tmp_path / ".killed.partial" / "run" / "backup"
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer_cli", "train", "gpt2"]
        + ["--output", str(out), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 600
    while not (metadata / "training_metadata.json").exists():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not out.exists()  # --output is written only at the very end
    resumed = run("train", "gpt2", "--output", str(out), "--resume", *flags)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _, expected = weights(whole)
    _, actual = weights(out)
    for a, b in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(a, b)
    with open(out / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(20, 401, 20))  # none twice
    # The learning rate after each interval's last step is the schedule's
    # there: warm-up to 2e-3 at step 40, cosine decay to 2e-4 at step 400.
    for row in rows:
        expected = scheduled_learning_rate(int(row["step"]), 2e-3, 400)
        assert float(row["learning_rate"]) == pytest.approx(expected, rel=1e-6)
    assert float(rows[0]["learning_rate"]) == pytest.approx(1e-3, rel=1e-6)
    assert float(rows[-1]["learning_rate"]) == pytest.approx(2e-4, rel=1e-6)
    assert not os.path.exists(tmp_path / ".killed.partial")


@pytest.mark.slow
def test_lora_training_generate_and_export(gpt_folder, tmp_path):
    import keras_transformer as kt

    base, _ = gpt_folder
    data = base.parent / "lines.txt"
    tuned = tmp_path / "tuned"
    result = run(
        "train", "gpt2", "--from", str(base), "--lora", "2", "--data", str(data),
        "--output", str(tuned), "--learning-rate", "0.05", *TUNING,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "adapter.safetensors" in os.listdir(tuned)
    with open(tuned / "config.json") as f:
        assert json.load(f)["settings"]["lora"] == 2

    # model.keras holds the base weights with the adapter merged in.
    base_model, tokenizer = load_trained(base)
    merged, _ = load_trained(tuned)
    ids = tokenizer(["the cat sat"]).to_tensor().numpy()
    before = np.asarray(base_model(ids))
    base_model.load_lora(tuned / "adapter.safetensors")
    assert base_model.lora_rank == 2
    adapted = np.asarray(base_model(ids))
    assert np.abs(adapted - before).max() > 1e-4  # the adapter trained
    np.testing.assert_allclose(np.asarray(merged(ids)), adapted, atol=1e-4)

    # generate --lora on the base folder == the tuned folder's SavedModel.
    prompt = ["--temperature", "0", "--max-new-tokens", "5", "the cat"]
    served = run("generate", "--model", str(tuned), *prompt)
    assert served.returncode == 0, served.stderr[-3000:]
    adapter = str(tuned / "adapter.safetensors")
    with_lora = run("generate", "--model", str(base), "--lora", adapter, *prompt)
    assert with_lora.returncode == 0, with_lora.stderr[-3000:]
    assert with_lora.stdout == served.stdout

    # export --lora --quantize int8 serves generate --lora --quantize's text.
    quantized = run(
        "generate", "--model", str(base), "--lora", adapter, "--quantize", "int8",
        *prompt,
    )  # fmt: skip
    assert quantized.returncode == 0, quantized.stderr[-3000:]
    exported = run(
        "export", "--model", str(base), "--lora", adapter, "--quantize", "int8",
        "--output", str(tmp_path / "served"),
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-3000:]
    request = {
        "prompts": np.array(["the cat"], dtype=object),
        "max_new_tokens": np.int32(5),
        "temperature": np.float32(0.0),
    }
    _, (out,) = run_export_test(tmp_path / "served", [("generate", request)], tmp_path)
    assert out["text"][0].decode() + "\n" == quantized.stdout
    assert isinstance(merged, kt.models.GPT2)
