"""`train --distribute`: the `tf.distribute` strategy a run trains under.

`mirrored` splits each batch over this machine's devices; `multi-worker`
over the workers that `TF_CONFIG` lists, each running the same command.
Worker 0 (the chief) prints, writes `--output` and keeps the backups that
`--resume` continues from; every other worker trains in step with it in a
temporary folder that it deletes at the end, and prints nothing.
"""

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile

import tensorflow as tf

from keras_transformer import training
from keras_transformer.cli.errors import CommandError

CHOICES = ("none", "mirrored", "multi-worker")


def check_environment(distribute):
    """Checks what `--distribute` needs before any work (a `TF_CONFIG` for
    multi-worker) and returns this process's worker index (0: the chief,
    as without multi-worker)."""
    if distribute != "multi-worker":
        return 0
    return _checked_tf_config()[1]


def check_batch(distribute, batch_size):
    """Checks, before any work, that a multi-worker global batch splits
    over its workers (each has one replica or more)."""
    if distribute == "multi-worker":
        workers, _ = _checked_tf_config()
        try:
            training.check_global_batch(batch_size, len(workers))
        except ValueError as error:
            raise CommandError(f"--batch-size {batch_size}: {error}") from None


def _checked_tf_config():
    try:
        return training.check_tf_config()
    except ValueError as error:
        raise CommandError(f"--distribute multi-worker: {error}") from None


def make_strategy(distribute, batch_size):
    """The strategy of `--distribute` (None for `none`), once its global
    batch is known to split evenly over its replicas. A multi-worker
    strategy waits here until every worker has started."""
    if distribute == "none":
        return None
    if distribute == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = training.multi_worker_strategy()
    try:
        training.check_global_batch(batch_size, strategy)
    except ValueError as error:
        raise CommandError(f"--batch-size {batch_size}: {error}") from None
    return strategy


def peer_failed(distribute, work):
    """Whether a failed multi-worker run keeps its backup: when a worker
    dies, the others fail too (`UnavailableError`), and the restart with
    `--resume` continues from worker 0's last backup."""
    backup = os.path.join(work, "run", "backup")
    return distribute == "multi-worker" and os.path.isdir(backup)


@contextlib.contextmanager
def worker_folder(output, index):
    """The work folder of worker `index` (not 0) of the run writing
    `output`: a temporary folder, deleted on the way out, whose prints go
    nowhere and which holds the process's temporary files too. Its name
    depends only on the two, so a restarted worker first removes what a
    killed one left there."""
    digest = hashlib.sha256(os.path.abspath(output).encode()).hexdigest()[:16]
    folder = os.path.join(
        tempfile.gettempdir(), f"keras_transformer_worker{index}_{digest}"
    )
    shutil.rmtree(folder, ignore_errors=True)
    scratch = os.path.join(folder, "tmp")
    os.makedirs(scratch)
    previous = tempfile.tempdir
    tempfile.tempdir = scratch
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            yield folder
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(folder, ignore_errors=True)
        sys.stdout.flush()
