"""The README's two commands.

The second is what `.ci/run` runs, in a fresh virtual environment; the
first, `pip install . && keras-transformer train gpt2`, is checked here in
three cheaper parts: the command is written as documented, the recipe's
defaults are the documented ones, and a short run of the same command (20
steps, in the environment CI installed) does the whole job. The 1,000-step
run from a fresh install, with its goal (held-out loss <= 2.0), is
`benchmarks/readme_first_command.py`.
"""

import json
import math
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The console script `pip install` wrote beside this interpreter.
CONSOLE_SCRIPT = pathlib.Path(sys.executable).parent / "keras-transformer"


def readme_commands():
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return block.group(1).strip().splitlines()


def prose(path):
    """A Markdown file's text with every run of whitespace one space."""
    return " ".join((ROOT / path).read_text().split())


def test_the_first_command_installs_then_trains_gpt2():
    assert readme_commands()[0] == "pip install . && keras-transformer train gpt2"


def test_ci_runs_the_second_command_in_a_fresh_virtual_environment():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python3 -m venv --clear .venv" in ci
    assert "source .venv/bin/activate" in ci
    assert ci[-1] == readme_commands()[1]


def default_settings():
    """The settings `keras-transformer train gpt2` resolves, no flags given."""
    from keras_transformer.cli import registry, settings
    from keras_transformer.cli.main import build_parser

    args = build_parser().parse_args(["train", "gpt2"])
    return settings.resolve(registry.TASKS["gpt2"], args, None)


def test_the_recipe_defaults_are_the_documented_ones():
    from keras_transformer.cli.recipe_gpt2 import GPT2Recipe

    readme = prose("README.md")
    assert "nanoGPT's CPU recipe (4 blocks, 128 hidden, context 64)" in readme
    cli = prose("docs/cli.md")
    documented = re.search(
        r"(\d+) blocks, (\d+) heads, (\d+) hidden, context (\d+), batch (\d+), "
        r"no dropout, AdamW \(β₂ ([\d.]+), weight decay ([\d.]+),.*? trains "
        r"([\d,]+) steps at a peak learning rate of ([\de.-]+)",
        cli,
    )
    assert documented, "docs/cli.md no longer describes the default run"
    layers, heads, hidden, context, batch, beta_2, decay, steps, rate = (
        documented.groups()
    )
    expected = dict(
        layers=int(layers), heads=int(heads), hidden=int(hidden),
        context=int(context), batch_size=int(batch), dropout=0.0,
        steps=int(steps.replace(",", "")), learning_rate=float(rate),
        tokenizer="char", vocabulary_size=None,
    )  # fmt: skip
    assert GPT2Recipe.defaults == expected
    assert (GPT2Recipe.beta_2, GPT2Recipe.weight_decay) == (float(beta_2), float(decay))
    assert "`--tokenizer char`" in cli and "last tenth held out" in cli
    # What the command line makes of them (the feed-forward is 4 × hidden).
    resolved = default_settings()
    assert {key: resolved[key] for key in expected} == expected
    assert resolved["intermediate"] == 4 * expected["hidden"]
    assert (resolved["epochs"], resolved["from"], resolved["seed"]) == (None, None, 0)


def run(*args, cwd, timeout=900):
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_a_short_run_of_the_first_command_does_the_whole_job(tmp_path):
    """`keras-transformer train gpt2` as the README runs it, 20 steps instead
    of 1,000 (one held-out evaluation, one sample): the built-in data, the
    default model, every output, then `generate` from the export."""
    result = run(
        "train", "gpt2", "--steps", "20", "--eval-every", "20", "--samples", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "on Tiny Shakespeare (built in)" in result.stdout
    values = dict(
        re.findall(r"^([\w -]+(?: \([\w ]+\))?): ([\d.]+)$", result.stdout, re.M)
    )
    loss = float(values["held-out loss (nats per character)"])
    assert float(values["held-out perplexity"]) == pytest.approx(math.exp(loss), 1e-3)
    # 20 steps already beat the untrained model and the uniform guess.
    assert loss < float(values["uniform guess loss"]) - 0.5
    assert loss < float(values["loss before training"]) - 0.5
    assert int(values["steps"]) == 20
    # TensorFlow's C++ log lines stay hidden.
    assert not re.search(r"cudart_stub|absl::|^[IWE]\d{4} ", result.stderr, re.M)

    model = tmp_path / "model"
    for name in ["model.keras", "tokenizer.json", "saved_model/saved_model.pb",
                 "config.json", "history.csv", "loss.png"]:  # fmt: skip
        assert (model / name).is_file(), name
    with open(model / "config.json") as f:
        config = json.load(f)
    # The default model and recipe, only shorter.
    expected = default_settings()
    expected.update(steps=20, eval_every=20)
    written = {key: config["settings"][key] for key in expected}
    assert written == json.loads(json.dumps(expected, default=str))
    assert config["results"]["held-out loss (nats per character)"] == pytest.approx(
        loss, abs=1e-4
    )

    generated = run("generate", "--model", "model", "the cat ", cwd=tmp_path)
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert generated.stdout.startswith("the cat ")
    assert len(generated.stdout.rstrip("\n")) > len("the cat ")
