"""The `keras-transformer` command end to end, on tiny settings."""

import os
import subprocess
import sys

import pytest


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "keras_transformer", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


@pytest.mark.slow
def test_train_gpt_then_generate(tmp_path):
    data = tmp_path / "lines.txt"
    data.write_text("\n".join(["the cat sat on the mat."] * 200))
    out = tmp_path / "gpt"
    result = run(
        "train", "gpt2", "--data", str(data), "--output", str(out), "--steps", "40"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert {"model.keras", "tokenizer.json", "saved_model", "config.json"} <= set(
        os.listdir(out)
    )
    assert "held-out loss" in result.stdout
    answer = run("generate", "--model", str(out), "--max-new-tokens", "5", "the cat")
    assert answer.returncode == 0, answer.stderr[-2000:]
    assert answer.stdout.startswith("the cat")


@pytest.mark.slow
def test_train_bert_then_classify(tmp_path):
    data = tmp_path / "labels.tsv"
    data.write_text("\n".join(["good movie\tpos", "bad movie\tneg"] * 50))
    out = tmp_path / "bert"
    result = run(
        "train", "bert", "--data", str(data), "--output", str(out), "--steps", "20"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answer = run("classify", "--model", str(out), "good movie")
    assert answer.returncode == 0, answer.stderr[-2000:]
    label, probability, text = answer.stdout.strip().split("\t")
    assert (
        label in {"pos", "neg"}
        and 0.5 <= float(probability) <= 1
        and text == "good movie"
    )


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
        .startswith("keras-transformer: error: data file not found")
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
    no_model = run("generate", "--model", str(tmp_path), "hello")
    assert no_model.returncode == 2 and "no exported model" in no_model.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.tsv", "busy"]


def test_help_documents_every_command():
    result = run("--help")
    for command in ["demo", "train", "generate", "classify", "translate"]:
        assert command in result.stdout
    train = run("train", "--help")
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
