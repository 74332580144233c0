"""`train --distribute`: two workers of one command on 127.0.0.1, and the
refusals that come before any work."""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import keras_transformer_cli as front
from tests.cli.test_train import write_lines

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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def finish_all(processes, timeout=600):
    """`(stdout, stderr)` of each process; all are killed if one fails or
    runs out of time (the others would wait for it forever)."""
    try:
        results = []
        for process in processes:
            stdout, stderr = process.communicate(timeout=timeout)
            assert process.returncode == 0, stderr[-3000:]
            results.append((stdout, stderr))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


def start_workers(argv, tmp_path):
    """Two workers of `argv` on fresh 127.0.0.1 ports, in `tmp_path`."""
    workers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    processes = []
    for index in range(2):
        scratch = tmp_path / f"scratch{index}"
        scratch.mkdir(exist_ok=True)
        env = {"TF_CONFIG": tf_config(workers, index), "TMPDIR": str(scratch)}
        processes.append(start(argv, env, cwd=tmp_path))
    return processes


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
    workers = start_workers(
        [*flags, "--output", "out", "--distribute", "multi-worker"], tmp_path
    )
    single = start([*flags, "--output", "single", "--distribute", "mirrored"], {},
                   cwd=tmp_path)  # fmt: skip
    (chief, _), (other, _), _ = finish_all([*workers, single])
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
    """Worker 1 is SIGKILLed after the first backup; worker 0 stops on its
    own and keeps the backup; both restart with --resume and end with the
    weights of an uninterrupted two-worker run."""
    import keras

    import keras_transformer  # noqa: F401  (registers the model classes)

    data = write_lines(tmp_path / "lines.txt")
    flags = ["train", "gpt2", "--data", str(data), "--steps", "400",
             "--eval-every", "20", "--batch-size", "4", "--layers", "1",
             "--hidden", "16", "--heads", "2", "--context", "16", "--dropout",
             "0.1", "--samples", "0", "--distribute", "multi-worker"]  # fmt: skip
    finish_all(start_workers([*flags, "--output", "whole"], tmp_path))
    killed = start_workers([*flags, "--output", "killed"], tmp_path)
    metadata = tmp_path / ".killed.partial" / "run" / "backup"
    try:
        deadline = time.time() + 600
        while not (metadata / "training_metadata.json").exists():
            assert all(p.poll() is None for p in killed) and time.time() < deadline
            time.sleep(0.02)
        killed[1].send_signal(signal.SIGKILL)
        assert killed[1].wait() == -signal.SIGKILL
        # Worker 0 notices (its peer stops sending heartbeats), stops, and
        # keeps its backup for the restart.
        _, stderr = killed[0].communicate(timeout=300)
        assert killed[0].returncode == 1, stderr[-3000:]
        assert "start every worker again with --resume" in stderr.splitlines()[-1]
    finally:
        for process in killed:
            if process.poll() is None:
                process.kill()
            process.communicate()
    assert not (tmp_path / "killed").exists()
    assert (metadata / "training_metadata.json").exists()
    finish_all(start_workers([*flags, "--output", "killed", "--resume"], tmp_path))
    expected = keras.saving.load_model(tmp_path / "whole" / "model.keras")
    actual = keras.saving.load_model(tmp_path / "killed" / "model.keras")
    for a, b in zip(actual.get_weights(), expected.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    with open(tmp_path / "killed" / "history.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f)]
    assert steps == list(range(20, 401, 20))  # none twice
    assert not (tmp_path / ".killed.partial").exists()
    # The killed worker's folder was removed by its restart, which removed
    # its own at the end (TensorFlow's autograph files of a SIGKILLed
    # process stay).
    assert not list((tmp_path / "scratch1").glob("keras_transformer*"))
