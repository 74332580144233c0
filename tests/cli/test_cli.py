"""The `keras-transformer` command end to end, on tiny settings."""

import json
import os
import subprocess
import sys

import pytest


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "keras_transformer_cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def printed(result, key):
    """The value `train` printed on its `key: value` line."""
    for line in result.stdout.splitlines():
        if line.startswith(f"{key}: "):
            return float(line.split(": ")[1])
    raise AssertionError(f"{key!r} not printed: {result.stdout[-1000:]}")


def load_trained(folder):
    """The `.keras` model and tokenizer `train` wrote, in this process."""
    import keras

    with open(folder / "tokenizer.json") as f:
        tokenizer = keras.saving.deserialize_keras_object(json.load(f))
    return keras.saving.load_model(folder / "model.keras"), tokenizer


# The wiring, not the recipes' quality: one tiny block (the defaults'
# learning is `benchmarks/readme_first_command.py`'s and the docs' tables).
TINY = ("--layers", "1", "--heads", "2", "--hidden", "16", "--seed", "1")


@pytest.mark.slow
def test_train_bert_then_classify_the_held_out_file(tmp_path):
    """The printed held-out accuracy is that of `classify` on the
    `--validation-data` file, whatever the tiny model learned."""
    good, bad = ["good", "great", "fine"], ["bad", "awful", "poor"]
    rows = [f"{w} movie\tignored column\tpos" for w in good]
    rows += [f"{w} movie\tignored column\tneg" for w in bad]
    data = tmp_path / "labels.tsv"
    data.write_text("\n".join(rows * 30))
    held = [f"{w} film\tx\t{label}" for w, label in
            [("great", "pos"), ("awful", "neg"), ("fine", "pos"), ("bad", "neg"),
             ("good", "pos")]]  # fmt: skip
    validation = tmp_path / "held.tsv"
    validation.write_text("\n".join(held))
    out = tmp_path / "bert"
    result = run(
        "train", "bert", "--data", str(data), "--validation-data", str(validation),
        "--output", str(out), "--steps", "20", *TINY,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    # The label is the last column (the TSV rule of kt.text.load_labeled_text).
    with open(out / "config.json") as f:
        assert json.load(f)["settings"]["class_names"] == ["neg", "pos"]
    texts = [row.split("\t")[0] for row in held]
    answer = run("classify", "--model", str(out), *texts)
    assert answer.returncode == 0, answer.stderr[-2000:]
    lines = [line.split("\t") for line in answer.stdout.strip().splitlines()]
    assert [text for _, _, text in lines] == texts
    assert all(0.5 <= float(probability) <= 1 for _, probability, _ in lines)
    correct = [label == row.split("\t")[-1] for (label, _, _), row in
               zip(lines, held, strict=True)]  # fmt: skip
    assert printed(result, "held-out accuracy") == pytest.approx(
        sum(correct) / len(held)
    )


@pytest.mark.slow
def test_overwrite_replaces_the_folder_whole(tmp_path):
    data = tmp_path / "lines.txt"
    data.write_text("\n".join(["abc abc."] * 200))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    result = run(
        "train", "gpt2", "--data", str(data), "--output", str(busy), "--steps", "2",
        "--overwrite", "--context", "16", *TINY,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "keep.txt" not in os.listdir(busy)
    assert {"model.keras", "tokenizer.json", "saved_model"} <= set(os.listdir(busy))


def test_an_empty_file_and_an_unwritable_folder_are_refused(
    tmp_path, monkeypatch, capsys
):
    from keras_transformer.cli import main

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    code = main(
        ["train", "gpt2", "--data", str(empty), "--output", str(tmp_path / "o")]
    )
    assert code == 2 and "empty.txt: no text in the file" in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    # Root may write anywhere, so the check is exercised through os.access.
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if str(p) == str(locked) else real_access(p, m)
    )
    assert main(["train", "gpt2", "--output", str(locked / "out")]) == 2
    assert f"{locked} is not writable" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["empty.txt", "locked"]
    assert os.listdir(locked) == []


def test_errors_are_one_line_and_write_nothing(tmp_path):
    missing = run(
        "train",
        "gpt2",
        "--data",
        str(tmp_path / "nope.txt"),
        "--output",
        str(tmp_path / "o"),
    )
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        .splitlines()[-1]
        .startswith("keras-transformer: error: --data ")
    )
    bad = tmp_path / "bad.tsv"
    bad.write_text("no tab here\n")
    wrong = run("train", "bert", "--data", str(bad), "--output", str(tmp_path / "o"))
    assert (
        wrong.returncode == 2
        and "line 1: expected 2 tab-separated fields" in wrong.stderr
    )
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    occupied = run("train", "gpt2", "--output", str(busy))
    assert occupied.returncode == 2 and "not empty" in occupied.stderr
    nowhere = run("train", "gpt2", "--output", str(tmp_path / "missing" / "out"))
    assert nowhere.returncode == 2 and "does not exist" in nowhere.stderr
    (tmp_path / "file").write_text("x")  # --output naming a file
    a_file = run("train", "gpt2", "--output", str(tmp_path / "file"))
    assert a_file.returncode == 2
    assert a_file.stderr.strip().splitlines()[-1].endswith("is a file, not a folder")
    assert (tmp_path / "file").read_text() == "x"
    os.remove(tmp_path / "file")
    no_model = run("generate", "--model", str(tmp_path), "hello")
    assert no_model.returncode == 2 and "no exported model" in no_model.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.tsv", "busy"]


def test_help_documents_every_command():
    result = run("--help")
    assert result.returncode == 0, result.stderr[-2000:]
    for command in ["demo", "train", "generate", "export", "classify", "translate"]:
        assert command in result.stdout
    train = run("train", "--help")
    assert train.returncode == 0, train.stderr[-2000:]
    for flag in [
        "--data",
        "--output",
        "--steps",
        "--overwrite",
        "gpt2",
        "bert",
        "seq2seq",
    ]:
        assert flag in train.stdout


def test_every_argument_has_help_text():
    from keras_transformer.cli.main import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse internals
    for name, command in commands.items():
        for action in command._actions:
            if action.dest != "help":
                assert action.help, f"{name} {action.dest} has no --help text"
