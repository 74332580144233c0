"""The `keras-transformer` command end to end, on tiny settings."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers import reference_import


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


@pytest.fixture(scope="module")
def gpt_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_gpt")
    data = folder / "lines.txt"
    data.write_text("\n".join(["the cat sat on the mat."] * 200))
    out = folder / "gpt"
    result = run(
        "train", "gpt2", "--data", str(data), "--output", str(out), "--steps", "30",
        "--context", "16", "--learning-rate", "1e-2", *TINY,
    )  # fmt: skip
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
    import numpy as np

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
def test_train_seq2seq_scores_are_sacrebleus_on_its_translations(tmp_path):
    """BLEU, chrF and exact matches printed by `train` (on `--validation-data`)
    and `evaluate` are sacrebleu's on the translations `evaluate` wrote, which
    are `translate`'s."""
    sacrebleu = reference_import("sacrebleu")  # the cli extra: in the test extra
    words = {"one": "un", "two": "deux", "three": "trois", "four": "quatre"}
    data = tmp_path / "pairs.tsv"
    data.write_text("\n".join([f"{s}\t{t}" for s, t in words.items()] * 60))
    held = [("one two", "un deux"), ("three", "trois"), ("four one", "quatre un")]
    validation = tmp_path / "held.tsv"
    validation.write_text("\n".join(f"{s}\t{t}" for s, t in held))
    out = tmp_path / "seq2seq"
    result = run(
        "train", "seq2seq", "--data", str(data), "--validation-data",
        str(validation), "--output", str(out), "--steps", "20", *TINY,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    predictions = tmp_path / "predictions.txt"
    scored = run(
        "evaluate", "--model", str(out), "--data", str(validation),
        "--predictions", str(predictions),
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-2000:]
    hypotheses = predictions.read_text().splitlines()
    references = [t for _, t in held]
    assert len(hypotheses) == len(held)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    chrf = sacrebleu.corpus_chrf(hypotheses, [references]).score
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / 3
    for output, prefix in [(result, "held-out "), (scored, "")]:
        assert printed(output, prefix + "BLEU") == pytest.approx(bleu, abs=1e-4)
        assert printed(output, prefix + "chrF") == pytest.approx(chrf, abs=1e-4)
        assert printed(output, prefix + "exact-match accuracy") == pytest.approx(
            exact, abs=1e-4
        )
    answer = run("translate", "--model", str(out), *[s for s, _ in held])
    assert answer.returncode == 0, answer.stderr[-2000:]
    assert answer.stdout.splitlines() == hypotheses


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
