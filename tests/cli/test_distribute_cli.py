"""`train --distribute`: two workers of one command on 127.0.0.1, and the
refusals that come before any work."""

import csv
import json
import os
import socket
import subprocess
import sys

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


def history(folder):
    with open(folder / "history.csv", newline="") as f:
        return [(float(r["loss"]), float(r["val_loss"])) for r in csv.DictReader(f)]


@pytest.mark.slow
def test_train_on_two_workers_writes_once_and_learns_like_one(tmp_path):
    """Two workers run the same `train gpt2 --distribute multi-worker`: only
    worker 0 prints and writes --output (the other's temporary folder is
    gone), and the losses equal one process's at the same global batch."""
    data = write_lines(tmp_path / "lines.txt")
    workers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    argv = [
        "train",
        "gpt2",
        "--data",
        str(data),
        "--output",
        "out",
        *TINY,
        "--distribute",
        "multi-worker",
    ]
    processes = []
    for index in range(2):
        scratch = tmp_path / f"scratch{index}"
        scratch.mkdir()
        env = {"TF_CONFIG": tf_config(workers, index), "TMPDIR": str(scratch)}
        processes.append(start(argv, env, cwd=tmp_path))
    single = start(
        [
            "train",
            "gpt2",
            "--data",
            str(data),
            "--output",
            "single",
            *TINY,
            "--distribute",
            "mirrored",
        ],
        {},
        cwd=tmp_path,
    )
    (chief, _), (other, _), (alone, _) = finish_all([*processes, single])
    assert "held-out loss (nats per character)" in chief
    assert other == ""  # worker 1 prints nothing
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "out",
        "scratch0",
        "scratch1",
        "single",
    ]
    assert not list((tmp_path / "scratch1").iterdir())
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
