"""`model.fit` under MultiWorkerMirroredStrategy: two worker processes on
127.0.0.1, each with its own TF_CONFIG (scripts/multi_worker.py), compared
with a 1-worker run and with each other, and a run whose worker 1 is
SIGKILLed mid-epoch and restarted."""

import json
import os
import socket

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.training import multi_worker
from tests.scale.common import finish, start_script

TIMEOUT = 240  # seconds a worker may take, TensorFlow's import included


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers(count, *args, scratch=None):
    """Starts `count` workers of scripts/multi_worker.py with `args`; each
    gets its TF_CONFIG (and `scratch/<index>` as its temporary folder)."""
    workers = [f"127.0.0.1:{free_port()}" for _ in range(count)]
    processes = []
    for index in range(count):
        env = {
            "TF_CONFIG": json.dumps(
                {
                    "cluster": {"worker": workers},
                    "task": {"type": "worker", "index": index},
                }
            )
        }
        if scratch is not None:
            folder = scratch / str(index)
            folder.mkdir(parents=True, exist_ok=True)
            env["TMPDIR"] = str(folder)
        worker_args = [a(index) if callable(a) else a for a in args]
        processes.append(start_script("multi_worker.py", *worker_args, env=env))
    return processes


def finish_all(processes, timeout=TIMEOUT, returncodes=None):
    """Each worker's JSON result; every worker is killed if one fails (its
    peers would wait for it forever)."""
    returncodes = returncodes or [0] * len(processes)
    try:
        return [
            json.loads(finish(p, timeout, code) or "null")
            for p, code in zip(processes, returncodes, strict=True)
        ]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


def weights(path):
    with np.load(path) as saved:
        return {name: saved[name] for name in saved.files}


@pytest.mark.slow
def test_fit_on_two_workers_equals_one_worker(tmp_path):
    """GPT-2, a BERT classifier and a TextGenerator task: the loss and
    accuracy `fit` reports, and the final weights, equal the 1-worker run's
    at the same global batch; both workers end with identical weights."""
    out = lambda index: tmp_path / f"worker{index}.npz"  # noqa: E731
    two = finish_all(start_workers(2, "fit", out))
    (single,) = finish_all(start_workers(1, "fit", tmp_path / "single.npz"))
    assert [r["replicas"] for r in two] == [2, 2] and single["replicas"] == 1
    for family, metrics in [
        ("gpt", ["loss"]),
        ("text_generator", ["loss"]),
        ("bert_classifier", ["loss", "sparse_categorical_accuracy"]),
    ]:
        for name in metrics:
            for result in two:
                np.testing.assert_allclose(
                    result[family][name], single[family][name], rtol=1e-6, atol=1e-6
                )
        assert two[0][family]["loss"][1] < two[0][family]["loss"][0]
    worker0, worker1 = weights(out(0)), weights(out(1))
    alone = weights(tmp_path / "single.npz")
    for name, value in worker0.items():
        np.testing.assert_array_equal(value, worker1[name], err_msg=name)
        np.testing.assert_allclose(value, alone[name], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_worker_killed_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path):
    """Worker 1 SIGKILLs itself at step 6 (mid-epoch 2); worker 0 is killed
    too, both restart with the same command and continue from worker 0's
    backup of epoch 1. The final weights equal an uninterrupted 2-worker
    run's. Only worker 0 leaves files; the others' temporary folders are
    gone."""
    run, scratch = tmp_path / "run", tmp_path / "scratch"
    out = lambda index: tmp_path / f"resumed{index}.npz"  # noqa: E731
    killed = start_workers(2, "resume", run, out, "--kill-at", "6", scratch=scratch)
    try:
        assert finish(killed[1], TIMEOUT, returncode=-9) == ""
    finally:
        for process in killed:  # worker 0 waits for its dead peer: kill it
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert kt.training.resume_epoch(run) == 1  # the backup of epoch 1
    assert sorted(os.listdir(run)) == ["backup", "model.keras", "random_state.json"]
    restarted = finish_all(start_workers(2, "resume", run, out, scratch=scratch))
    assert [r["start"] for r in restarted] == [4, 4]
    reference = lambda index: tmp_path / f"reference{index}.npz"  # noqa: E731
    finish_all(start_workers(2, "resume", tmp_path / "reference", reference))
    expected = weights(reference(0))
    for index in range(2):
        resumed = weights(out(index))
        assert int(resumed["steps"]) == 12
        for name, value in expected.items():
            if name not in ("start", "steps"):
                np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    # The backups are deleted at the end; worker 0 wrote the model.
    assert sorted(os.listdir(run)) == ["model.keras"]
    assert [os.listdir(scratch / str(index)) for index in range(2)] == [[], []]


