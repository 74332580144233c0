"""`train gpt2 --from DIR --lora RANK`, and `generate` / `export` with
`--lora FILE` and `--quantize int8`: each gives the library's numbers."""

import json
import os

import numpy as np
import pytest

import keras_transformer_cli as front
from tests.cli.test_cli import load_trained
from tests.cli.test_train import run, write_lines
from tests.helpers import run_export_test

SMALL = ("--steps", "3", "--batch-size", "4", "--context", "16", "--seed", "1")


@pytest.mark.slow
def test_lora_training_generate_and_export(tmp_path):
    import keras_transformer as kt

    data = write_lines(tmp_path / "lines.txt", 60)
    base = tmp_path / "base"
    trained = run("train", "gpt2", "--data", str(data), "--output", str(base), *SMALL)
    assert trained.returncode == 0, trained.stderr[-3000:]
    tuned = tmp_path / "tuned"
    result = run(
        "train", "gpt2", "--from", str(base), "--lora", "2", "--data", str(data),
        "--output", str(tuned), "--learning-rate", "0.05", *SMALL,
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


def test_lora_flags_are_refused_where_they_do_not_apply(tmp_path, capsys):
    data = write_lines(tmp_path / "lines.txt")
    for argv, expected in [
        (["train", "gpt2", "--lora", "2"], "needs `train gpt2 --from PATH`"),
        (["train", "bert", "--lora", "2"], "received task bert"),
    ]:
        code = front.main([*argv, "--data", str(data), "--output", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and expected in err, err
        assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        front.main(["generate", "--model", "m", "--quantize", "int4", "x"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err
