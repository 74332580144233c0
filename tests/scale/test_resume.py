"""A training process killed mid-epoch and restarted ends where an
uninterrupted one does."""

import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.scale.common import finish, start_script


def start(directory, out, *args):
    return start_script("resumable_run.py", directory, out, *args)


def weights(path):
    saved = np.load(path)
    return saved, [saved[f"arr_{i}"] for i in range(len(saved.files) - 2)]


@pytest.mark.slow
def test_killed_mid_epoch_and_restarted_ends_like_an_uninterrupted_run(tmp_path):
    # 3 epochs of 4 steps, dropout 0.1. The crashing run dies after step 6,
    # in the middle of epoch 2, whose last backup is the end of epoch 1.
    reference = start(tmp_path / "reference", tmp_path / "reference.npz")
    crashed = start(tmp_path / "run", tmp_path / "unused.npz", "--crash-at", "6")
    finish(crashed, timeout=240, returncode=3)
    assert kt.training.resume_epoch(tmp_path / "run") == 1
    assert (tmp_path / "run" / "model.keras").exists()  # epoch 1's model
    finish(start(tmp_path / "run", tmp_path / "resumed.npz"), timeout=240)
    finish(reference, timeout=240)

    resumed, resumed_weights = weights(tmp_path / "resumed.npz")
    uninterrupted, uninterrupted_weights = weights(tmp_path / "reference.npz")
    assert int(resumed["start"]) == 4  # the data resumed after step 4...
    assert int(resumed["steps"]) == int(uninterrupted["steps"]) == 12  # ...once
    for a, b in zip(resumed_weights, uninterrupted_weights, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # A completed run leaves only the whole model, holding the final weights.
    assert sorted(os.listdir(tmp_path / "run")) == ["model.keras"]
    assert kt.training.resume_epoch(tmp_path / "run") == 0
    model = keras.saving.load_model(tmp_path / "run" / "model.keras")
    for a, b in zip(model.get_weights(), resumed_weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_resumable_callbacks_layout_and_bad_directory(tmp_path):
    callbacks = kt.training.resumable_callbacks(tmp_path)
    backup, checkpoint = callbacks[1], callbacks[2]
    assert isinstance(backup, keras.callbacks.BackupAndRestore)
    assert backup.backup_dir == str(tmp_path / "backup")
    assert backup.save_freq == "epoch"
    assert isinstance(checkpoint, keras.callbacks.ModelCheckpoint)
    assert checkpoint.filepath == str(tmp_path / "model.keras")
    assert kt.training.resume_epoch(tmp_path) == 0
    with pytest.raises(ValueError, match="directory=''"):
        kt.training.resumable_callbacks("")
    with pytest.raises(ValueError, match="directory=None"):
        kt.training.resume_epoch(None)


def test_a_worker_other_than_worker_0_restores_but_never_writes(tmp_path, monkeypatch):
    """Under a multi-worker strategy, worker 0 writes the run directory; a
    worker that is not worker 0 (here: this process, told so) restores from
    it, saves into temporary folders and deletes them, and leaves the
    directory as it found it."""
    from keras_transformer.training import multi_worker

    ids = np.random.default_rng(0).integers(1, 16, (8, 9)).astype("int32")
    keras.utils.set_random_seed(0)
    model = kt.models.gpt2(16, num_layers=1, num_heads=2, hidden_dim=8,
                           intermediate_dim=16, max_sequence_length=8)  # fmt: skip
    model.compile(
        optimizer=kt.training.AdamW(1e-3),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    run = tmp_path / "run"
    fit = dict(batch_size=8, shuffle=False, verbose=0)
    callbacks = kt.training.resumable_callbacks(run)
    model.fit(ids[:, :-1], ids[:, 1:], epochs=1, callbacks=callbacks, **fit)
    # Worker 0's backup of epoch 1, as a killed run leaves it.
    callbacks[1]._save_model()
    callbacks[0].on_epoch_end(0)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    monkeypatch.setattr(multi_worker, "is_chief", lambda strategy=None: False)
    history = model.fit(ids[:, :-1], ids[:, 1:], epochs=3, callbacks=callbacks, **fit)
    assert len(history.history["loss"]) == 2  # restored: epochs 2 and 3 left
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
    assert list(scratch.iterdir()) == []