@pytest.mark.slow
def test_custom_training_loop_on_two_workers(tmp_path):
    """The custom loop docs/scale.md keeps as an appendix still trains both
    workers in step."""
    out = lambda index: tmp_path / f"worker{index}.npz"  # noqa: E731
    results = finish_all(start_workers(2, "custom", out))
    assert results[0] == results[1] and results[0]["replicas"] == 2
    losses = results[0]["loss"]
    assert len(losses) == 6 and np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    worker0, worker1 = weights(out(0)), weights(out(1))
    for name, value in worker0.items():
        np.testing.assert_array_equal(value, worker1[name], err_msg=name)


def test_check_tf_config():
    config = {
        "cluster": {"worker": ["a:1", "b:2"]},
        "task": {"type": "worker", "index": 1},
    }
    assert kt.training.check_tf_config(json.dumps(config)) == (["a:1", "b:2"], 1)
    bad = [
        "not json",
        json.dumps([]),
        json.dumps({"cluster": {"worker": []}, "task": config["task"]}),
        json.dumps(
            {"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}
        ),
        json.dumps({**config, "task": {"type": "worker", "index": 2}}),
        json.dumps({**config, "task": {"type": "chief", "index": 0}}),
        json.dumps({**config, "task": {"type": "worker", "index": True}}),
        json.dumps({"cluster": config["cluster"]}),
    ]
    for value in bad:
        with pytest.raises(ValueError, match="Received: TF_CONFIG=") as error:
            kt.training.check_tf_config(value)
        assert repr(value) in str(error.value)


def test_check_tf_config_unset(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="Received: TF_CONFIG unset"):
        kt.training.check_tf_config()
    with pytest.raises(ValueError, match="TF_CONFIG unset"):
        kt.training.multi_worker_strategy()


def test_the_workaround_is_on_exactly_while_keras_has_the_bug():
    """Keras 3.15 reduces the first batch and a scalar along axis 0 under a
    multi-worker strategy (keras-team/keras#20585): the probe finds both."""
    assert multi_worker.fit_needs_workaround()
    assert multi_worker.logs_as_vectors({"loss": np.float32(2.0)})["loss"].shape == (1,)


def test_not_in_multi_worker_mode_without_a_cluster():
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()
    assert not multi_worker.in_multi_worker_mode(strategy)
    assert kt.training.is_chief(strategy) and kt.training.is_chief()


def test_every_model_class_and_task_fits_through_the_fit_mixin():
    import keras

    from keras_transformer.models.base import FitMixin

    exported = {
        value
        for module in (kt.models, kt.tasks)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, keras.Model)
    }
    # The classes users build (not the protocols they derive from).
    classes = [c for c in exported if not any(c in o.__bases__ for o in exported)]
    assert {
        "GPT2",
        "BERT",
        "Seq2Seq",
        "ViT",
        "Llama",
        "BERTClassifier",
        "TextGenerator",
        "TextClassifier",
        "Translator",
    } <= {c.__name__ for c in classes}
    assert [c.__name__ for c in classes if not issubclass(c, FitMixin)] == []
