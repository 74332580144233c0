"""`train --distribute`: two workers of one command on 127.0.0.1, and the
refusals that come before any work."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_transformer_cli as front
from keras_transformer import training as kt_training
from keras_transformer.training import resume
from tests.cli.test_train import write_lines
from tests.scale.common import run_cluster

TIMEOUT = 600  # seconds a worker may take

TINY = [
    "--steps",
    "4",
    "--eval-every",
    "2",
    "--batch-size",
    "4",
    "--layers",
    "1",
    "--hidden",
    "16",
    "--heads",
    "2",
    "--context",
    "16",
    "--samples",
    "1",
    "--dropout",
    "0",
]


def tf_config(workers, index):
    return json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    )


def start(argv, env, cwd):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "keras_transformer_cli", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_workers(argv, tmp_path, returncodes=None, env=None):
    """`(stdout, stderr)` of two workers of `argv` on 127.0.0.1, in
    `tmp_path` (`env[index]`: more environment for worker `index`)."""

    def start_worker(config, index):
        scratch = tmp_path / f"scratch{index}"
        scratch.mkdir(exist_ok=True)
        more = {"TF_CONFIG": config, "TMPDIR": str(scratch)}
        return start(argv, {**more, **(env or {}).get(index, {})}, cwd=tmp_path)

    return run_cluster(start_worker, 2, TIMEOUT, returncodes)


def history(folder):
    with open(folder / "history.csv", newline="") as f:
        return [(float(r["loss"]), float(r["val_loss"])) for r in csv.DictReader(f)]


@pytest.mark.slow
def test_train_on_two_workers_writes_once_and_learns_like_one(tmp_path):
    """Two workers run the same `train gpt2 --distribute multi-worker`: only
    worker 0 prints and writes --output (the other's temporary folder is
    gone), and the losses equal one process's at the same global batch."""
    data = write_lines(tmp_path / "lines.txt")
    flags = ["train", "gpt2", "--data", str(data), *TINY]
    (chief, _), (other, _) = run_workers(
        [*flags, "--output", "out", "--distribute", "multi-worker"], tmp_path
    )
    # One process at the same global batch: this one.
    single = str(tmp_path / "single")
    assert front.main([*flags, "--output", single, "--distribute", "mirrored"]) == 0
    assert "held-out loss (nats per character)" in chief
    assert other == ""  # worker 1 prints nothing
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert folders == ["out", "scratch0", "scratch1", "single"]
    assert not list((tmp_path / "scratch1").glob("keras_transformer*"))
    assert {"model.keras", "tokenizer.json", "saved_model"} <= set(
        os.listdir(tmp_path / "out")
    )
    # The CLI clips the gradient norm: kt.training.AdamW clips the global
    # batch's (Keras' own optimizers clip each replica's share: 3.5e-5
    # relative apart after 4 steps).
    np.testing.assert_allclose(
        history(tmp_path / "out"), history(tmp_path / "single"), rtol=1e-6
    )


def test_distribute_refusals_come_before_any_work(tmp_path, capsys, monkeypatch):
    data = write_lines(tmp_path / "lines.txt")
    out = tmp_path / "out"
    argv = [
        "train",
        "gpt2",
        "--data",
        str(data),
        "--output",
        str(out),
        "--distribute",
        "multi-worker",
    ]
    monkeypatch.delenv("TF_CONFIG", raising=False)
    cases = [
        (
            None,
            [],
            "--distribute multi-worker: Multi-worker training needs the "
            "`TF_CONFIG` environment variable",
        ),
        ("{not json", [], "Received: TF_CONFIG='{not json'"),
        (
            tf_config(["127.0.0.1:1", "127.0.0.1:2"], 0),
            ["--batch-size", "5"],
            "--batch-size 5: `global_batch_size` must be divisible by the number "
            "of replicas. Received: global_batch_size=5, num_replicas_in_sync=2",
        ),
    ]
    for config, more, expected in cases:
        if config is not None:
            monkeypatch.setenv("TF_CONFIG", config)
        code = front.main([*argv, *more])
        err = capsys.readouterr().err
        assert code == 2 and expected in err and err.count("\n") == 1, err
        assert not out.exists() and not (tmp_path / ".out.partial").exists()

    # A killed run's backup: worker 1 refuses a new run (or a --resume of
    # another configuration) as worker 0 does, before joining the cluster.
    stale = tmp_path / ".out.partial"
    stale.mkdir()
    (stale / "run.json").write_text(json.dumps({"task": "gpt2"}))
    monkeypatch.setenv("TF_CONFIG", tf_config(["127.0.0.1:1", "127.0.0.1:2"], 1))
    for more, expected in [
        ([], "a killed run's backup is in"),
        (["--resume"], "--resume: the backup in"),
    ]:
        code = front.main([*argv, *more])
        err = capsys.readouterr().err
        assert code == 2 and expected in err and err.count("\n") == 1, err
    assert sorted(p.name for p in stale.iterdir()) == ["run.json"]


@pytest.mark.slow
def test_two_workers_killed_and_resumed_end_like_an_uninterrupted_run(tmp_path):
    """Worker 1 exits right after step 25 of 40 (`KT_TEST_KILL_AT_STEP`, in
    its environment only), after the backup of step 20; worker 0 stops on
    its own and keeps the backup; both restart with --resume and end with
    the weights of an uninterrupted two-worker run."""
    import keras

    import keras_transformer  # noqa: F401  (registers the model classes)

    data = write_lines(tmp_path / "lines.txt")
    flags = ["train", "gpt2", "--data", str(data), "--steps", "40",
             "--eval-every", "10", "--batch-size", "4", "--layers", "1",
             "--hidden", "16", "--heads", "2", "--context", "16", "--dropout",
             "0.1", "--samples", "0", "--distribute", "multi-worker"]  # fmt: skip
    run_workers([*flags, "--output", "whole"], tmp_path)
    (_, stderr), _ = run_workers(
        [*flags, "--output", "killed"],
        tmp_path,
        returncodes=[1, resume.TEST_KILL_EXIT_CODE],
        env={1: {resume.KILL_AT_STEP: "25"}},
    )
    # Worker 0 noticed (its peer stopped sending heartbeats), stopped, and
    # kept its backup for the restart.
    assert "start every worker again with --resume" in stderr.splitlines()[-1]
    assert not (tmp_path / "killed").exists()
    run = tmp_path / ".killed.partial" / "run"
    assert kt_training.resume_epoch(run) == 2
    run_workers([*flags, "--output", "killed", "--resume"], tmp_path)
    expected = keras.saving.load_model(tmp_path / "whole" / "model.keras")
    actual = keras.saving.load_model(tmp_path / "killed" / "model.keras")
    for a, b in zip(actual.get_weights(), expected.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    with open(tmp_path / "killed" / "history.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f)]
    assert steps == [10, 20, 30, 40]  # none twice
    assert not (tmp_path / ".killed.partial").exists()
    # The killed worker's folder was removed by its restart, which removed
    # its own at the end (TensorFlow's autograph files of a killed process
    # stay).
    assert not list((tmp_path / "scratch1").glob("keras_transformer*"))
