"""`model.fit` under MultiWorkerMirroredStrategy: two worker processes on
127.0.0.1, each with its own TF_CONFIG (scripts/multi_worker.py), compared
with a 1-worker run in this process and with each other, and a resumable
run whose worker 1 dies at step 25 of 40, then whose worker 0 dies while
writing a backup, restarted each time.

One uninterrupted 2-worker run (a module fixture) serves the fit, custom
loop and resume tests."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.training import multi_worker, resume
from tests.scale.common import run_cluster, start_script
from tests.scale.scripts import multi_worker as script

TIMEOUT = 240  # seconds a worker may take, TensorFlow's import included


def run_workers(count, *args, returncodes=None, scratch=None, env=None):
    """Runs `count` workers of scripts/multi_worker.py with `args` and
    returns each one's printed lines. An argument may be a function of the
    worker's index; `env[index]`: more environment for worker `index`;
    `scratch/<index>`: its temporary folder."""

    def start_worker(tf_config, index):
        more = {"TF_CONFIG": tf_config, **(env or {}).get(index, {})}
        if scratch is not None:
            folder = scratch / str(index)
            folder.mkdir(parents=True, exist_ok=True)
            more["TMPDIR"] = str(folder)
        worker_args = [a(index) if callable(a) else a for a in args]
        return start_script("multi_worker.py", *worker_args, env=more)

    outputs = run_cluster(start_worker, count, TIMEOUT, returncodes)
    return [[json.loads(line) for line in out.splitlines()] for out, _ in outputs]


def weights(path):
    with np.load(path) as saved:
        return {name: saved[name] for name in saved.files}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """`(folder, results)` of one uninterrupted 2-worker run of every mode:
    worker i's files in folder/i, its printed result in results[i]."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    results = run_workers(2, "uninterrupted", folder)
    return folder, [lines[-1] for lines in results]


@pytest.mark.slow
def test_fit_on_two_workers_equals_one_worker(uninterrupted, tmp_path):
    """GPT-2, a BERT classifier and a TextGenerator task: the loss and
    accuracy `fit` reports, and the final weights, equal the 1-worker run's
    (this process, default strategy) at the same global batch; both workers
    end with identical weights."""
    folder, results = uninterrupted
    two = [result["fit"] for result in results]
    single = script.fit(tf.distribute.get_strategy(), tmp_path / "single.npz")
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
    worker0 = weights(folder / "0" / "fit.npz")
    worker1 = weights(folder / "1" / "fit.npz")
    alone = weights(tmp_path / "single.npz")
    assert worker0.keys() == alone.keys()
    for name, value in worker0.items():
        np.testing.assert_array_equal(value, worker1[name], err_msg=name)
        np.testing.assert_allclose(value, alone[name], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_custom_training_loop_on_two_workers(uninterrupted):
    """The custom loop docs/scale.md keeps as an appendix still trains both
    workers in step."""
    folder, results = uninterrupted
    custom = [result["custom"] for result in results]
    assert custom[0] == custom[1] and custom[0]["replicas"] == 2
    losses = custom[0]["loss"]
    assert len(losses) == 6 and np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    worker0 = weights(folder / "0" / "custom.npz")
    worker1 = weights(folder / "1" / "custom.npz")
    for name, value in worker0.items():
        np.testing.assert_array_equal(value, worker1[name], err_msg=name)


def backup_files(run):
    return sorted(os.listdir(run / "backup"))


@pytest.mark.slow
def test_workers_killed_twice_resume_to_the_uninterrupted_weights(
    uninterrupted, tmp_path
):
    """4 epochs of 10 steps, dropout 0.1, a backup at every epoch end.

    1. Worker 1 exits right after step 25 (`KT_TEST_KILL_AT_STEP`, in its
       environment only); worker 0, waiting for it, is killed. The backup
       is epoch 2's.
    2. Both restart from step 20; worker 0 exits while writing the backup
       of epoch 3 (new weights written, not their epoch:
       `KT_TEST_KILL_IN_BACKUP`), worker 1 is killed. The previous backup,
       epoch 2's, is the one a restart reads.
    3. Both restart from step 20 again and end with the weights of the
       uninterrupted 2-worker run. Only worker 0 leaves files; the others'
       temporary folders are gone.
    """
    folder, _ = uninterrupted
    run, scratch = tmp_path / "run", tmp_path / "scratch"
    out = lambda index: tmp_path / f"resumed{index}.npz"  # noqa: E731
    killed = resume.TEST_KILL_EXIT_CODE

    def restart(returncodes, env):
        return run_workers(2, "resume", run, out, returncodes=returncodes,
                           scratch=scratch, env=env)  # fmt: skip

    first = restart([None, killed], {1: {resume.KILL_AT_STEP: "25"}})
    assert first[1] == [{"start": 0}]
    assert kt.training.resume_epoch(run) == 2
    assert sorted(os.listdir(run)) == ["backup", "model.keras", "random_state.json"]
    second = restart([killed, None], {0: {resume.KILL_IN_BACKUP: "3"}})
    assert second[0] == [{"start": 20}]
    # Epoch 3's weights are written, its epoch is not: epoch 2's backup is
    # the complete one.
    assert backup_files(run) == [
        "latest.weights.h5",
        "previous.weights.h5",
        "previous_training_metadata.json",
    ]
    assert kt.training.resume_epoch(run) == 2
    third = restart(None, None)
    assert [lines[-1]["start"] for lines in third] == [20, 20]
    expected = weights(folder / "0" / "resume.npz")
    for index in range(2):
        resumed = weights(out(index))
        assert int(resumed["steps"]) == 40
        for name, value in expected.items():
            if name not in ("start", "steps"):
                np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    # The backups are deleted at the end; worker 0 wrote the model.
    assert sorted(os.listdir(run)) == ["model.keras"]
    # The killed workers' save folders were removed by their restarts
    # (TensorFlow's own temporary files of a SIGKILLed process stay).
    assert not list(scratch.glob("*/keras_transformer*"))


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

    from keras_transformer.training.fit import FitMixin

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
