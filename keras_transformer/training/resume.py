"""Resumable `model.fit`: a run that is killed continues where it stopped.

Layout of a run directory:

    backup/              keras.callbacks.BackupAndRestore: weights, optimizer
                         state (step count included) and the epoch reached,
                         the previous backup's too while a new one is written
    random_state.json    dropout random states of the last two backups
    model.keras          the whole model after every epoch

`backup/` and `random_state.json` are deleted when `fit` completes;
`model.keras` stays.

Under a multi-worker strategy the directory is worker 0's: every worker
restores from it, and only worker 0 writes it. The other workers still save
whenever worker 0 does (a save can need every worker), into a temporary
folder that is deleted once written.

Test-only crash points. The kill-and-resume tests set these environment
variables in one worker's environment, to kill it at a chosen moment rather
than at one a timer picks; nothing else should set them:

    KT_TEST_KILL_AT_STEP=N     the process exits (`os._exit`, no clean-up,
                               like SIGKILL) right after global step N;
    KT_TEST_KILL_IN_BACKUP=E   it exits while writing the backup of epoch E,
                               its new weights written and not yet the
                               epoch they belong to.

Either exits with code `TEST_KILL_EXIT_CODE`.
"""

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile

import keras

from keras_transformer.training import multi_worker

BACKUP = "backup"
RANDOM_STATE = "random_state.json"
CHECKPOINT = "model.keras"
# `(weights, epoch)` files of the latest backup, then of the previous one
# (the weights' names must end in ".weights.h5" for Keras to load them).
_BACKUPS = (
    ("latest.weights.h5", "training_metadata.json"),
    ("previous.weights.h5", "previous_training_metadata.json"),
)
KILL_AT_STEP = "KT_TEST_KILL_AT_STEP"
KILL_IN_BACKUP = "KT_TEST_KILL_IN_BACKUP"
TEST_KILL_EXIT_CODE = 86


def resumable_callbacks(directory):
    """Callbacks that make `model.fit` resumable after a crash or preemption.

    Pass them to `fit` in the original run and, unchanged, in the restarted
    one: the restarted `fit` restores the weights, the optimizer state (its
    step count, so learning-rate schedules continue) and the dropout random
    states of the last backup, and continues with the epoch after it. If the
    data depends only on the step (arrays with `shuffle=False`, or the
    stream below), nothing is lost and nothing is repeated: the run ends with
    the weights of an uninterrupted one.

    Backups are taken at the end of every epoch, because Keras 3 restarts an
    interrupted epoch from its first batch (a mid-epoch backup would apply
    that epoch's first batches twice). For long runs, make an epoch a fixed
    number of steps: `fit(dataset.repeat().skip(resume_epoch(directory) *
    steps), steps_per_epoch=steps, ...)`, so a backup is at most `steps`
    steps old and the data resumes where the backup stopped.

    Under `tf.distribute.MultiWorkerMirroredStrategy`, give every worker
    the same callbacks and the same `directory`, on a file system they all
    see (a shared disk): all of them restore from it, worker
    0 alone writes to it, and the others write their copies to temporary
    folders that are deleted at once.

    Args:
        directory: the run directory (created if needed); use one per run.

    Returns:
        A list of callbacks: the random-state backup,
        `keras.callbacks.BackupAndRestore(directory/backup)` and
        `keras.callbacks.ModelCheckpoint(directory/model.keras)`, which keeps
        the latest whole model (add your own `ModelCheckpoint` to keep the
        best one).

    Examples:
        >>> import tempfile
        >>> import keras_transformer as kt
        >>> callbacks = kt.training.resumable_callbacks(tempfile.mkdtemp())
        >>> [type(callback).__name__ for callback in callbacks][1:]
        ['BackupAndRestore', 'ModelCheckpoint']
    """
    _check_directory(directory)
    backup = os.path.join(directory, BACKUP)
    callbacks = [
        # Before BackupAndRestore: at an epoch end the random states of the
        # new backup are written first, so every backup has its states.
        _RandomStateBackup(os.path.join(directory, RANDOM_STATE), backup),
        BackupAndRestore(backup),
        ModelCheckpoint(os.path.join(directory, CHECKPOINT)),
    ]
    if os.environ.get(KILL_AT_STEP):  # test-only (module docstring)
        callbacks.append(_KillAtStep(_test_kill_point(KILL_AT_STEP)))
    return callbacks


