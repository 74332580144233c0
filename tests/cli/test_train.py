"""`keras-transformer train` flags, fine-tuning, resuming, evaluating, and
its refusals, at tiny settings (the default Tiny Shakespeare run is
tests/test_readme_commands.py's: the README's first command)."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_transformer_cli as front
from tests.helpers import reference_import

HF = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf")


def run(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "keras_transformer_cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        **kwargs,
    )


def printed(result, key):
    for line in result.stdout.splitlines():
        if line.startswith(f"{key}: "):
            return line.split(": ", 1)[1]
    raise AssertionError(f"{key!r} not printed: {result.stdout[-2000:]}")


def weights(folder):
    import keras

    import keras_transformer  # noqa: F401  (registers the model classes)

    model = keras.saving.load_model(os.path.join(folder, "model.keras"))
    return model, [np.asarray(w) for w in model.get_weights()]


def printed_list(result, key, items):
    """Whether `train` printed `items` as the list `key` (report.py's
    layout: one indented item a line, `---` between multi-line items)."""
    multiline = any("\n" in item for item in items)
    block = ("  ---\n" if multiline else "").join(
        "  " + item.replace("\n", "\n  ") + "\n" for item in items
    )
    return f"{key}:\n{block}" in result.stdout


def scheduled_learning_rate(step, peak, steps):
    """The CLI's schedule (run.Run.optimizer), written out: linear
    warm-up over min(100, steps // 10) steps, then cosine decay to peak / 10."""
    warmup, final = min(100, steps // 10), peak / 10
    if step < warmup:
        return peak * step / warmup
    progress = (step - warmup) / (steps - warmup)
    return final + (peak - final) * 0.5 * (1 + np.cos(np.pi * progress))


def write_lines(path, count=200):
    lines = ["the cat sat on the mat.", "a dog ran in the park!", "éàü 猫 кот"]
    path.write_text("\n".join(lines[i % 3] for i in range(count)) + "\n")
    return path


def test_help_answers_without_importing_tensorflow():
    code = (
        "import sys, time\n"
        "start = time.perf_counter()\n"
        "import keras_transformer_cli as cli\n"
        "for argv in (['--help'], ['train', '--help'], ['evaluate', '--help']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in\n"
        "         ('tensorflow', 'keras', 'keras_transformer', 'numpy')]\n"
        "print('HEAVY', heavy)\n"
        "print('SECONDS', time.perf_counter() - start)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout
    assert "--resume" in result.stdout and "--precision" in result.stdout
    assert float(result.stdout.split("SECONDS ")[1]) < 1.0


def test_command_line_errors_are_one_line_naming_the_flag(capsys):
    for argv, expected in [
        (["train", "gpt2", "--layers", "0"], "argument --layers: must be >= 1, got 0"),
        (["train", "gpt2", "--dropout", "1.5"], "argument --dropout: must be in"),
        (["train", "gpt2", "--batch-size", "x"], "--batch-size: expected an integer"),
        (["train", "gpt2", "--steps", "5", "--epochs", "1"], "not allowed with"),
        (["train", "gpt2", "--tokenizer", "words"], "argument --tokenizer: invalid"),
        (["train", "gpt2", "--precision", "fp8"], "argument --precision: invalid"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            front.main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2
        assert err.count("\n") == 1 and expected in err, err


def train_in_process(argv, capsys):
    code = front.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_flags_that_contradict_each_other_or_the_task_are_refused(tmp_path, capsys):
    data = write_lines(tmp_path / "lines.txt")
    out = str(tmp_path / "out")
    empty = tmp_path / "not_a_checkpoint"
    empty.mkdir()
    for argv, expected in [
        (["--tokenizer", "wordpiece"], "--tokenizer wordpiece does not fit gpt2"),
        (["--preset", "bert_tiny"], "--preset bert_tiny is a bert preset, not gpt2"),
        (["--hidden", "30", "--heads", "4"], "--hidden 30 must be divisible by"),
        (["--from", str(empty)], "not a checkpoint"),
        (["--from", str(tmp_path / "nowhere")], "not a folder"),
        (["--from", os.path.join(HF, "bert_tiny")], "model_type 'bert' cannot"),
        (["--from", os.path.join(HF, "gpt2_tiny"), "--layers", "2"], "--layers"),
        (["--resume"], "--resume: no backup to resume"),
        (["--steps", "10", "--eval-every", "3"], "--eval-every 3 must divide"),
        (["--validation-data", str(tmp_path / "no.txt")], "file not found"),
    ]:
        code, _, err = train_in_process(
            ["train", "gpt2", "--data", str(data), "--output", out, *argv], capsys
        )
        assert code == 2, argv
        assert err.count("\n") == 1 and expected in err, (argv, err)
    assert sorted(os.listdir(tmp_path)) == ["lines.txt", "not_a_checkpoint"]


def test_a_broken_json_file_is_named_with_its_line_and_column(tmp_path, capsys):
    data = write_lines(tmp_path / "lines.txt")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{\n  "model_type": gpt2\n}')
    where = "is not valid JSON: Expecting value at line 2, column 17"
    out = str(tmp_path / "out")
    argv = ["train", "gpt2", "--data", str(data), "--output", out]
    code, _, err = train_in_process([*argv, "--from", str(broken)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"--from {broken}: '{broken / 'config.json'}' {where}" in err
    code, _, err = train_in_process(
        ["evaluate", "--model", str(broken), "--data", str(data)], capsys
    )
    assert code == 2 and f"--model {broken}: '{broken / 'config.json'}'" in err
    assert where in err
    partial = tmp_path / ".out.partial"
    partial.mkdir()
    (partial / "run.json").write_text('{\n  "seed": 1,,\n}')
    code, _, err = train_in_process([*argv, "--resume"], capsys)
    assert code == 2 and f"'{partial / 'run.json'}' is not valid JSON" in err
    assert "at line 2, column 13" in err


def test_a_backup_of_another_configuration_is_not_resumed(tmp_path, capsys):
    data = write_lines(tmp_path / "lines.txt")
    partial = tmp_path / ".out.partial"
    partial.mkdir()
    (partial / "run.json").write_text(json.dumps({"batch_size": 99}))
    argv = ["train", "gpt2", "--data", str(data), "--output", str(tmp_path / "out")]
    code, _, err = train_in_process([*argv, "--resume"], capsys)
    assert code == 2 and "is of another configuration (batch_size: 99 there" in err
    code, _, err = train_in_process(argv, capsys)  # neither --resume nor --overwrite
    assert code == 2 and "add --resume to continue it, or --overwrite" in err
    assert os.listdir(partial) == ["run.json"]  # nothing touched


@pytest.mark.slow
def test_each_flag_changes_what_it_says(tmp_path):
    data = write_lines(tmp_path / "lines.txt")
    out = tmp_path / "out"
    result = run(
        "train", "gpt2", "--data", str(data), "--output", str(out),
        "--layers", "3", "--heads", "2", "--hidden", "16", "--intermediate", "24",
        "--context", "12", "--dropout", "0.25", "--tokenizer", "bpe",
        "--vocabulary-size", "300", "--batch-size", "3", "--learning-rate", "0.01",
        "--steps", "4", "--eval-every", "2", "--precision", "mixed_bfloat16",
        "--seed", "7", "--samples", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    import keras_transformer as kt

    model, _ = weights(out)
    assert isinstance(model, kt.models.GPT2)
    assert len(model.blocks) == 3 and model.hidden_dim == 16
    assert model.num_heads == 2 and model.intermediate_dim == 24
    assert model.max_sequence_length == 12 and model.dropout == 0.25
    # It trained in bfloat16 (the .keras file reloads in the global policy).
    assert "precision mixed_bfloat16 (compute dtype: bfloat16)" in result.stdout
    import keras

    with open(out / "tokenizer.json") as f:
        tokenizer = keras.saving.deserialize_keras_object(json.load(f))
    assert isinstance(tokenizer, kt.text.BytePairTokenizer)
    assert tokenizer.vocabulary_size() == 301  # 300 + [PAD]
    assert model.vocabulary_size == 301
    with open(out / "config.json") as f:
        config = json.load(f)
    settings = config["settings"]
    assert (settings["batch_size"], settings["learning_rate"], settings["seed"]) == (
        3,
        0.01,
        7,
    )
    assert config["results"]["steps"] == 4
    assert config["results"]["tokens seen"] == 4 * 3 * 12
    samples = config["results"]["samples"]
    assert len(samples) == 2 and all(samples), samples
    assert printed_list(result, "samples", samples), result.stdout[-2000:]
    with open(out / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [2, 4]
    assert all(float(r["val_loss"]) > 0 for r in rows)
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_epochs_set_the_steps_from_the_data(tmp_path):
    rows = [f"w{i % 7} text\t{'ab'[i % 2]}" for i in range(50)]
    data = tmp_path / "labels.tsv"
    data.write_text("\n".join(rows))
    out = tmp_path / "out"
    result = run(
        "train", "bert", "--data", str(data), "--output", str(out), "--epochs", "2",
        "--batch-size", "8", "--layers", "1", "--hidden", "16", "--heads", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # 40 training examples (a fifth held out), 2 epochs of batch 8: 10 steps.
    assert printed(result, "steps") == "10"
    model, _ = weights(out)
    assert len(model.backbone.blocks) == 1


@pytest.mark.slow
def test_from_a_checkpoint_starts_at_the_library_loss(tmp_path):
    import keras

    import keras_transformer as kt

    folder = os.path.join(HF, "gpt2_tiny")
    data = write_lines(tmp_path / "lines.txt", 60)
    out = tmp_path / "out"
    result = run(
        "train", "gpt2", "--from", folder, "--data", str(data),
        "--validation-data", str(data), "--output", str(out), "--steps", "2",
        "--batch-size", "4", "--context", "16", "--seed", "3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "config.json") as f:
        cli_loss = json.load(f)["results"]["loss before training"]
    # The same first batch through the library API (docs/cli.md: the corpus
    # tokenized line by line and concatenated; step s's windows start at
    # default_rng(seed).integers(0, len - context - 1, (steps, batch))[s]).
    model = kt.models.from_pretrained(folder)
    tokenizer = kt.text.tokenizer_from_pretrained(folder)
    lines = data.read_text().splitlines(keepends=True)
    stream = np.concatenate([np.asarray(r) for r in tokenizer(lines).numpy()])
    starts = np.random.default_rng(3).integers(0, len(stream) - 17, size=(2, 4))[0]
    windows = stream[starts[:, None] + np.arange(17)]
    logits = model(windows[:, :-1])
    loss = kt.training.MaskedSparseCategoricalCrossentropy()(windows[:, 1:], logits)
    np.testing.assert_allclose(
        cli_loss, float(keras.ops.convert_to_numpy(loss)), rtol=1e-5
    )
    # The fine-tuned model is the checkpoint's, a few small steps further:
    # its sizes, and token embeddings that still correlate with the
    # checkpoint's (a fresh model of the same sizes does not).
    tuned, _ = weights(out)
    for key in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim"):
        assert tuned.get_config()[key] == model.get_config()[key], key
    assert (tuned.num_layers, tuned.num_heads, tuned.hidden_dim) == (2, 2, 16)
    fresh = kt.models.GPT2.from_config(model.get_config())

    def token_embeddings(gpt):
        return np.asarray(gpt.embeddings.token_embedding.embeddings).ravel()

    checkpoint = token_embeddings(model)
    assert not np.array_equal(token_embeddings(tuned), checkpoint)  # it trained
    assert np.corrcoef(token_embeddings(tuned), checkpoint)[0, 1] > 0.99
    assert abs(np.corrcoef(token_embeddings(fresh), checkpoint)[0, 1]) < 0.1
    assert result.stdout.count("fine-tuning") == 1
    # evaluate on the held-out file gives the held-out loss train printed.
    scored = run("evaluate", "--model", str(out), "--data", str(data))
    assert scored.returncode == 0, scored.stderr[-3000:]
    held_out = float(printed(result, "held-out loss (nats per token)"))
    assert float(printed(scored, "loss (nats per token)")) == pytest.approx(
        held_out, abs=1e-4
    )
    assert float(printed(scored, "perplexity")) == pytest.approx(
        np.exp(held_out), rel=1e-3
    )


@pytest.mark.slow
def test_from_a_bert_checkpoint_gives_a_classifier(tmp_path):
    # Words of the fixture's 23-token vocabulary (others would be [UNK]).
    good, bad = ["quick", "brown", "hello"], ["lazy", "over", "world"]
    rows = [f"the {w} fox\tpos" for w in good] + [f"a {w} dog\tneg" for w in bad]
    data = tmp_path / "labels.tsv"
    data.write_text("\n".join(rows * 20))
    out = tmp_path / "out"
    result = run(
        "train", "bert", "--from", os.path.join(HF, "bert_tiny"), "--data",
        str(data), "--output", str(out), "--steps", "60", "--learning-rate", "1e-3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(printed(result, "held-out accuracy")) == 1.0
    assert float(printed(result, "held-out macro-F1")) == 1.0
    assert "true \\ predicted" in result.stdout
    # evaluate scores the export on a file: the same perfect result.
    scored = run("evaluate", "--model", str(out), "--data", str(data))
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert float(printed(scored, "accuracy")) == 1.0
    assert float(printed(scored, "macro-F1")) == 1.0


@pytest.mark.slow
def test_ragged_files_train_with_their_documented_rules(tmp_path):
    # Empty lines are skipped, invalid UTF-8 becomes U+FFFD, a line over
    # 100,000 characters is skipped and reported; scripts and duplicates are
    # just text.
    lines = [b"hello world\tpos", b"", b"bad \xff\xfe bytes\tneg", b"   "]
    lines += [
        "добрый день\tpos".encode(),
        "مرحبا\tneg".encode(),
        b"x" * 100_001 + b"\tpos",
    ]
    lines += ["你好 世界\tpos".encode(), b"hello world\tpos", b"meh\tneg"] * 5
    data = tmp_path / "ragged.tsv"
    data.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out"
    result = run(
        "train", "bert", "--data", str(data), "--output", str(out), "--steps", "2",
        "--layers", "1", "--hidden", "16", "--heads", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipped 1 line(s) over 100,000 characters" in result.stdout
    assert "16 + 3 held-out examples" in result.stdout


@pytest.mark.slow
def test_a_translator_scores_sacrebleus_bleu_and_chrf_on_its_translations(tmp_path):
    """One `train seq2seq` run: BLEU, chrF and exact matches printed by
    `train` (on `--validation-data`) and `evaluate` are sacrebleu's on the
    translations `evaluate` wrote, which are `translate`'s; one reference
    is wrong on purpose (exact-match 0.5)."""
    sacrebleu = reference_import("sacrebleu")  # the cli extra: in the test extra
    words = {"one": "un", "two": "deux", "three": "trois", "four": "quatre"}
    pairs = [f"the {s} black cats\tles {t} chats noirs ici" for s, t in words.items()]
    data = tmp_path / "pairs.tsv"
    data.write_text("\n".join(pairs * 40))
    held = [
        ("the two black cats", "les deux chats noirs ici"),
        ("the one black cats", "un chat noir"),
    ]
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{s}\t{t}\n" for s, t in held))
    out = tmp_path / "out"
    result = run(
        "train", "seq2seq", "--data", str(data), "--validation-data", str(test),
        "--output", str(out), "--steps", "150", "--tokenizer", "char",
        "--samples", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "config.json") as f:
        examples = json.load(f)["results"]["examples"]
    assert len(examples) == 2 and all(" -> les " in e for e in examples), examples
    assert printed_list(result, "examples", examples), result.stdout[-2000:]
    predictions = tmp_path / "predictions.txt"
    scored = run(
        "evaluate", "--model", str(out), "--data", str(test), "--predictions",
        str(predictions),
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-3000:]
    hypotheses = ["les deux chats noirs ici", "les un chats noirs ici"]
    assert predictions.read_text() == "\n".join(hypotheses) + "\n"
    references = [[t for _, t in held]]
    bleu = sacrebleu.corpus_bleu(hypotheses, references).score
    chrf = sacrebleu.corpus_chrf(hypotheses, references).score
    for output, prefix in [(result, "held-out "), (scored, "")]:
        assert float(printed(output, prefix + "BLEU")) == pytest.approx(bleu, abs=1e-4)
        assert float(printed(output, prefix + "chrF")) == pytest.approx(chrf, abs=1e-4)
        assert float(printed(output, prefix + "exact-match accuracy")) == 0.5
    answer = run("translate", "--model", str(out), *[s for s, _ in held])
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert answer.stdout.splitlines() == hypotheses