def resume_epoch(directory):
    """The epoch a `fit` with `resumable_callbacks(directory)` starts at.

    0 for a new run (or one that completed); otherwise the number of epochs
    the last backup had completed. With `steps_per_epoch=steps`, the run had
    taken `resume_epoch(directory) * steps` steps: skip that many batches of
    a repeated dataset.

    Examples:
        >>> import tempfile
        >>> import keras_transformer as kt
        >>> kt.training.resume_epoch(tempfile.mkdtemp())
        0
    """
    _check_directory(directory)
    return _backup_epoch(os.path.join(directory, BACKUP)) or 0


@contextlib.contextmanager
def _written_by_chief(callback, *attributes):
    """Inside, on a worker other than worker 0 of a multi-worker strategy,
    the callback's path `attributes` point into a temporary folder, which is
    deleted afterwards; on worker 0 (or without such a strategy) they are
    unchanged. The folder's name depends only on the worker and the path,
    so a restarted worker first removes what a killed one left there."""
    strategy = callback.model.distribute_strategy
    if multi_worker.is_chief(strategy):
        yield
        return
    saved = {name: getattr(callback, name) for name in attributes}
    key = f"{multi_worker.worker_index(strategy)}:{saved[attributes[0]]}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), f"keras_transformer_save_{digest}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    try:
        for name, path in saved.items():
            setattr(callback, name, os.path.join(folder, os.path.basename(path)))
        yield
    finally:
        for name, path in saved.items():
            setattr(callback, name, path)
        shutil.rmtree(folder, ignore_errors=True)


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` whose backup survives a crash while
    it is written, and that only worker 0 writes to (and deletes at the end)
    under a multi-worker strategy; every worker restores from its backup.

    Keras writes the new weights over the last backup's, then the epoch they
    belong to: a process killed between the two leaves new weights under the
    old epoch, and the restarted run trains an epoch twice. Here a backup is
    complete once its epoch file is written (atomically, last), and the
    previous complete backup is kept until then: its weights are copied to
    `previous.weights.h5` and its epoch file moved (atomically) to
    `previous_training_metadata.json` before the new weights are written. A
    run restores the latest complete backup and repairs nothing: the next
    backup does.
    """

    def __init__(self, backup_dir):
        super().__init__(backup_dir)
        self._prev_weights_path, self._prev_training_metadata_path = (
            os.path.join(backup_dir, name) for name in _BACKUPS[1]
        )

    def on_train_begin(self, logs=None):
        complete = _complete_backup(self.backup_dir)
        if complete is None:
            return
        latest = self._weights_path, self._training_metadata_path
        self._weights_path, self._training_metadata_path = complete
        try:
            self._load_model()
        finally:
            self._weights_path, self._training_metadata_path = latest

    def _save_model(self):
        with _written_by_chief(
            self,
            "backup_dir",
            "_weights_path",
            "_training_metadata_path",
            "_prev_weights_path",
            "_prev_training_metadata_path",
        ):
            os.makedirs(self.backup_dir, exist_ok=True)
            if os.path.exists(self._training_metadata_path):
                # Keep the complete backup until the new one is.
                shutil.copyfile(self._weights_path, self._prev_weights_path)
                os.replace(
                    self._training_metadata_path, self._prev_training_metadata_path
                )
            self.model.save_weights(self._weights_path, overwrite=True)
            if _test_kill_point(KILL_IN_BACKUP) == self._current_epoch:
                os._exit(TEST_KILL_EXIT_CODE)
            metadata = {"epoch": self._current_epoch, "batch": self._last_batch_seen}
            temporary = self._training_metadata_path + ".tmp"
            with open(temporary, "w") as file:
                json.dump(metadata, file)
            os.replace(temporary, self._training_metadata_path)

    def on_train_end(self, logs=None):
        if multi_worker.is_chief(self.model.distribute_strategy):
            super().on_train_end(logs)


class ModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """`keras.callbacks.ModelCheckpoint` whose file only worker 0 keeps
    under a multi-worker strategy."""

    def _save_model(self, *args, **kwargs):
        with _written_by_chief(self, "filepath"):
            super()._save_model(*args, **kwargs)


class _RandomStateBackup(keras.callbacks.Callback):
    """Backs up the states of the model's seed generators at every epoch end.

    `BackupAndRestore` saves weights and optimizer variables, not seed
    generator states (they are not weights), so without this a resumed run
    would draw other dropout masks than the uninterrupted one. The states of
    the last two epochs are kept, so the one matching the backup is there
    even if the run died between writing the two.
    """

    def __init__(self, path, backup_dir):
        super().__init__()
        self.path = path
        self.backup_dir = backup_dir

    def on_train_begin(self, logs=None):
        epoch = _backup_epoch(self.backup_dir)
        if epoch is None:
            return
        states = self._read().get(str(epoch))
        variables = self._variables()
        if states is None or len(states) != len(variables):
            logging.warning(
                "No dropout random state for the backup of epoch %d in %s; "
                "the resumed run draws new dropout masks.",
                epoch,
                self.path,
            )
            return
        for variable, state in zip(variables, states, strict=True):
            variable.assign(state)

    def on_epoch_end(self, epoch, logs=None):
        # Another worker keeps nothing: it never reads worker 0's file
        # here, which worker 0 deletes when the run ends.
        chief = multi_worker.is_chief(self.model.distribute_strategy)
        saved = self._read() if chief else {}
        saved[str(epoch + 1)] = [
            keras.ops.convert_to_numpy(v).tolist() for v in self._variables()
        ]
        latest = sorted(saved, key=int)[-2:]
        with _written_by_chief(self, "path"):
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            temporary = self.path + ".tmp"
            with open(temporary, "w") as file:
                json.dump({key: saved[key] for key in latest}, file)
            os.replace(temporary, self.path)  # atomic: never half-written

    def on_train_end(self, logs=None):
        chief = multi_worker.is_chief(self.model.distribute_strategy)
        if chief and os.path.exists(self.path):
            os.remove(self.path)

    def _variables(self):
        return [
            v for v in self.model.variables if v.path.endswith("seed_generator_state")
        ]

    def _read(self):
        if not os.path.exists(self.path):
            return {}
        with open(self.path) as file:
            return json.load(file)


def _complete_backup(backup_dir):
    """`(weights, metadata)` paths of the latest complete backup in
    `backup_dir` (the previous one if the latest was being written), or
    None."""
    for weights, metadata in _BACKUPS:
        if os.path.exists(os.path.join(backup_dir, metadata)):
            return os.path.join(backup_dir, weights), os.path.join(backup_dir, metadata)
    return None


def _backup_epoch(backup_dir):
    """The epoch of the latest complete backup in `backup_dir`, or None."""
    complete = _complete_backup(backup_dir)
    if complete is None:
        return None
    with open(complete[1]) as file:
        return int(json.load(file)["epoch"])


class _KillAtStep(keras.callbacks.Callback):
    """Test-only: exits the process right after global step `step`."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            os._exit(TEST_KILL_EXIT_CODE)


def _test_kill_point(name):
    """The positive integer of the test-only variable `name`, or None."""
    value = os.environ.get(name)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(
            f"`{name}` (test-only) must be a positive integer. Received: "
            f"{name}={value!r}"
        )
    return int(value)


def _check_directory(directory):
    if not isinstance(directory, str | os.PathLike) or not os.fspath(directory):
        raise ValueError(
            f"`directory` must be a non-empty path. Received: directory={directory!r}"
        )
